"""Result types shared by every decoder (ours and the baselines' adapters)."""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence


class Hypothesis(NamedTuple):
    """One decoded hypothesis.

    tokens: log-prob column ids of the emitted (collapsed, blank-free) tokens.
    words: word strings (empty for token-level decoders that were given no detokenizer).
    score: total log-domain score (higher is better); its meaning is decoder-specific and documented
        by each decoder (CTC posterior, graph + acoustic score, ...).
    timesteps: frame index of each emitted token, when the decoder tracks it.
    word_start_frames / word_end_frames: per word, the frame it starts at and the frame after its end, when
        the decoder tracks word times (lattice decoders; MBR gives averaged, fractional frames).
    word_confidences: per word, its posterior probability (MBR decoding), when the decoder computes it.
    nbest: the decoder's n-best list (this hypothesis first), when it was asked for one.
    """

    tokens: Sequence[int]
    words: Sequence[str]
    score: float
    timesteps: Optional[Sequence[int]] = None
    word_start_frames: Optional[Sequence[float]] = None
    word_end_frames: Optional[Sequence[float]] = None
    word_confidences: Optional[Sequence[float]] = None
    nbest: Optional[Sequence["Hypothesis"]] = None
