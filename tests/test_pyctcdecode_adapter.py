"""The pyctcdecode baseline adapter (eval/adapters/pyctcdecode_adapter.py): label mapping for char and BPE token sets,
decoding of spelled words, the LM's units (alpha multiplies natural-log scores), the ARPA unigram list, hotwords, bad
configs, and the unavailable rows. CPU only; skipped when pyctcdecode (or, for the LM tests, kenlm) is not importable."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

from eval.adapters.base import DecodingContext, build_decoder
from recipes.tokens import TokenSet

pytest.importorskip("pyctcdecode")

from eval.adapters.pyctcdecode_adapter import arpa_unigrams, pyctcdecode_labels  # noqa: E402

LN10 = math.log(10.0)

# A bigram ARPA over {cab, cob, ab}; "ab" and "</s>" have no back-off weight (two fields), which pyctcdecode's own
# unigram reader drops. log10 values chosen so the scores below can be written out by hand:
#   cab: p(cab|<s>) -0.2, p(</s>|cab) -0.3                       -> -0.5
#   cob: p(cob|<s>) -1.5, p(</s>|cob) -0.3                       -> -1.8
#   ab:  bo(<s>) -0.3 + p(ab) -1.5, bo(ab) 0 + p(</s>) -1.0      -> -2.8
ARPA = """\\data\\
ngram 1=6
ngram 2=4

\\1-grams:
-99.0\t<s>\t-0.3
-1.0\t</s>
-3.0\t<unk>\t0
-1.0\tcab\t-0.1
-2.0\tcob\t-0.1
-1.5\tab

\\2-grams:
-0.2\t<s> cab
-1.5\t<s> cob
-0.3\tcab </s>
-0.3\tcob </s>

