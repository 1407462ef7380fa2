"""CTC prefix beam search with token n-gram LM fusion and phrase boosting (decoders/ctc_lm.py): the reference
against a brute-force scorer, the batched torch path against the reference, boosting against an explicitly
composed LM x automaton scorer, the LM tables against an independent ARPA reader, and bad input."""
from __future__ import annotations

import math
import random

import pytest
import torch

from decoders.ctc_lm import (
    ComposedScorer,
    CtcLmConfig,
    NgramLM,
    PhraseBoost,
    brute_force_best,
    ctc_lm_beam_search,
    read_arpa,
    reference_prefix_beam_search,
)
from recipes.lm import ArpaModel
from recipes.token_lm import build_token_arpa, nemo_token_symbols
from recipes.tokens import TokenSet
from tests.ctc_helpers import random_log_probs

TEXT = ["a b", "ab ba", "b a a", "aa bb ab", "ba", "a", "bab aba", "b b a"]


@pytest.fixture(scope="module")
def char_lm(tmp_path_factory):
    """A char token set (' ', 'a', 'b' + blank) and its order-3 token ARPA in NeMo's encoding."""
    d = tmp_path_factory.mktemp("lm")
    (d / "text.txt").write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    out = {}
    for blank in ("first", "last"):
        tokens = TokenSet.from_chars("ab", blank=blank)
        arpa = build_token_arpa(d / "text.txt", tokens, d / f"tok_{blank}.arpa")
        out[blank] = (tokens, arpa, NgramLM.from_arpa(arpa, nemo_token_symbols(tokens)))
    return out


def _sequence_lm_score(lm: NgramLM, cols, eos=True) -> float:
    st = lm.bos_state
    total = 0.0
    for c in cols:
        w, st = lm.score_one(st, c)
        total += w
    return total + (lm.final_one(st) if eos else 0.0)


@pytest.mark.parametrize("blank", ["first", "last"])
def test_lm_tables_match_an_independent_arpa_reader(char_lm, blank):
    tokens, arpa, lm = char_lm[blank]
    ref = ArpaModel(arpa)
    syms = nemo_token_symbols(tokens)
    rng = random.Random(1)
    for _ in range(30):
        cols = [rng.choice(tokens.non_blank_ids) for _ in range(rng.randint(0, 7))]
        want = ref.sentence_log10_prob([syms[c] for c in cols]) * math.log(10)
        assert _sequence_lm_score(lm, cols) == pytest.approx(want, abs=1e-9)
        # the batched device form gives the same per-token scores
        st = lm.initial_states(1, "cpu")
        total = torch.zeros(1)
        for c in cols:
            w, d = lm.advance(st)
            total += w[0, c]
            st = d[:, c]
        total += lm.final(st)
        assert float(total) == pytest.approx(want, abs=1e-4)


def _fusion_final(lm, boost_rows, cfg, tokens, row=0):
    def f(y):
        s = cfg.insertion_bonus * len(y)
        if lm is not None:
            s += cfg.lm_weight * _sequence_lm_score(lm, y, eos=cfg.lm_eos)
        if boost_rows:
            for phrase, b in boost_rows[row].items():
                n = len(phrase)
                s += b * sum(1 for i in range(len(y) - n + 1) if tuple(y[i:i + n]) == phrase)
        return s
    return f


@pytest.mark.parametrize("blank", ["first", "last"])
@pytest.mark.parametrize("use_lm,use_boost", [(True, False), (False, True), (True, True)])
def test_reference_with_a_full_beam_equals_brute_force(char_lm, blank, use_lm, use_boost):
    """With a beam that holds every prefix (V=4, T=4: 121 prefixes <= 128), the reference's N-best is the exact
    argmax over all label sequences of CTC posterior (summed over every alignment) + fusion."""
    tokens, _, lm = char_lm[blank]
    V, b = tokens.vocab_size, tokens.blank_id
    a, bb, sp = tokens.encode("a")[0], tokens.encode("b")[0], tokens.encode(" ")[0]
    rows = [{(a, bb): 1.5, (bb,): 0.7, (a, bb, a): 2.0}] if use_boost else None
    cfg = CtcLmConfig(beam_size=128, lm_weight=0.7, insertion_bonus=0.3, blank_id=b, blank_skip_threshold=1.0, nbest=5)
    for seed in range(3):
        lp = random_log_probs(1, 4, V, seed=seed, peaky=1.0, blank=b)
        boost = PhraseBoost(rows, V, b) if rows else None
        res = reference_prefix_beam_search(lp, torch.tensor([4]), cfg, lm=lm if use_lm else None, boost=boost)
        oracle = brute_force_best(lp[0], 4, b, _fusion_final(lm if use_lm else None, rows, cfg, tokens))
        best = sorted(oracle.items(), key=lambda kv: -kv[1])[:5]
        assert [tuple(t) for t in res.tokens[0]] == [y for y, _ in best]
        assert res.scores[0].tolist() == pytest.approx([s for _, s in best], abs=1e-4)
    del sp


