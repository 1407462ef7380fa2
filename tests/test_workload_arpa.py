"""ARPA validity of the workload LM, checked by independent loaders (KenLM via flashlight, kaldilm)."""
import math
import random

import numpy as np
import pytest

from recipes.lm import ArpaModel, build_arpa
from recipes.text import GeneratorParams, SentenceGenerator, make_vocabulary
from recipes.workload import prepare_workload


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # one tiny workload per test session, shared by the test_workload_* modules (cached on the 2nd call)
    return prepare_workload("tiny", tmp_path_factory.getbasetemp() / "shared_workload", seed=0)


@pytest.fixture(scope="module")
def small_lms(tmp_path_factory):
    """A very small corpus LM, unpruned and pruned, so that every history can be checked."""
    d = tmp_path_factory.mktemp("lm")
    words = make_vocabulary(150, seed=5)
    ids, off = SentenceGenerator(150, GeneratorParams(num_classes=10), seed=5).sample(800, seed=5, stream=0)
    out = {}
    for name, thr in (("full", 0.0), ("pruned", 2e-5)):
        stats = build_arpa(ids, off, words, d / f"{name}.arpa", prune_threshold=thr)
        out[name] = (d / f"{name}.arpa", stats)
    return words, out


def _histories(model: ArpaModel, k: int, rng: random.Random):
    hist = [h for h in model.bows if len(h) < model.order]
    return [("<s>",)] + rng.sample(hist, min(k, len(hist)))


@pytest.mark.parametrize("name", ["full", "pruned"])
def test_every_history_sums_to_one(small_lms, name):
    _, lms = small_lms
    path, stats = lms[name]
    m = ArpaModel(path)
    assert "<unk>" in m.vocab_set and "</s>" in m.vocab_set
    assert [m.counts[n] for n in (1, 2, 3)] == stats.counts
    for h in [h for h in m.bows if len(h) < m.order] + [("<s>",), ("never-seen",)]:
        assert m.history_mass(h) == pytest.approx(1.0, abs=2e-5), h


def test_pruning_removes_ngrams_but_keeps_structure(small_lms):
    _, lms = small_lms
    full, pruned = lms["full"][1], lms["pruned"][1]
    assert pruned.counts[2] < full.counts[2] and pruned.counts[0] == full.counts[0]
    m = ArpaModel(lms["pruned"][0])
    for ng in m.probs:
        if len(ng) == 3:  # history and suffix of each trigram are explicit bigrams (KenLM/arpa2fst need them)
            assert ng[:2] in m.probs and ng[1:] in m.probs and ng[:2] in m.bows


def test_tiny_lm_normalised_and_kenlm_agrees(tiny):
    from flashlight.lib.text.decoder.kenlm import KenLM
    from flashlight.lib.text.dictionary import Dictionary

    m = ArpaModel(tiny.arpa_path)
    pred = m.predicted_vocab()
    d = Dictionary()
    for w in pred:
        d.add_entry(w)
    lm = KenLM(str(tiny.arpa_path), d)
    rng = random.Random(0)
    # 1) a few histories reached through KenLM's own state machine sum to 1 under KenLM
    for words in ([], rng.sample(pred, 1), rng.sample(pred, 2), [u for u in tiny.utterances("clean")[0]["text"].split()[:2]]):
        state = lm.start(False)
        for w in words:
            state, _ = lm.score(state, d.get_index(w))
        total = 0.0
        for i, w in enumerate(pred):
            if w == "</s>":
                _, s = lm.finish(state)
            else:
                _, s = lm.score(state, i)
            total += 10.0 ** s
        assert total == pytest.approx(1.0, abs=1e-4), words
        assert m.history_mass(["<s>"] + words) == pytest.approx(1.0, abs=1e-4)
    # 2) sentence scores: KenLM (log10) == our back-off computation
    for u in tiny.utterances("other")[:20]:
        words = u["text"].split()
        state = lm.start(False)
        kscore = 0.0
        for w in words:
            state, s = lm.score(state, d.get_index(w))
            kscore += s
        _, s = lm.finish(state)
        kscore += s
        assert kscore == pytest.approx(m.sentence_log10_prob(words), abs=1e-3)


def test_kaldilm_arpa2fst_reads_it(tiny, tmp_path):
    import kaldilm

    words_txt = tmp_path / "words.txt"
    s = kaldilm.arpa2fst(
        input_arpa=str(tiny.arpa_path),
        disambig_symbol="#0",
        read_symbol_table="",
        write_symbol_table=str(words_txt),
        max_order=3,
    )
    assert "<unk>" in words_txt.read_text()
    n_arcs = s.count("\n")
    assert n_arcs > sum(tiny.stats["ngrams"][1:])  # one arc per n-gram plus back-off arcs


def test_bad_input_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="sentence_ids"):
        build_arpa(np.array([0, 7]), np.array([0, 2]), ["a", "b"], tmp_path / "x.arpa")


