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
    """

    tokens: Sequence[int]
    words: Sequence[str]
    score: float
    timesteps: Optional[Sequence[int]] = None
