"""Greedy CTC decoding (best column per frame, merge repeats, drop blanks): the no-LM floor.

Score: the log-probability of the greedy frame path, sum over valid frames of max_v log_probs[t, v].
Runs on whatever device the log-probs are on; no word boosting (raises NotImplementedError when asked).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from decoders.types import Hypothesis
from eval.adapters.base import DecodingContext, register_decoder, typed_config


@dataclass
class GreedyConfig:
    name: str = "greedy"


CONFIG_SCHEMA = GreedyConfig


def greedy_ctc(
    log_probs: torch.Tensor, lengths: torch.Tensor, blank_id: int
) -> tuple[list[list[int]], list[list[int]], torch.Tensor]:
    """Batched greedy CTC. Returns (tokens per utterance, their frame indices, path scores (B,))."""
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be (B, T, V), got shape {tuple(log_probs.shape)}")
    if lengths.dim() != 1 or lengths.shape[0] != log_probs.shape[0]:
        raise ValueError(f"lengths must be (B,) with B={log_probs.shape[0]}, got {tuple(lengths.shape)}")
    batch, frames, _ = log_probs.shape
    best_logp, best = log_probs.max(dim=-1)  # (B, T), (B, T)
    lengths_dev = lengths.to(best.device)
    valid = torch.arange(frames, device=best.device)[None, :] < lengths_dev[:, None]  # (B, T)
    scores = torch.where(valid, best_logp.float(), torch.zeros((), device=best.device)).sum(dim=1)  # (B,)
    prev = torch.cat([torch.full((batch, 1), -1, device=best.device, dtype=best.dtype), best[:, :-1]], dim=1)
    emit = valid & (best != blank_id) & (best != prev)  # (B, T)
    best_cpu, emit_cpu = best.cpu(), emit.cpu()
    tokens, times = [], []
    for b in range(batch):
        idx = torch.nonzero(emit_cpu[b], as_tuple=False).flatten()
        times.append(idx.tolist())
        tokens.append(best_cpu[b, idx].tolist())
    return tokens, times, scores.cpu()


class GreedyDecoder:
    name = "greedy"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("greedy", cfg)
        self.ctx = ctx
        self.tokens = ctx.tokens

    def decode(
        self, log_probs: torch.Tensor, lengths: torch.Tensor, boosts: Optional[Sequence[dict]] = None
    ) -> list[Hypothesis]:
        if boosts and any(boosts):
            raise NotImplementedError("greedy decoding has no LM, so it cannot apply word boosts")
        tokens, times, scores = greedy_ctc(log_probs, lengths, self.tokens.blank_id)
        return [
            Hypothesis(tokens=t, words=self.tokens.decode(t).split(), score=float(s), timesteps=ts)
            for t, ts, s in zip(tokens, times, scores.tolist())
        ]


@register_decoder("greedy")
def build(cfg, ctx: DecodingContext) -> GreedyDecoder:
    return GreedyDecoder(cfg, ctx)
