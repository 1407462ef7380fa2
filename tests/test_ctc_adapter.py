"""The `ctc_beam` harness adapter: words come from detokenizing the best prefix; blank last (NeMo) works."""
from __future__ import annotations

import math

import pytest
import torch

from eval.adapters.base import DecodingContext, build_decoder
from recipes.tokens import TokenSet


def _spell(tokens: TokenSet, text: str, frames_per_char: int = 3) -> torch.Tensor:
    """(1, T, V) log-probs that spell `text` with a blank frame between characters."""
    cols = tokens.encode(text)
    T = len(cols) * (frames_per_char + 1)
    lp = torch.full((T, tokens.vocab_size), math.log(0.01 / (tokens.vocab_size - 1)))
    t = 0
    for c in cols:
        for _ in range(frames_per_char):
            lp[t, c] = math.log(0.99)
            t += 1
        lp[t, tokens.blank_id] = math.log(0.99)
        t += 1
    return lp.log_softmax(-1).unsqueeze(0)


@pytest.mark.parametrize("blank", ["first", "last"])
def test_ctc_beam_adapter_words(blank):
    tokens = TokenSet.from_chars("abcdefghijklmnopqrstuvwxyz'", blank=blank)
    dec = build_decoder("ctc_beam", {"beam_size": 4}, DecodingContext(tokens=tokens))
    lp = _spell(tokens, "hello world")
    hyps = dec.decode(lp, torch.tensor([lp.shape[1]]))
    assert hyps[0].words == ["hello", "world"]
    assert tokens.decode(hyps[0].tokens) == "hello world"
    assert hyps[0].score < 0
    with pytest.raises(NotImplementedError):
        dec.decode(lp, torch.tensor([lp.shape[1]]), boosts=[{"hello": 2.0}])