def _reference_kneser_ney(sentences, vocab):
    """Straightforward dict-based interpolated Kneser-Ney (Chen & Goodman), independent of recipes.lm."""
    from collections import Counter, defaultdict

    c3, c2raw = Counter(), Counter()
    for s in sentences:
        seq = ["<s>"] + s + ["</s>"]
        for i in range(len(seq) - 1):
            c2raw[tuple(seq[i : i + 2])] += 1
        for i in range(len(seq) - 2):
            c3[tuple(seq[i : i + 3])] += 1
    left2 = defaultdict(set)
    for (a, b, c) in c3:
        left2[(b, c)].add(a)
    c2 = {bg: (c2raw[bg] if bg[0] == "<s>" else len(left2[bg])) for bg in c2raw}
    left1 = defaultdict(set)
    for (a, b) in c2raw:
        left1[b].add(a)
    c1 = {w: len(left1[w]) for w in left1}

    def disc(counts):
        n1 = sum(1 for v in counts if v == 1)
        n2 = sum(1 for v in counts if v == 2)
        return min(max(n1 / (n1 + 2 * n2), 0.05), 0.95) if n1 and n2 else 0.5

    D1, D2, D3 = disc(c1.values()), disc(c2.values()), disc(c3.values())
    predicted = list(vocab) + ["</s>", "<unk>"]
    tot1 = sum(c1.values())

    def p1(w):
        return max(c1.get(w, 0) - D1, 0) / tot1 + D1 * len(c1) / tot1 / len(predicted)

    by_h2 = defaultdict(dict)
    for (a, b), v in c2.items():
        by_h2[a][b] = v
    by_h3 = defaultdict(dict)
    for (a, b, c), v in c3.items():
        by_h3[(a, b)][c] = v

    def p2(w, a):
        ext = by_h2.get(a)
        if not ext:
            return p1(w)
        tot = sum(ext.values())
        return max(ext.get(w, 0) - D2, 0) / tot + D2 * len(ext) / tot * p1(w)

    def p3(w, a, b):
        ext = by_h3.get((a, b))
        if not ext:
            return p2(w, b)
        tot = sum(ext.values())
        return max(ext.get(w, 0) - D3, 0) / tot + D3 * len(ext) / tot * p2(w, b)

    return p1, p2, p3, predicted, by_h3


def test_unpruned_arpa_equals_reference_kneser_ney(tmp_path):
    words = make_vocabulary(60, seed=9)
    ids, off = SentenceGenerator(60, GeneratorParams(num_classes=6), seed=9).sample(300, seed=9, stream=0)
    sentences = [[words[i] for i in ids[off[k] : off[k + 1]]] for k in range(len(off) - 1)]
    build_arpa(ids, off, words, tmp_path / "lm.arpa", prune_threshold=0.0)
    m = ArpaModel(tmp_path / "lm.arpa")
    p1, p2, p3, predicted, by_h3 = _reference_kneser_ney(sentences, words)
    rng = random.Random(1)
    histories = rng.sample(sorted(by_h3), 25) + [("<s>", "<s>")]
    for a, b in histories:
        for w in predicted:
            ref = p3(w, a, b) if a != "<s>" or b != "<s>" else p2(w, "<s>")
            hist = [b] if (a, b) == ("<s>", "<s>") else [a, b]
            assert 10.0 ** m.log10_prob(w, hist) == pytest.approx(ref, rel=2e-5), (a, b, w)
    for w in predicted:
        assert 10.0 ** m.log10_prob(w, []) == pytest.approx(p1(w), rel=2e-5)


def test_agrees_with_kaldingram(tmp_path):
    """Cross-check with a real LM tool: kaldingram (SRILM-style back-off KN, pure Python) trained on the same
    corpus finds exactly the same n-grams, and its held-out perplexity is close to ours (ours interpolates, so
    it is usually a little lower)."""
    train = pytest.importorskip("kaldingram.train")
    import subprocess
    import sys

    words = make_vocabulary(300, seed=11)
    gen = SentenceGenerator(300, GeneratorParams(num_classes=12), seed=11)
    ids, off = gen.sample(3000, seed=11, stream=0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(" ".join(words[i] for i in ids[off[k] : off[k + 1]]) + "\n" for k in range(len(off) - 1)))
    build_arpa(ids, off, words, tmp_path / "ours.arpa")
    subprocess.run(
        [sys.executable, "-m", "kaldingram.train", "--ngram-order", "3", "--text", str(corpus), "--lm", str(tmp_path / "kng.arpa"), "--verbose", "5"],
        check=True, capture_output=True,
    )
    ours, theirs = ArpaModel(tmp_path / "ours.arpa"), ArpaModel(tmp_path / "kng.arpa")
    for n in (2, 3):
        assert {g for g in ours.probs if len(g) == n} == {g for g in theirs.probs if len(g) == n}
    # kaldingram knows the seen words only and writes no <unk>; ours covers the whole vocabulary and <unk>
    seen = {words[i] for i in ids}
    assert set(theirs.vocab) == seen | {"<s>", "</s>"}
    assert set(ours.vocab) == set(words) | {"<s>", "</s>", "<unk>"}
    hid, hoff = gen.sample(300, seed=11, stream=1)
    held = [[words[i] for i in hid[hoff[k] : hoff[k + 1]]] for k in range(len(hoff) - 1)]
    held = [s for s in held if set(s) <= seen]  # sentences kaldingram can score
    assert len(held) > 200
    n_tok = sum(len(s) + 1 for s in held)
    ppl = [10 ** (-sum(m.sentence_log10_prob(s) for s in held) / n_tok) for m in (ours, theirs)]
    assert ppl[0] == pytest.approx(ppl[1], rel=0.15), ppl
