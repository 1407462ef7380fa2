"""Higher-order workload LMs (recipes.lm.estimate_kneser_ney_order, Workload.arpa_of_order): the order-4 ARPA
for lattice / n-best rescoring. Same estimator as the order-3 one (equal tables at order 3), exact against a
dict-based reference Kneser-Ney at order 4, normalised, well-formed for KenLM and kaldilm, cached."""
import random
from collections import Counter, defaultdict

import numpy as np
import pytest

from recipes.lm import ArpaModel, build_arpa, estimate_kneser_ney, estimate_kneser_ney_order
from recipes.text import GeneratorParams, SentenceGenerator, make_vocabulary
from recipes.workload import prepare_workload


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # the tiny workload shared with tests/test_workload_*.py (same directory: generated once per session)
    return prepare_workload("tiny", tmp_path_factory.getbasetemp() / "shared_workload", seed=0)


def _corpus(n_words=150, n_sent=800, seed=5, classes=10):
    words = make_vocabulary(n_words, seed=seed)
    ids, off = SentenceGenerator(n_words, GeneratorParams(num_classes=classes), seed=seed).sample(n_sent, seed=seed,
                                                                                                    stream=0)
    return words, ids, off


@pytest.mark.parametrize("thr", [0.0, 2e-5])
def test_order3_equals_the_order3_estimator(thr):
    words, ids, off = _corpus()
    a, sa = estimate_kneser_ney(ids, off, len(words), thr)
    b, sb = estimate_kneser_ney_order(ids, off, len(words), 3, thr)
    assert sa.counts == sb.counts and sa.counts_before_pruning == sb.counts_before_pruning
    assert sa.discounts == pytest.approx(sb.discounts, abs=0)
    for x, y in zip(a, b):
        assert np.array_equal(x.keys, y.keys) and np.array_equal(x.is_history, y.is_history)
        np.testing.assert_allclose(x.logp, y.logp, rtol=0, atol=1e-12)
        np.testing.assert_allclose(x.logbow, y.logbow, rtol=0, atol=1e-12)


def _reference_kn(sentences, vocab, order):
    """Dict-based interpolated Kneser-Ney of any order (Chen & Goodman), independent of recipes.lm: the highest
    order raw counts, lower orders the number of distinct left contexts (raw counts for n-grams starting with <s>)."""
    raw = {k: Counter() for k in range(1, order + 1)}
    for s in sentences:
        seq = ["<s>"] + s + ["</s>"]
        for k in range(1, order + 1):
            for i in range(len(seq) - k + 1):
                raw[k][tuple(seq[i : i + k])] += 1
    counts = {order: dict(raw[order])}
    for k in range(order - 1, 0, -1):
        left = defaultdict(set)
        for g in raw[k + 1]:
            left[g[1:]].add(g[0])
        counts[k] = {g: (raw[k][g] if g[0] == "<s>" else len(left[g])) for g in raw[k] if g != ("<s>",)}

    def disc(vals):
        n1 = sum(1 for v in vals if v == 1)
        n2 = sum(1 for v in vals if v == 2)
        return min(max(n1 / (n1 + 2 * n2), 0.05), 0.95) if n1 and n2 else 0.5

    D = {k: disc(counts[k].values()) for k in counts}
    predicted = list(vocab) + ["</s>", "<unk>"]
    tot1 = sum(counts[1].values())
    ext = {k: defaultdict(dict) for k in range(2, order + 1)}
    for k in range(2, order + 1):
        for g, v in counts[k].items():
            ext[k][g[:-1]][g[-1]] = v

    def p(w, h):
        h = tuple(h)[-(order - 1):] if order > 1 else ()
        if not h:
            return max(counts[1].get((w,), 0) - D[1], 0) / tot1 + D[1] * len(counts[1]) / tot1 / len(predicted)
        k = len(h) + 1
        e = ext[k].get(h)
        if not e:
            return p(w, h[1:])
        tot = sum(e.values())
        return max(e.get(w, 0) - D[k], 0) / tot + D[k] * len(e) / tot * p(w, h[1:])

    return p, predicted, ext


