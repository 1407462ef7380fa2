"""Riva's 1-best reading (eval/adapters/riva.py: decode_best / nbest_best_hypotheses), on the CPU with fake
NBestResult objects: riva-asrlib-decoder 0.4.4's decode_nbest returns per utterance a list of NBestResult (best
first; `.words` are word IDs of the graph's words.txt, `.score`), as its test suite reads it
(riva/asrlib/decoder/test_graph_construction.py: `word_id_to_word_str[word] for word in result[0].words`).
The H200 run that read it as tuples scored `<...NBestResult object at 0x...>` strings (101.81 % WER)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from eval.adapters.riva import RivaAdapter, nbest_best_hypotheses, read_word_symbols


def nb(words, score):
    """A stand-in for riva.asrlib.decoder.python_decoder.NBestResult (the attributes the reading uses, plus two)."""
    return SimpleNamespace(words=list(words), score=score, ilabels=[], word_start_times_seconds=[])


@pytest.fixture
def words_txt(tmp_path):
    p = tmp_path / "words.txt"
    p.write_text("<eps> 0\nalpha 1\nbeta 2\ngamma 3\n#0 4\n<s> 5\n</s> 6\n")
    return p


def test_read_word_symbols(words_txt, tmp_path):
    m = read_word_symbols(words_txt)
    assert m[0] == "<eps>" and m[1] == "alpha" and m[3] == "gamma" and len(m) == 7
    bad = tmp_path / "bad.txt"
    bad.write_text("alpha\n")
    with pytest.raises(ValueError, match="word id"):
        read_word_symbols(bad)


def test_first_entry_word_ids_mapped(words_txt):
    m = read_word_symbols(words_txt)
    res = [[nb([1, 3, 2], -4.5), nb([1, 2], -6.0)],  # best first: the first entry is read, not the better-looking
           [nb([2], -1.0)],
           [],  # no n-best entry (no path): no words, not a crash
           [nb([0, 3], -2.0)]]  # <eps> never reaches the words
    hyps = nbest_best_hypotheses(res, m, torch.tensor([5, 3, 0, 4]))
    assert [h.words for h in hyps] == [["alpha", "gamma", "beta"], ["beta"], [], ["gamma"]]
    assert [h.score for h in hyps[:2]] == [-4.5, -1.0] and hyps[2].score == float("-inf")
    assert all(isinstance(w, str) and "NBestResult" not in w for h in hyps for w in h.words)


def test_refusals(words_txt):
    m = read_word_symbols(words_txt)
    with pytest.raises(RuntimeError, match="no words for any utterance"):
        nbest_best_hypotheses([[nb([], 0.0)], []], m, torch.tensor([4, 2]))
    # a batch without frames has nothing to say
    assert [h.words for h in nbest_best_hypotheses([[nb([], 0.0)]], m, torch.tensor([0]))] == [[]]
    with pytest.raises(ValueError, match="word ID 99"):
        nbest_best_hypotheses([[nb([1, 99], 0.0)]], m)
    with pytest.raises(TypeError, match="NBestResult expected"):  # the old misreading's tuple layout
        nbest_best_hypotheses([[(-1.0, [("alpha", 0.0, 0.1)])]], m)


class FakeRivaDecoder:
    """decode_nbest as BatchedMappedDecoderCuda gives it: one list of NBestResult per utterance of the call."""

    def __init__(self, per_utt):
        self.per_utt, self.calls = per_utt, []

    def decode_nbest(self, lp, lengths):
        assert lp.dtype == torch.float32 and lengths.dtype == torch.int64
        start = sum(self.calls)
        self.calls.append(lp.shape[0])
        return [self.per_utt[start + i] for i in range(lp.shape[0])]


def _fake_adapter(per_utt, words_txt, max_batch):
    a = RivaAdapter.__new__(RivaAdapter)  # __init__ needs CUDA and the riva package
    a.acoustic_scale, a.max_batch, a.device = 1.0, max_batch, torch.device("cpu")
    a.id_to_word = read_word_symbols(words_txt)
    a.decoder = FakeRivaDecoder(per_utt)
    return a


def test_bench_riva_best_adapter_reads_decode_best(words_txt):
    from eval.bench.wfst_mbr_bench import RivaBestAdapter

    per_utt = [[nb([1], -1.0)], [nb([2, 3], -2.0)], [nb([3], -3.0)]]
    best = RivaBestAdapter.__new__(RivaBestAdapter)
    best.inner = _fake_adapter(per_utt, words_txt, max_batch=2)
    hyps = best.decode(torch.zeros(3, 4, 5), torch.tensor([4, 4, 2]))
    assert [h.words for h in hyps] == [["alpha"], ["beta", "gamma"], ["gamma"]]
    assert best.inner.decoder.calls == [2, 1]  # batches of max_batch_size
    # a whole batch (one decode_nbest call) without words is refused, not scored as deletions
    best.inner = _fake_adapter([[nb([1], -1.0)], [nb([2], -1.0)], [nb([], 0.0)]], words_txt, max_batch=2)
    with pytest.raises(RuntimeError, match="no words"):
        best.decode(torch.zeros(3, 4, 5), torch.tensor([4, 4, 2]))


def test_riva_config_declares_nbest():
    from eval.config import decoder_config

    cfg = decoder_config("riva")
    assert cfg.nbest == 1
    with pytest.raises(ValueError):
        decoder_config("riva", {"nbest": "many"})
