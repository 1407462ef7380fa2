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