\\end\\
"""
LM10 = {"cab": -0.5, "cob": -1.8, "ab": -2.8}


@pytest.fixture()
def arpa(tmp_path):
    p = tmp_path / "lm.arpa"
    p.write_text(ARPA, encoding="utf-8")
    return p


def _chars(blank="first") -> TokenSet:
    return TokenSet.from_chars(list("abco"), blank=blank)


def _spell(tokens: TokenSet, frames: list[dict]) -> np.ndarray:
    """(T, V) log-probs: each frame a {token string: probability} dict, the rest of the mass spread evenly (each
    other column far below pyctcdecode's token_min_logp -5, so only the listed tokens are tried)."""
    V = tokens.vocab_size
    out = np.empty((len(frames), V), dtype=np.float64)
    for t, f in enumerate(frames):
        rest = (1.0 - sum(f.values())) / (V - len(f))
        out[t] = rest
        for tok, p in f.items():
            out[t, tokens.tokens.index(tok)] = p
    assert np.all(out > 0) and np.allclose(out.sum(1), 1.0)
    return np.log(out).astype(np.float32)


def _decode(decoder, lp: np.ndarray, boosts=None):
    x = torch.from_numpy(lp)[None]
    return decoder.decode(x, torch.tensor([x.shape[1]]), boosts=boosts)[0]


# "c", then a vowel the acoustics slightly prefer as "o", then "b": cob by the acoustics, cab by the LM
AMBIGUOUS = [{"c": 0.999}, {"a": 0.45, "o": 0.549}, {"b": 0.999}]


def _path_logp(lp: np.ndarray, tokens: TokenSet, spelling: str) -> float:
    return float(sum(lp[t, tokens.tokens.index(ch)] for t, ch in enumerate(spelling)))


# ---------------------------------------------------------------------------------------------------------
# labels
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("blank", ["first", "last"])
def test_char_labels_are_the_characters_with_blank_empty(blank):
    tokens = _chars(blank)
    m = pyctcdecode_labels(tokens)
    want = [("" if i == tokens.blank_id else t) for i, t in enumerate(tokens.tokens)]
    assert list(m.labels) == want and m.keep == tuple(range(tokens.vocab_size)) and m.folded == ()
    assert m.labels[m.blank_index] == ""
    dec = build_decoder("pyctcdecode", {"use_lm": False}, DecodingContext(tokens=tokens))
    assert dec.decoder._alphabet.is_bpe is False and list(dec.decoder._alphabet.labels) == want


def test_bpe_labels_map_unknown_and_fold_control_pieces_into_blank():
    tokens = TokenSet(tokens=["<unk>", "\u2581c", "ab", "\u2581ab", "<s>", "</s>", "<blk>"], blank_id=6, kind="bpe")
    m = pyctcdecode_labels(tokens)
    assert m.labels == ("\u2581\u2047\u2581", "\u2581c", "ab", "\u2581ab", "")
    assert m.keep == (0, 1, 2, 3, 6) and m.folded == (4, 5) and m.blank_index == 4
    lp = np.log(np.array([[0.1, 0.1, 0.1, 0.1, 0.2, 0.1, 0.3]], dtype=np.float64))
    np.testing.assert_allclose(m.columns(lp), np.log([[0.1, 0.1, 0.1, 0.1, 0.6]]))
    dec = build_decoder("pyctcdecode", {"use_lm": False}, DecodingContext(tokens=tokens))
    assert dec.decoder._alphabet.is_bpe is True
    # "▁ab <s> ▁ab": the control piece separates the repeat as a blank would (sentencepiece decodes it to nothing)
    frames = [{"\u2581c": 0.99}, {"ab": 0.99}, {"\u2581ab": 0.99}, {"<s>": 0.99}, {"\u2581ab": 0.99}, {"<unk>": 0.99}]
    h = _decode(dec, _spell(tokens, frames))
    assert h.words == ["cab", "ab", "ab", "\u2047"]
    assert h.word_start_frames == [0.0, 2.0, 4.0, 5.0] and h.word_end_frames == [2.0, 3.0, 5.0, 6.0]
    assert h.tokens == []


def test_sentencepiece_token_set_decodes_a_spelled_sentence_like_its_detokenizer(tmp_path):
    sp = pytest.importorskip("sentencepiece")
    text = ["the cat sat", "a cat sat on the mat", "the hat", "that cat", "on a mat"] * 20
    (tmp_path / "c.txt").write_text("\n".join(text))
    sp.SentencePieceTrainer.train(input=str(tmp_path / "c.txt"), model_prefix=str(tmp_path / "bpe"), vocab_size=24,
                                  model_type="bpe", character_coverage=1.0, minloglevel=2)  # <unk>, <s>, </s>
    for blank in ("first", "last"):
        tokens = TokenSet.from_sentencepiece(tmp_path / "bpe.model", blank=blank)
        m = pyctcdecode_labels(tokens)
        folded = {tokens.tokens[c] for c in m.folded}
        assert folded == {"<s>", "</s>"} and "\u2581\u2047\u2581" in m.labels
        assert len(m.labels) == tokens.vocab_size - 2
        dec = build_decoder("pyctcdecode", {"use_lm": False}, DecodingContext(tokens=tokens))
        sentence = "a cat sat on the mat that hat"
        cols = tokens.encode(sentence)
        frames = []
        for c in cols:
            frames += [{tokens.tokens[c]: 0.99}, {"<blk>": 0.99}]
        h = _decode(dec, _spell(tokens, frames))
        assert " ".join(h.words) == sentence == tokens.decode(cols)


def test_labels_pyctcdecode_cannot_represent_are_refused():
    with pytest.raises(ValueError, match="byte-fallback"):
        pyctcdecode_labels(TokenSet(tokens=["\u2581a", "<0x41>", "<blk>"], blank_id=2, kind="bpe"))
    with pytest.raises(ValueError, match="read the alphabet as BPE"):
        pyctcdecode_labels(TokenSet(tokens=[" ", "a", "\u2581", "<blk>"], blank_id=3, kind="char"))
    with pytest.raises(ValueError, match="without any"):
        pyctcdecode_labels(TokenSet(tokens=["a", "b", "<blk>"], blank_id=2, kind="bpe"))


# ---------------------------------------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------------------------------------

def test_no_lm_decodes_spelled_words_and_the_acoustically_best_word():
    tokens = _chars()
    dec = build_decoder("pyctcdecode", {"use_lm": False}, DecodingContext(tokens=tokens))
    frames = [{"c": 0.99}, {"a": 0.99}, {"<blk>": 0.99}, {"b": 0.99}, {" ": 0.99}, {"a": 0.99}, {"b": 0.99},
              {"b": 0.99}]
    h = _decode(dec, _spell(tokens, frames))
    assert h.words == ["cab", "ab"] and h.word_start_frames == [0.0, 5.0] and h.word_end_frames == [4.0, 8.0]
    lp = _spell(tokens, AMBIGUOUS)
    h = _decode(dec, lp)
    assert h.words == ["cob"]
    assert h.score == pytest.approx(_path_logp(lp, tokens, "cob"), abs=1e-5)  # no LM: the acoustic path alone


def test_lm_prefers_the_lm_likely_word_with_the_exact_natural_log_score(arpa):
    """alpha multiplies the natural-log LM score (pyctcdecode scales KenLM's log10 by ln 10), beta is added per word:
    the combined score is acoustic + lm_weight * ln(10) * log10 p + word_score. With lm_weight read as a log10 weight
    (no ln 10) the score would differ by 0.5 * (ln 10 - 1) * 0.5 = 0.33."""
    pytest.importorskip("kenlm")
    kenlm = sys.modules["kenlm"]
    m = kenlm.Model(str(arpa))
    for word, lp10 in LM10.items():
        assert m.score(word, bos=True, eos=True) == pytest.approx(lp10, abs=1e-6)  # the hand values above
    tokens = _chars()
    ctx = DecodingContext(tokens=tokens, arpa_path=arpa)
    dec = build_decoder("pyctcdecode", {"lm_weight": 0.5, "word_score": 1.5}, ctx)
    lp = _spell(tokens, AMBIGUOUS)
    h = _decode(dec, lp)
    assert h.words == ["cab"]
    want = _path_logp(lp, tokens, "cab") + 0.5 * LN10 * LM10["cab"] + 1.5
    assert h.score == pytest.approx(want, abs=1e-5)
    # "ab" has no back-off weight in the ARPA: it is in-vocabulary (pyctcdecode's own reader would drop it and add
    # unk_score_offset, -10 log10 = -11.5 nats at this lm_weight)
    lp = _spell(tokens, [{"a": 0.99}, {"b": 0.99}])
    h = _decode(dec, lp)
    assert h.words == ["ab"]
    assert h.score == pytest.approx(_path_logp(lp, tokens, "ab") + 0.5 * LN10 * LM10["ab"] + 1.5, abs=1e-5)
    # lm_weight 0: the LM is ignored and the acoustics win again
    assert _decode(build_decoder("pyctcdecode", {"lm_weight": 0.0, "word_score": 0.0}, ctx), _spell(tokens, AMBIGUOUS)
                   ).words == ["cob"]


def test_arpa_unigrams_keep_words_without_a_back_off_weight(arpa):
    from pyctcdecode.language_model import load_unigram_set_from_arpa

    assert arpa_unigrams(arpa) == ["cab", "cob", "ab"]
    assert "ab" not in load_unigram_set_from_arpa(str(arpa))  # the pyctcdecode behaviour the adapter works around


def test_hotwords_boost_a_word_by_the_boost_value():
    tokens = _chars()
    dec = build_decoder("pyctcdecode", {"use_lm": False}, DecodingContext(tokens=tokens))
    lp = _spell(tokens, AMBIGUOUS)
    h = _decode(dec, lp, boosts=[{"cab": 1.0}])
    assert h.words == ["cab"] and h.score == pytest.approx(_path_logp(lp, tokens, "cab") + 1.0, abs=1e-5)
    assert _decode(dec, lp, boosts=[{"cab": 0.1}]).words == ["cob"]  # less than the acoustic gap ln(0.549/0.45)
    assert _decode(dec, lp, boosts=[{}]).words == ["cob"]
    with pytest.raises(NotImplementedError, match="one hotword_weight"):
        _decode(dec, lp, boosts=[{"cab": 1.0, "ab": 2.0}])


def test_batches_with_padding_and_empty_rows():
    tokens = _chars()
    dec = build_decoder("pyctcdecode", {"use_lm": False}, DecodingContext(tokens=tokens))
    a = _spell(tokens, [{"c": 0.99}, {"a": 0.99}, {"b": 0.99}, {" ": 0.99}, {"a": 0.99}, {"b": 0.99}])
    b = _spell(tokens, [{"a": 0.99}, {"b": 0.99}])
    x = torch.full((3, a.shape[0], tokens.vocab_size), -30.0)
    x[0], x[1, :2] = torch.from_numpy(a), torch.from_numpy(b)
    hyps = dec.decode(x, torch.tensor([6, 2, 0]))
    assert [h.words for h in hyps] == [["cab", "ab"], ["ab"], []]


@pytest.mark.slow
def test_worker_processes_give_the_same_hypotheses(arpa):
    pytest.importorskip("kenlm")
    tokens = _chars()
    ctx = DecodingContext(tokens=tokens, arpa_path=arpa)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(5, 12, tokens.vocab_size)).astype(np.float32) * 3).log_softmax(-1)
    lengths = torch.tensor([12, 9, 12, 4, 7])
    one = build_decoder("pyctcdecode", {"num_processes": 1}, ctx).decode(x, lengths)
    two = build_decoder("pyctcdecode", {"num_processes": 2}, ctx)
    try:
        assert two.decode(x, lengths) == one
    finally:
        two.close()


