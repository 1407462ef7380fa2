"""Acoustic source over the CTC posterior simulator of the synthetic workload (`recipes.simulator`).

Each dataset ("clean", "other") has its own simulator difficulty (`Workload.simulator_config(set)`);
the simulator is seeded per utterance id, so the same utterance always yields the same log-probs.
The time spent simulating is reported as the batch's acoustic time (it stands where a model's forward
pass would be, so "end-to-end" RTFx on this source is a plumbing check, not a model number).
"""
from __future__ import annotations

from typing import Iterator, Optional, Sequence

import numpy as np
import torch

from eval.acoustic.base import AcousticBatch, Utterance
from eval.metrics import Stopwatch, iter_chunks
from recipes.tokens import TokenSet

# padded frames: certain blank (finite, so no kernel ever sees -inf - -inf)
_PAD_LOGP = -30.0


def pad_log_probs(arrays: Sequence[np.ndarray], blank_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """List of (T_i, V) arrays -> (B, T_max, V) float32 tensor + (B,) int64 lengths."""
    if not arrays:
        raise ValueError("pad_log_probs: empty batch")
    vocab = arrays[0].shape[1]
    lengths = torch.tensor([a.shape[0] for a in arrays], dtype=torch.int64)
    t_max = max(int(lengths.max()), 1)
    out = torch.full((len(arrays), t_max, vocab), _PAD_LOGP, dtype=torch.float32)  # (B, T, V)
    out[:, :, blank_id] = 0.0
    for i, a in enumerate(arrays):
        if a.shape[1] != vocab:
            raise ValueError(f"utterance {i}: vocabulary {a.shape[1]} != {vocab}")
        out[i, : a.shape[0]] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    return out, lengths


class SimulatorSource:
    """Yields simulated log-prob batches for one dataset of the workload."""

    def __init__(self, tokens: TokenSet, simulator_config, device: str = "cpu", frame_shift_s: float = 0.04):
        self.tokens = tokens
        self.simulator_config = simulator_config
        self.device = device
        self.frame_shift_s = float(getattr(simulator_config, "frame_shift_s", frame_shift_s))

    def batches(self, utterances: Sequence[Utterance], batch_size: int) -> Iterator[AcousticBatch]:
        from recipes.simulator import simulate_utterance

        for chunk in iter_chunks(list(utterances), batch_size):
            watch = Stopwatch(self.device)  # the one timer (eval.metrics); syncs on CUDA
            with watch:
                arrays = [
                    simulate_utterance(u.text, u.duration, self.tokens, self.simulator_config, key=u.id)
                    for u in chunk
                ]
                log_probs, lengths = pad_log_probs(arrays, self.tokens.blank_id)
                if self.device != "cpu":
                    log_probs = log_probs.to(self.device, non_blocking=True)
                    lengths = lengths.to(self.device)
            yield AcousticBatch(
                utterances=list(chunk),
                log_probs=log_probs,
                lengths=lengths,
                acoustic_seconds=watch.wall_seconds,
            )


def build_source(cfg, *, workload, dataset: str, tokens: Optional[TokenSet] = None, device: str = "cpu",
                 manifest_path=None):
    """The simulator for `dataset` of `workload` (a `recipes.workload.Workload`); it simulates from the
    workload's own transcripts, so `manifest_path` is not read."""
    if workload is None:
        raise ValueError("the simulator acoustic source needs the synthetic workload (data.manifests must be empty)")
    if dataset not in workload.sets:
        raise ValueError(f"dataset {dataset!r} is not in the workload; valid choices: {sorted(workload.sets)}")
    if tokens is None:
        tokens = workload.token_set(cfg.model.token_kind, cfg.model.blank)
    return SimulatorSource(tokens, workload.simulator_config(dataset), device=device)