def _random_boost(tokens, rng, rows):
    ids = tokens.non_blank_ids
    out = []
    for _ in range(rows):
        d = {}
        for _ in range(rng.randint(0, 3)):
            d[tuple(rng.choice(ids) for _ in range(rng.randint(1, 3)))] = round(rng.uniform(-1.0, 3.0), 2)
        out.append(d)
    return out


@pytest.mark.parametrize("blank", ["first", "last"])
@pytest.mark.parametrize("beam", [1, 3, 6])
@pytest.mark.parametrize("threshold", [1.0, 0.6])
def test_batched_search_equals_the_reference(char_lm, blank, beam, threshold):
    tokens, _, lm = char_lm[blank]
    V, b = tokens.vocab_size, tokens.blank_id
    rng = random.Random(beam * 7 + int(threshold * 10))
    B, T = 3, 17
    lengths = torch.tensor([17, 9, 0])
    cfg = CtcLmConfig(beam_size=beam, lm_weight=0.8, insertion_bonus=0.4, blank_id=b,
                      blank_skip_threshold=threshold, nbest=min(2, beam))
    for seed in range(3):
        lp = random_log_probs(B, T, V, seed=seed + 10 * beam, peaky=2.5, blank=b)
        rows = _random_boost(tokens, rng, B)
        for kwargs in ({"lm": lm}, {"boost": PhraseBoost(rows, V, b)}, {"lm": lm, "boost": PhraseBoost(rows, V, b)}):
            ref = reference_prefix_beam_search(lp, lengths, cfg, **kwargs)
            got = ctc_lm_beam_search(lp, lengths, cfg, **kwargs)
            assert got.tokens == ref.tokens, (seed, kwargs.keys())
            torch.testing.assert_close(got.scores, ref.scores, atol=1e-4, rtol=1e-5)