def test_unpruned_order4_equals_reference_kneser_ney(tmp_path):
    words, ids, off = _corpus(n_words=60, n_sent=300, seed=9, classes=6)
    sentences = [[words[i] for i in ids[off[k] : off[k + 1]]] for k in range(len(off) - 1)]
    stats = build_arpa(ids, off, words, tmp_path / "lm4.arpa", prune_threshold=0.0, order=4)
    m = ArpaModel(tmp_path / "lm4.arpa")
    assert m.order == 4 and [m.counts[n] for n in (1, 2, 3, 4)] == stats.counts
    p, predicted, ext = _reference_kn(sentences, words, 4)
    rng = random.Random(2)
    histories = rng.sample(sorted(ext[4]), 20) + rng.sample(sorted(ext[3]), 5) + [("<s>",), ()]
    for h in histories:
        for w in predicted:
            assert 10.0 ** m.log10_prob(w, h) == pytest.approx(p(w, h), rel=2e-5), (h, w)


@pytest.mark.parametrize("thr", [0.0, 2e-5])
def test_order4_normalised_and_well_formed(tmp_path, thr):
    words, ids, off = _corpus()
    stats = build_arpa(ids, off, words, tmp_path / "lm4.arpa", prune_threshold=thr, order=4)
    m = ArpaModel(tmp_path / "lm4.arpa")
    assert [m.counts[n] for n in (1, 2, 3, 4)] == stats.counts
    if thr:
        assert stats.counts[3] < stats.counts_before_pruning[3]
    for ng in m.probs:
        if len(ng) >= 2:  # history and suffix explicit, the history with a back-off weight (KenLM/arpa2fst need it)
            assert ng[:-1] in m.probs and ng[1:] in m.probs and ng[:-1] in m.bows
    rng = random.Random(0)
    hist = [h for h in m.bows if 1 <= len(h) < 4]
    for h in rng.sample(hist, 30) + [("<s>",), ("never-seen", "words", "here")]:
        assert m.history_mass(h) == pytest.approx(1.0, abs=2e-5), h


def test_bad_order():
    words, ids, off = _corpus()
    with pytest.raises(ValueError, match="order"):
        estimate_kneser_ney_order(ids, off, len(words), 1)
    with pytest.raises(ValueError, match="int64"):
        estimate_kneser_ney_order(ids, off, 200_000, 4)


def test_workload_order4_cached_kenlm_and_kaldilm(tiny, tmp_path):
    path = tiny.arpa_of_order(4)
    assert path.name == "lm_4gram.arpa" and tiny.arpa_of_order(3, 1e-6) == tiny.arpa_path
    mtime = path.stat().st_mtime_ns
    assert tiny.arpa_of_order(4) == path and path.stat().st_mtime_ns == mtime  # cached, not rebuilt
    m = ArpaModel(path)
    assert m.order == 4 and m.counts[4] > 100_000  # unpruned, as LibriSpeech's 4-gram.arpa
    # KenLM (through flashlight) scores sentences as our back-off reading does
    from flashlight.lib.text.decoder.kenlm import KenLM
    from flashlight.lib.text.dictionary import Dictionary

    d = Dictionary()
    for w in m.predicted_vocab():
        d.add_entry(w)
    lm = KenLM(str(path), d)
    for u in tiny.utterances("clean")[:20]:
        words = u["text"].split()
        state, total = lm.start(False), 0.0
        for w in words:
            state, s = lm.score(state, d.get_index(w))
            total += s
        total += lm.finish(state)[1]
        assert total == pytest.approx(m.sentence_log10_prob(words), abs=1e-3)
    import kaldilm

    fst = kaldilm.arpa2fst(input_arpa=str(path), disambig_symbol="#0", read_symbol_table="",
                           write_symbol_table=str(tmp_path / "words.txt"), max_order=4)
    assert fst.count("\n") > sum(m.counts[n] for n in (2, 3, 4))
    with pytest.raises(ValueError, match="int64"):
        type(tiny)(**{**tiny.__dict__, "scale": "bench"}).arpa_of_order(4)


def test_workload_other_orders_never_touch_the_first_pass_lm(tiny):
    sha = __import__("hashlib").sha256(tiny.arpa_path.read_bytes()).hexdigest()
    p3 = tiny.arpa_of_order(3)  # unpruned order 3: its own file
    assert p3.name == "lm_3gram_p0.arpa" and p3 != tiny.arpa_path
    assert ArpaModel(p3).counts[3] > ArpaModel(tiny.arpa_path).counts[3]
    assert tiny.arpa_of_order(4, 1e-6).name == "lm_4gram_p1e-06.arpa"
    assert __import__("hashlib").sha256(tiny.arpa_path.read_bytes()).hexdigest() == sha
    with pytest.raises(ValueError, match="order"):
        tiny.arpa_of_order(1)
