"""TokenSet round trips (char and BPE, blank first and last) on the workload's vocabulary."""
import pytest

from recipes.tokens import BLANK_SYMBOL, WORD_START
from recipes.workload import prepare_workload


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # one tiny workload per test session, shared by the test_workload_* modules (cached on the 2nd call)
    return prepare_workload("tiny", tmp_path_factory.getbasetemp() / "shared_workload", seed=0)


@pytest.mark.parametrize("kind", ["char", "bpe"])
@pytest.mark.parametrize("blank", ["first", "last"])
def test_round_trip(tiny, kind, blank):
    ts = tiny.token_set(kind, blank)
    assert ts.tokens[ts.blank_id] == BLANK_SYMBOL
    assert ts.blank_id == (0 if blank == "first" else ts.vocab_size - 1)
    for u in tiny.utterances("clean")[:50] + tiny.utterances("other")[:50]:
        cols = ts.encode(u["text"])
        assert ts.blank_id not in cols
        assert all(0 <= c < ts.vocab_size for c in cols)
        assert ts.decode(cols) == u["text"]
        # blanks interleaved (as after CTC collapse of a path) are ignored
        assert ts.decode([x for c in cols for x in (c, ts.blank_id)]) == u["text"]


def test_char_inventory(tiny):
    ts = tiny.token_set("char")
    assert ts.vocab_size == 29 and " " in ts.tokens and "'" in ts.tokens
    assert ts.tokens[:-1] == [" "] + list("abcdefghijklmnopqrstuvwxyz'")


def test_bpe_inventory_and_same_columns_shifted(tiny):
    last, first = tiny.token_set("bpe", "last"), tiny.token_set("bpe", "first")
    assert last.vocab_size == first.vocab_size == 129
    assert any(t.startswith(WORD_START) for t in last.tokens)
    text = tiny.utterances("clean")[0]["text"]
    assert [c + 1 for c in last.encode(text)] == first.encode(text)
    assert last.tokens[:-1] == first.tokens[1:]


def test_bad_kind(tiny):
    with pytest.raises(ValueError, match="valid choices"):
        tiny.token_set("wordpiece")
    with pytest.raises(ValueError, match="blank"):
        tiny.token_set("char", "middle")
