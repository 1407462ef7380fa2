"""The acoustic-source protocol: a dataset in, batches of CTC log-probs out.

Implementations: the posterior simulator (synthetic workload), the log-prob cache, NeMo CTC models.
Every source knows its token set (vocabulary, blank position) and frame shift, so decoders and graph
recipes agree with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional, Protocol, Sequence

import torch

from recipes.tokens import TokenSet


@dataclass
class Utterance:
    """One manifest entry (NeMo manifest fields, plus an id)."""

    id: str
    text: str
    duration: float  # seconds of audio
    audio_filepath: Optional[str] = None


@dataclass
class AcousticBatch:
    utterances: list[Utterance]
    log_probs: torch.Tensor  # (B, T, V) natural-log posteriors, float32 or float16, on the source's device
    lengths: torch.Tensor  # (B,) int64, frames per utterance
    acoustic_seconds: float = 0.0  # wall time the source spent producing this batch (features + model)
    stage_memory_bytes: dict = field(default_factory=dict)  # peak CUDA memory per stage, when known

    @property
    def audio_seconds(self) -> float:
        return float(sum(u.duration for u in self.utterances))


class AcousticSource(Protocol):
    tokens: TokenSet
    frame_shift_s: float  # seconds per output frame (subsampling x window stride)

    def batches(self, utterances: Sequence[Utterance], batch_size: int) -> Iterator[AcousticBatch]: ...