# ---------------------------------------------------------------------------------------------------------
# bad configs, missing packages
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override, message", [
    ({"lm_weight": float("nan")}, "lm_weight must be a finite number"),
    ({"word_score": float("inf")}, "word_score must be a finite number"),
    ({"lm_weight": -1.0}, "lm_weight must be >= 0"),
    ({"beam_width": -4}, "beam_width must be an integer >= 1"),
    ({"beam_width": 0}, "beam_width must be an integer >= 1"),
    ({"beam_prune_logp": 3.0}, "beam_prune_logp must be <= 0"),
    ({"num_processes": 0}, "num_processes must be an integer >= 1"),
])
def test_bad_config_is_a_one_line_error(override, message):
    with pytest.raises(ValueError, match=message) as e:
        build_decoder("pyctcdecode", {"use_lm": False, **override}, DecodingContext(tokens=_chars()))
    assert "\n" not in str(e.value)


def test_bad_inputs_and_missing_lm_are_one_line_errors(tmp_path):
    tokens = _chars()
    with pytest.raises(FileNotFoundError, match="ARPA LM not found.*use_lm=false"):
        build_decoder("pyctcdecode", {"arpa_path": str(tmp_path / "none.arpa")}, DecodingContext(tokens=tokens))
    dec = build_decoder("pyctcdecode", {"use_lm": False}, DecodingContext(tokens=tokens))
    with pytest.raises(ValueError, match=r"log_probs must be \(B, T, 6\)"):
        dec.decode(torch.zeros(1, 3, 5), torch.tensor([3]))
    x = torch.zeros(1, 3, 6).log_softmax(-1)
    x[0, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        dec.decode(x, torch.tensor([3]))
    with pytest.raises(RuntimeError, match="CPU decoder"):
        build_decoder("pyctcdecode", {"use_lm": False}, DecodingContext(tokens=tokens, device="cuda"))


def test_missing_packages_say_why(monkeypatch, arpa):
    tokens = _chars()
    monkeypatch.setitem(sys.modules, "kenlm", None)  # import kenlm -> ImportError
    with pytest.raises(ImportError, match="kenlm not importable.*use_lm=false"):
        build_decoder("pyctcdecode", {}, DecodingContext(tokens=tokens, arpa_path=arpa))
    dec = build_decoder("pyctcdecode", {"use_lm": False}, DecodingContext(tokens=tokens, arpa_path=arpa))
    assert _decode(dec, _spell(tokens, AMBIGUOUS)).words == ["cob"]
    monkeypatch.setitem(sys.modules, "pyctcdecode", None)
    with pytest.raises(ImportError, match="pyctcdecode is not importable"):
        build_decoder("pyctcdecode", {"use_lm": False}, DecodingContext(tokens=tokens))


# ---------------------------------------------------------------------------------------------------------
# through the harness
# ---------------------------------------------------------------------------------------------------------

def test_harness_run_repairs_the_corrupted_words_and_lists_a_missing_package(tmp_path, monkeypatch):
    """The fake workload's 'other' set corrupts the first letter of every third word (greedy errs); pyctcdecode with
    the workload's uniform bigram LM gives the out-of-vocabulary spellings unk_score_offset and repairs them all."""
    pytest.importorskip("kenlm")
    from _eval_fakes import FakeWorkload, fake_source_factory
    from eval.config import compose_config
    from eval.runner import run_experiment

    def run(name, *extra):
        cfg = compose_config([f"experiment.output_dir={tmp_path / 'runs'}", f"graph.root={tmp_path / 'g'}",
                              f"experiment.run={name}", "experiment.batch_size=2", "experiment.progress=false",
                              "experiment.decoders=[greedy,pyctcdecode]", *extra])
        return run_experiment(cfg, workload=FakeWorkload(tmp_path / "wl"), source_factory=fake_source_factory)

    rows = {(r.decoder, r.dataset): r for r in run("r").rows}
    assert rows[("greedy", "other")].wer > 0.2
    assert rows[("pyctcdecode", "other")].wer == 0.0 and rows[("pyctcdecode", "clean")].wer == 0.0
    assert rows[("pyctcdecode", "other")].decoder_config["lm_weight"] == 0.5
    monkeypatch.setitem(sys.modules, "pyctcdecode", None)
    rows = {r.decoder: r for r in run("missing", "experiment.skip_unavailable=true").rows}
    assert rows["pyctcdecode"].status == "unavailable" and "pyctcdecode is not importable" in rows["pyctcdecode"].reason
