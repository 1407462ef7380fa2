"""Result types shared by every decoder (ours and the baselines' adapters)."""
from __future__ import annotations

import math
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


def check_prefix_search_options(blank_id, nbest, beam_size: int, blank_skip_threshold) -> None:
    """The options the CTC prefix beam searches share (decoders.ctc, decoders.ctc_lm): a one-line ValueError for a
    negative or non-int blank id, nbest outside [1, beam_size], or a NaN / negative blank-skip threshold."""
    if not isinstance(blank_id, int) or blank_id < 0:
        raise ValueError(f"blank_id must be a non-negative int, got {blank_id!r}")
    if not isinstance(nbest, int) or not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest must be an int in [1, beam_size={beam_size}], got {nbest!r}")
    thr = float(blank_skip_threshold)
    if math.isnan(thr) or thr < 0.0:
        raise ValueError(f"blank_skip_threshold must be a probability >= 0 (>= 1 disables), got {thr}")