def test_batched_search_on_a_larger_vocabulary_equals_the_reference(tmp_path):
    """V = 29 characters (blank last), a longer utterance, odd beam."""
    tokens = TokenSet.from_chars("abcdefghijklmnopqrstuvwxyz'", blank="last")
    words = ["the", "cat", "sat", "on", "a", "mat", "hat", "that", "at"]
    rng = random.Random(3)
    (tmp_path / "t.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(6)) for _ in range(50)))
    lm = NgramLM.from_arpa(build_token_arpa(tmp_path / "t.txt", tokens, tmp_path / "t.arpa"),
                           nemo_token_symbols(tokens))
    lp = random_log_probs(2, 40, tokens.vocab_size, seed=5, peaky=3.0, blank=tokens.blank_id)
    cfg = CtcLmConfig(beam_size=5, lm_weight=0.5, insertion_bonus=1.0, blank_id=tokens.blank_id, nbest=3)
    boost = PhraseBoost([{tuple(tokens.encode("cat")): 2.0}, {tuple(tokens.encode("at")): 1.0}],
                        tokens.vocab_size, tokens.blank_id)
    lengths = torch.tensor([40, 31])
    ref = reference_prefix_beam_search(lp, lengths, cfg, lm=lm, boost=boost)
    got = ctc_lm_beam_search(lp, lengths, cfg, lm=lm, boost=boost)
    assert got.tokens == ref.tokens
    torch.testing.assert_close(got.scores, ref.scores, atol=1e-3, rtol=1e-5)


@pytest.mark.parametrize("blank", ["first", "last"])
def test_boosted_search_equals_search_on_the_composed_scorer(char_lm, blank):
    """LM + boosting applied separately == one explicitly composed (LM state x automaton state) scorer whose arc
    weight is lm_weight * LM + boost delta and whose final weight is lm_weight * p(</s>) - partial credit."""
    tokens, _, lm = char_lm[blank]
    V, b = tokens.vocab_size, tokens.blank_id
    rng = random.Random(11)
    T = 6
    lengths = torch.tensor([6, 5])
    cfg = CtcLmConfig(beam_size=4, lm_weight=0.6, insertion_bonus=0.2, blank_id=b, blank_skip_threshold=1.0, nbest=3)
    for seed in range(4):
        rows = _random_boost(tokens, rng, 2)
        boost = PhraseBoost(rows, V, b)
        composed = ComposedScorer([(cfg.lm_weight, lm), (1.0, boost)],
                                  [(lm.bos_state, int(r)) for r in boost.roots.tolist()], V, max_tokens=T)
        lp = random_log_probs(2, T, V, seed=seed, peaky=1.5, blank=b)
        sep = reference_prefix_beam_search(lp, lengths, cfg, lm=lm, boost=boost)
        comp = reference_prefix_beam_search(lp, lengths, cfg, scorer=composed)
        assert sep.tokens == comp.tokens
        torch.testing.assert_close(sep.scores, comp.scores, atol=1e-5, rtol=0)
        got = ctc_lm_beam_search(lp, lengths, cfg, scorer=composed)
        assert got.tokens == sep.tokens
        torch.testing.assert_close(got.scores, sep.scores, atol=1e-4, rtol=1e-5)


def test_boost_final_credit_counts_completed_phrases_only():
    """Running credit includes partial matches; final = running + final_one = boosts of completed (overlapping)
    occurrences only: partial credit is withdrawn when a phrase is abandoned or the utterance ends."""
    V, blank = 5, 0
    rows = [{(1, 2): 2.0, (2, 3, 4): 3.0, (2,): 0.5, (1, 2, 3, 1): 1.0}]
    boost = PhraseBoost(rows, V, blank)
    rng = random.Random(0)
    for _ in range(200):
        y = [rng.randint(1, 4) for _ in range(rng.randint(0, 9))]
        st = int(boost.roots[0])
        running = 0.0
        for c in y:
            w, st = boost.score_one(st, c)
            running += w
        want = sum(b * sum(1 for i in range(len(y) - len(p) + 1) if tuple(y[i:i + len(p)]) == p)
                   for p, b in rows[0].items())
        assert running + boost.final_one(st) == pytest.approx(want)
    # an abandoned partial match: (1, 2, 3) then 2 -> only the completed (1,2) and (2,) count
    st = int(boost.roots[0])
    running = 0.0
    for c in (1, 2, 3):
        w, st = boost.score_one(st, c)
        running += w
    assert running > 2.5  # partial credit towards (2,3,4) / (1,2,3,1) is in the running score
    w, st = boost.score_one(st, 2)
    assert running + w + boost.final_one(st) == pytest.approx(2.0 + 0.5 + 0.5)


def test_empty_rows_and_zero_lengths():
    V = 4
    lm = None
    lp = random_log_probs(2, 3, V, seed=0)
    cfg = CtcLmConfig(beam_size=2, blank_id=0, nbest=2, lm_weight=0.0, insertion_bonus=0.0)
    res = ctc_lm_beam_search(lp, torch.tensor([0, 0]), cfg, lm=lm)
    assert res.tokens == [[[], []], [[], []]]
    assert res.scores[:, 0].tolist() == [0.0, 0.0] and math.isinf(float(res.scores[0, 1]))
    res = ctc_lm_beam_search(torch.zeros(0, 5, V), torch.zeros(0, dtype=torch.long), cfg)
    assert res.tokens == []


# --------------------------------------------------------------------------------------------- bad input
def test_bad_arpa_files_give_one_line_errors(tmp_path, char_lm):
    tokens, arpa, _ = char_lm["last"]
    syms = nemo_token_symbols(tokens)
    empty = tmp_path / "empty.arpa"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty or malformed ARPA"):
        NgramLM.from_arpa(empty, syms)
    bad = tmp_path / "bad.arpa"
    bad.write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1.0\tx\n\\end\\\n")
    with pytest.raises(ValueError, match="declares 2 1-grams"):
        NgramLM.from_arpa(bad, syms)
    bad.write_text("\\data\\\nngram 1=1\n\n\\1-grams:\nabc\tx\n\\end\\\n")
    with pytest.raises(ValueError, match="malformed number"):
        read_arpa(bad)
    with pytest.raises(FileNotFoundError):
        read_arpa(tmp_path / "missing.arpa")
    # an LM over another vocabulary (here the plain characters instead of NeMo's chr(id + 100) encoding)
    other = [None if c == tokens.blank_id else t for c, t in enumerate(tokens.tokens)]
    with pytest.raises(ValueError, match="LM vocabulary does not match the tokens"):
        NgramLM.from_arpa(arpa, other)
    for err in (ValueError,):
        with pytest.raises(err):
            read_arpa(arpa, ["x"])


def test_bad_config_and_inputs_give_one_line_errors(char_lm):
    tokens, _, lm = char_lm["last"]
    with pytest.raises(ValueError, match="lm_weight must be a finite number"):
        CtcLmConfig(lm_weight=float("nan"))
    with pytest.raises(ValueError, match="insertion_bonus must be a finite number"):
        CtcLmConfig(insertion_bonus=float("inf"))
    cfg = CtcLmConfig(beam_size=2, blank_id=tokens.blank_id)
    lp = random_log_probs(1, 4, tokens.vocab_size + 1, seed=0)
    with pytest.raises(ValueError, match="the LM maps 4 columns, log_probs have V=5"):
        ctc_lm_beam_search(lp, torch.tensor([4]), cfg, lm=lm)
    lp = random_log_probs(1, 4, tokens.vocab_size, seed=0)
    lp[0, 1, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        ctc_lm_beam_search(lp, torch.tensor([4]), cfg, lm=lm)
    with pytest.raises(ValueError, match="token outside"):
        PhraseBoost([{(tokens.blank_id,): 1.0}], tokens.vocab_size, tokens.blank_id)
    with pytest.raises(ValueError, match="must be finite"):
        PhraseBoost([{(1,): float("nan")}], tokens.vocab_size, tokens.blank_id)


def test_adapter_reports_unknown_boost_words_and_decodes(tmp_path):
    from eval.adapters.base import DecodingContext, build_decoder

    tokens = TokenSet.from_chars("ab", blank="last")
    (tmp_path / "t.txt").write_text("\n".join(TEXT) + "\n")
    (tmp_path / "words.txt").write_text("a 3\nb 2\nab 1\n")
    ctx = DecodingContext(tokens=tokens, words_path=tmp_path / "words.txt")
    dec = build_decoder("ctc_lm", {"lm_text": str(tmp_path / "t.txt"), "lm_cache_dir": str(tmp_path / "c"),
                                   "beam_size": 3}, ctx)
    lp = random_log_probs(2, 8, tokens.vocab_size, seed=1, blank=tokens.blank_id)
    with pytest.warns(UserWarning, match="unknown to the token set or word list"):
        hyps = dec.decode(lp, torch.tensor([8, 5]), boosts=[{"ab": 1.0, "zzz": 2.0}, {"ba": 1.0}])
    assert len(hyps) == 2 and all(isinstance(h.score, float) for h in hyps)
    assert dec.pop_stats() == {"unknown_boost_words": 2}  # "zzz" (not spellable) and "ba" (not in words.txt)
    # same result as the library call with the same LM
    plain = dec.decode(lp, torch.tensor([8, 5]))
    lib = ctc_lm_beam_search(lp, torch.tensor([8, 5]), dec.config, lm=dec.lm)
    assert [h.tokens for h in plain] == [t[0] for t in lib.tokens]
    with pytest.raises(ValueError, match="lm_weight must be a finite number"):
        build_decoder("ctc_lm", {"lm_text": str(tmp_path / "t.txt"), "lm_cache_dir": str(tmp_path / "c"),
                                 "lm_weight": float("nan")}, ctx)
    with pytest.raises(ValueError, match="no token LM"):
        build_decoder("ctc_lm", {}, DecodingContext(tokens=tokens))


@pytest.mark.gpu
@pytest.mark.parametrize("blank", ["first", "last"])
def test_gpu_equals_cpu_reference(char_lm, blank):
    tokens, _, lm = char_lm[blank]
    V, b = tokens.vocab_size, tokens.blank_id
    rng = random.Random(5)
    for beam, T, thr in ((1, 1, 1.0), (4, 17, 0.7), (7, 60, 1.0), (3, 200, 0.9)):
        B = 3
        lp = random_log_probs(B, T, V, seed=beam + T, peaky=2.5, blank=b)
        lengths = torch.tensor([T, max(T // 2, 0), 0])
        rows = _random_boost(tokens, rng, B)
        cfg = CtcLmConfig(beam_size=beam, lm_weight=0.8, insertion_bonus=0.4, blank_id=b, blank_skip_threshold=thr,
                          nbest=1)
        ref = reference_prefix_beam_search(lp, lengths, cfg, lm=lm, boost=PhraseBoost(rows, V, b))
        got = ctc_lm_beam_search(lp.cuda(), lengths.cuda(), cfg, lm=lm, boost=PhraseBoost(rows, V, b))
        assert got.tokens == ref.tokens
        torch.testing.assert_close(got.scores, ref.scores, atol=1e-3, rtol=1e-5)
        lm.to("cpu")


@pytest.mark.gpu
def test_gpu_large_batch_equals_cpu_batched(tmp_path):
    """B = 64, V = 129-like sizes: the CUDA run of the batched path equals its CPU run (same float32 math)."""
    tokens = TokenSet.from_chars("abcdefghijklmnopqrstuvwxyz'", blank="last")
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "hat", "that", "at", "dog", "sit"]
    (tmp_path / "t.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(300)))
    lm = NgramLM.from_arpa(build_token_arpa(tmp_path / "t.txt", tokens, tmp_path / "t.arpa"),
                           nemo_token_symbols(tokens))
    lp = random_log_probs(64, 150, tokens.vocab_size, seed=2, peaky=4.0, blank=tokens.blank_id)
    lengths = torch.randint(0, 151, (64,), generator=torch.Generator().manual_seed(0))
    cfg = CtcLmConfig(beam_size=10, lm_weight=0.5, insertion_bonus=1.0, blank_id=tokens.blank_id, nbest=2)
    cpu = ctc_lm_beam_search(lp, lengths, cfg, lm=lm)
    gpu = ctc_lm_beam_search(lp.cuda(), lengths.cuda(), cfg, lm=lm)
    lm.to("cpu")
    same = sum(a == b for a, b in zip(cpu.tokens, gpu.tokens))
    assert same >= 63  # float32 reduction order may flip an exact near-tie in one row at most
    torch.testing.assert_close(gpu.scores[:, 0], cpu.scores[:, 0], atol=1e-3, rtol=1e-5)


# ------------------------------------------------------------------------------- issue 13: library ergonomics
def test_results_carry_text_given_a_token_table_or_tokenizer():
    from decoders.ctc import CtcBeamSearchConfig, ctc_beam_search, detokenize

    tokens = TokenSet.from_chars("ab", blank="first")  # ['<blk>', ' ', 'a', 'b']
    a, b, sp = tokens.encode("a")[0], tokens.encode("b")[0], tokens.encode(" ")[0]
    p = torch.full((1, 6, 4), 1e-3)
    for t, c in enumerate([a, 0, b, sp, a, 0]):
        p[0, t, c] = 1.0
    lp = (p / p.sum(-1, keepdim=True)).log()
    res = ctc_beam_search(lp, torch.tensor([6]), CtcBeamSearchConfig(beam_size=4, blank_id=0))
    assert res.texts(tokens) == ["ab a"]
    assert res.texts(tokens.tokens) == ["ab a"]  # the plain token table
    assert res.hypotheses(0, tokens)[0].words == ["ab", "a"]
    lm_res = ctc_lm_beam_search(lp, torch.tensor([6]), CtcLmConfig(beam_size=4, blank_id=0, lm_weight=0.0,
                                                                    insertion_bonus=0.0))
    assert lm_res.texts(tokens) == ["ab a"] and lm_res.hypotheses(0, tokens.tokens)[0].words == ["ab", "a"]
    assert detokenize([1, 2], ["<blk>", "\u2581he", "llo"]) == "hello"
    assert detokenize([1, 2, 1], ["<blk>", "a", "|"]) == "a a"
    with pytest.raises(ValueError, match="outside the token table"):
        detokenize([7], ["a", "b"])
    with pytest.raises(TypeError, match="token table"):
        detokenize([0], 3)


@pytest.mark.parametrize("search", ["ctc_beam", "ctc_lm"])
def test_probabilities_instead_of_log_probs_are_rejected(search):
    from decoders.ctc import CtcBeamSearchConfig, ctc_beam_search

    lp = random_log_probs(2, 9, 5, seed=0)
    run = (lambda x: ctc_beam_search(x, torch.tensor([9, 4]), CtcBeamSearchConfig(beam_size=3))) \
        if search == "ctc_beam" else (lambda x: ctc_lm_beam_search(x, torch.tensor([9, 4]), CtcLmConfig(beam_size=3)))
    run(lp)  # log-probs: fine
    with pytest.raises(ValueError, match="look like probabilities"):
        run(lp.exp())


def test_blank_last_output_with_blank_id_zero_warns():
    from decoders.ctc import CtcBeamSearchConfig, ctc_beam_search

    lp = random_log_probs(2, 40, 7, seed=1, peaky=3.0, blank=6)  # a blank-last model
    lp[..., 6] += 4.0
    lp = lp.log_softmax(-1)
    with pytest.warns(UserWarning, match="looks blank-last.*blank_id=6"):
        ctc_beam_search(lp, torch.tensor([40, 40]), CtcBeamSearchConfig(beam_size=3, blank_id=0))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ctc_beam_search(lp, torch.tensor([40, 40]), CtcBeamSearchConfig(beam_size=3, blank_id=6))
        lp0 = random_log_probs(2, 40, 7, seed=1, peaky=3.0, blank=0)  # blank-first, blank_id=0: no warning
        ctc_beam_search(lp0, torch.tensor([40, 40]), CtcBeamSearchConfig(beam_size=3, blank_id=0))


# ------------------------------------------------------------------------------ word-level LM with a lexicon
WORD_TEXT = ["ab ba", "ab ab ba", "ba", "a ab", "ba a ab", "ab", "a ba ba"]


@pytest.fixture(scope="module")
def word_lm(tmp_path_factory):
    """Words {a, ab, ba, b} (b is in the lexicon but never in the text: unigram from KN's uniform share), char
    tokens with a space separator, the word ARPA by the project's KN estimator."""
    import numpy as np

    from recipes.lm import build_arpa

    d = tmp_path_factory.mktemp("wlm")
    words = ["a", "ab", "ba", "b"]
    ids = {w: i for i, w in enumerate(words)}
    sents = [[ids[w] for w in line.split()] for line in WORD_TEXT]
    flat = np.array([i for s in sents for i in s], dtype=np.int64)
    offsets = np.cumsum([0] + [len(s) for s in sents]).astype(np.int64)
    build_arpa(flat, offsets, words, d / "words.arpa")
    return d / "words.arpa", words


def _word_lexicon(tokens, words):
    return {w: [tokens.encode(w)] for w in words}


def _word_fusion(arpa_path, tokens, lexicon, lm_weight, word_score, bonus):
    """Independent scorer for a full token sequence: split at separators, every word must be in the lexicon, the
    word LM via recipes.lm.ArpaModel."""
    model = ArpaModel(arpa_path)
    spell = {tuple(s[0]): w for w, s in lexicon.items()}
    sep = tokens.encode(" ")[0]

    def f(y):
        words, cur = [], []
        for c in list(y) + [sep]:
            if c == sep:
                if cur:
                    if tuple(cur) not in spell:
                        return float("-inf")
                    words.append(spell[tuple(cur)])
                cur = []
            else:
                cur.append(c)
        lm = model.sentence_log10_prob(words) * math.log(10)
        return lm_weight * lm + word_score * len(words) + bonus * len(y)
    return f


@pytest.mark.parametrize("blank", ["first", "last"])
def test_word_lm_reference_with_a_full_beam_equals_brute_force(word_lm, blank):
    from decoders.ctc_lm import LexiconWordLM

    arpa, words = word_lm
    tokens = TokenSet.from_chars("ab", blank=blank)
    lex = _word_lexicon(tokens, words)
    wlm = LexiconWordLM.from_files(arpa, lex, tokens.tokens, tokens.blank_id, "char", lm_weight=0.9, word_score=0.4)
    cfg = CtcLmConfig(beam_size=128, insertion_bonus=0.2, blank_id=tokens.blank_id, blank_skip_threshold=1.0, nbest=4)
    oracle_f = _word_fusion(arpa, tokens, lex, 0.9, 0.4, 0.2)
    for seed in range(3):
        lp = random_log_probs(1, 4, tokens.vocab_size, seed=seed, peaky=1.0, blank=tokens.blank_id)
        res = reference_prefix_beam_search(lp, torch.tensor([4]), cfg, lm=wlm)
        oracle = brute_force_best(lp[0], 4, tokens.blank_id, oracle_f)
        best = [kv for kv in sorted(oracle.items(), key=lambda kv: -kv[1]) if kv[1] > float("-inf")][:4]
        assert [tuple(t) for t in res.tokens[0]] == [y for y, _ in best]
        assert res.scores[0].tolist() == pytest.approx([s for _, s in best], abs=1e-4)


@pytest.mark.parametrize("blank", ["first", "last"])
@pytest.mark.parametrize("beam", [2, 5])
def test_word_lm_batched_equals_reference(word_lm, blank, beam):
    from decoders.ctc_lm import LexiconWordLM

    arpa, words = word_lm
    tokens = TokenSet.from_chars("ab", blank=blank)
    wlm = LexiconWordLM.from_files(arpa, _word_lexicon(tokens, words), tokens.tokens, tokens.blank_id, "char",
                                   lm_weight=0.7, word_score=0.5)
    cfg = CtcLmConfig(beam_size=beam, insertion_bonus=0.1, blank_id=tokens.blank_id, blank_skip_threshold=0.9,
                      nbest=2)
    rng = random.Random(beam)
    for seed in range(4):
        lp = random_log_probs(3, 19, tokens.vocab_size, seed=seed, peaky=2.5, blank=tokens.blank_id)
        lengths = torch.tensor([19, 12, 0])
        rows = _random_boost(tokens, rng, 3)
        for kwargs in ({"lm": wlm}, {"lm": wlm, "boost": PhraseBoost(rows, tokens.vocab_size, tokens.blank_id)}):
            ref = reference_prefix_beam_search(lp, lengths, cfg, **kwargs)
            got = ctc_lm_beam_search(lp, lengths, cfg, **kwargs)
            assert got.tokens == ref.tokens
            torch.testing.assert_close(got.scores, ref.scores, atol=1e-4, rtol=1e-5)
            for row in ref.tokens:  # every hypothesis spells lexicon words
                for hyp in row:
                    assert set(tokens.decode(hyp).split()) <= set(words)


def test_word_lm_bpe_mode_on_the_workload_pieces(tmp_path):
    """BPE mode: words start at a '\u2581' piece; lexicon spellings are the tokenizer's encodings."""
    import numpy as np

    from decoders.ctc_lm import LexiconWordLM
    from recipes.lm import build_arpa

    sp = pytest.importorskip("sentencepiece")
    text = ["the cat sat", "a cat sat on the mat", "the hat", "that cat", "on a mat"] * 20
    (tmp_path / "c.txt").write_text("\n".join(text))
    sp.SentencePieceTrainer.train(input=str(tmp_path / "c.txt"), model_prefix=str(tmp_path / "bpe"), vocab_size=20,
                                  model_type="bpe", character_coverage=1.0, minloglevel=2)
    tokens = TokenSet.from_sentencepiece(tmp_path / "bpe.model", blank="last")
    words = sorted({w for line in text for w in line.split()})
    ids = {w: i for i, w in enumerate(words)}
    sents = [[ids[w] for w in line.split()] for line in text]
    build_arpa(np.array([i for s in sents for i in s]), np.cumsum([0] + [len(s) for s in sents]), words,
               tmp_path / "w.arpa")
    lex = {w: [tokens.encode(w)] for w in words}
    wlm = LexiconWordLM.from_files(tmp_path / "w.arpa", lex, tokens.tokens, tokens.blank_id, "bpe", lm_weight=0.8)
    lp = random_log_probs(2, 30, tokens.vocab_size, seed=4, peaky=3.0, blank=tokens.blank_id)
    cfg = CtcLmConfig(beam_size=6, insertion_bonus=0.0, blank_id=tokens.blank_id, blank_skip_threshold=1.0, nbest=2)
    ref = reference_prefix_beam_search(lp, torch.tensor([30, 22]), cfg, lm=wlm)
    got = ctc_lm_beam_search(lp, torch.tensor([30, 22]), cfg, lm=wlm)
    assert got.tokens == ref.tokens
    torch.testing.assert_close(got.scores, ref.scores, atol=1e-4, rtol=1e-5)
    for row in ref.tokens:
        for hyp in row:
            assert set(tokens.decode(hyp).split()) <= set(words)


def test_word_lm_bad_input(word_lm):
    from decoders.ctc_lm import LexiconWordLM

    arpa, words = word_lm
    tokens = TokenSet.from_chars("ab", blank="last")
    lex = _word_lexicon(tokens, words)
    with pytest.raises(ValueError, match="lm_weight must be finite"):
        LexiconWordLM.from_files(arpa, lex, tokens.tokens, tokens.blank_id, "char", lm_weight=float("nan"))
    with pytest.raises(ValueError, match="lexicon is empty"):
        LexiconWordLM.from_files(arpa, {}, tokens.tokens, tokens.blank_id, "char", lm_weight=1.0)
    with pytest.raises(ValueError, match="has the blank/separator"):
        LexiconWordLM.from_files(arpa, {"a": [[tokens.blank_id]]}, tokens.tokens, tokens.blank_id, "char", 1.0)
    with pytest.raises(ValueError, match="LM vocabulary does not match"):  # an ARPA over other words
        LexiconWordLM.from_files(arpa, {"zz": [tokens.encode("a")]}, tokens.tokens, tokens.blank_id, "char", 1.0)


# ------------------------------------------------------------------------------------------------ streaming
@pytest.mark.parametrize("threshold", [1.0, 0.6])
def test_streaming_with_lm_and_boosting_equals_offline(char_lm, word_lm, threshold):
    """The stream state carries the beams' LM and automaton states: random chunkings (rows ending in different
    chunks, skipped runs crossing chunk boundaries) give the offline result."""
    from decoders.ctc_lm import CtcLmStreamingDecoder, LexiconWordLM

    tokens, _, lm = char_lm["last"]
    V, b = tokens.vocab_size, tokens.blank_id
    arpa, words = word_lm
    wlm = LexiconWordLM.from_files(arpa, _word_lexicon(tokens, words), tokens.tokens, b, "char", lm_weight=0.7,
                                   word_score=0.5)
    rng = random.Random(int(threshold * 10))
    cfg = CtcLmConfig(beam_size=4, lm_weight=0.8, insertion_bonus=0.3, blank_id=b, blank_skip_threshold=threshold,
                      nbest=2)
    B, T = 3, 31
    lengths = torch.tensor([31, 17, 0])
    for seed in range(3):
        lp = random_log_probs(B, T, V, seed=seed, peaky=2.5, blank=b)
        rows = _random_boost(tokens, rng, B)
        for use in ({"lm": lm, "boost": PhraseBoost(rows, V, b)}, {"lm": wlm}):
            offline = ctc_lm_beam_search(lp, lengths, cfg, **use)
            dec = CtcLmStreamingDecoder(cfg, **use)
            state = dec.create_state(B, V)
            start = 0
            while start < T:
                size = rng.randint(1, 9)
                chunk = lp[:, start:start + size]
                chunk_len = (lengths - start).clamp(min=0, max=chunk.shape[1])
                dec.decode_chunk(state, chunk, chunk_len)
                start += size
            got = dec.finalize(state)
            assert got.tokens == offline.tokens
            torch.testing.assert_close(got.scores, offline.scores, atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="does not match the state"):
        dec.decode_chunk(state, lp[:2, :3], torch.tensor([3, 3]))


def test_static_buffer_program_of_the_cuda_graph_path_equals_eager(char_lm, monkeypatch):
    """The CUDA-graph path's program (static buffers, device frame index, index_copy of back-pointers, capacity
    buckets reused across calls of different lengths) run eagerly on the CPU equals the plain loop; on a GPU the
    captured graph replays exactly this program (gpu test below)."""
    from decoders import ctc_lm as mod

    tokens, _, lm = char_lm["last"]
    V, b = tokens.vocab_size, tokens.blank_id
    rng = random.Random(2)
    cfg = CtcLmConfig(beam_size=4, lm_weight=0.8, insertion_bonus=0.3, blank_id=b, blank_skip_threshold=0.8, nbest=2)
    for T, lengths in ((23, [23, 11, 0]), (9, [9, 9, 4]), (23, [20, 23, 1])):
        lp = random_log_probs(3, T, V, seed=T, peaky=2.5, blank=b)
        boost = PhraseBoost(_random_boost(tokens, rng, 3), V, b)
        want = ctc_lm_beam_search(lp, torch.tensor(lengths), cfg, lm=lm, boost=boost)
        with monkeypatch.context() as m:
            m.setattr(mod._BatchedSearch, "_graph_mode", lambda self, dev: True)  # the graph branch, no capture on CPU
            search = mod._BatchedSearch(cfg, V, lm, boost, None, torch.device("cpu"))
            got = None
            for _ in range(2):  # twice: the second call reuses the cached static buffers
                state = search.init_state(3)
                search.advance(state, lp, torch.tensor(lengths))
                got = search.finalize(state)
                assert got.tokens == want.tokens
                torch.testing.assert_close(got.scores, want.scores, atol=1e-5, rtol=0)
            assert search._graphs


@pytest.mark.gpu
def test_gpu_cuda_graphs_equal_eager_and_reference(char_lm):
    tokens, _, lm = char_lm["last"]
    V, b = tokens.vocab_size, tokens.blank_id
    rng = random.Random(9)
    for T, B in ((1, 1), (37, 3), (150, 5), (37, 3)):  # the repeated shape reuses the cached graph
        lp = random_log_probs(B, T, V, seed=T + B, peaky=2.5, blank=b)
        lengths = torch.randint(0, T + 1, (B,), generator=torch.Generator().manual_seed(T))
        rows = _random_boost(tokens, rng, B)
        base = dict(beam_size=5, lm_weight=0.8, insertion_bonus=0.4, blank_id=b, blank_skip_threshold=0.9, nbest=2)
        ref = reference_prefix_beam_search(lp, lengths, CtcLmConfig(**base), lm=lm, boost=PhraseBoost(rows, V, b))
        for graphs in (True, False):
            got = ctc_lm_beam_search(lp.cuda(), lengths.cuda(), CtcLmConfig(**base, cuda_graphs=graphs), lm=lm,
                                     boost=PhraseBoost(rows, V, b))
            assert got.tokens == ref.tokens, graphs
            torch.testing.assert_close(got.scores, ref.scores, atol=1e-3, rtol=1e-5)
        lm.to("cpu")


def test_search_reuse_and_graph_invalidation_when_tables_move(char_lm, monkeypatch):
    """Calls without boosting reuse one search (and its captured graphs); when a shared LM's tables get new
    storage (another search moved them), the cached graphs are dropped instead of reading stale addresses."""
    from decoders import ctc_lm as mod

    tokens, _, lm = char_lm["last"]
    V, b = tokens.vocab_size, tokens.blank_id
    cfg = CtcLmConfig(beam_size=3, blank_id=b, blank_skip_threshold=1.0)
    lp = random_log_probs(2, 12, V, seed=4, blank=b)
    lengths = torch.tensor([12, 7])
    monkeypatch.setattr(mod._BatchedSearch, "_graph_mode", lambda self, dev: True)
    first = ctc_lm_beam_search(lp, lengths, cfg, lm=lm)
    s1 = mod._search_for(cfg, V, lm, None, None, torch.device("cpu"))
    assert s1._graphs
    assert ctc_lm_beam_search(lp, lengths, cfg, lm=lm).tokens == first.tokens
    assert mod._search_for(cfg, V, lm, None, None, torch.device("cpu")) is s1
    old = s1._graphs.copy()
    lm.table.keys = lm.table.keys.clone()  # new storage, as after a move to another device and back
    again = ctc_lm_beam_search(lp, lengths, cfg, lm=lm)
    assert again.tokens == first.tokens
    assert all(s1._graphs[k] is not old[k] for k in s1._graphs)
