"""eval/rescore.py: whole-lattice and n-best rescoring with an order-4 ARPA against brute force over the
lattice's own paths (am score = path score - graph weights, plus lm_scale * ln P_4gram(words </s>))."""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

from decoders.wfst import WfstDecoder, WfstDecoderConfig
from eval.rescore import NgramLM, lattice_rescore, nbest_rescore
from test_wfst_lattice import NO_PRUNE, acyclic_eps_graph
from wfst_testlib import random_graph, random_log_probs


def write_arpa4(path, words, rng):
    """A small order-4 back-off ARPA over `words` (+ <s>, </s>, <unk>) with random explicit higher orders."""
    uni = list(words) + ["</s>", "<unk>"]
    grams = {1: {}, 2: {}, 3: {}, 4: {}}
    for w in uni:
        grams[1][(w,)] = (float(rng.uniform(-2.0, -0.5)), float(rng.uniform(-0.5, 0.0)))
    grams[1][("<s>",)] = (-99.0, float(rng.uniform(-0.5, 0.0)))
    for n in (2, 3, 4):
        for _ in range(25):
            hist = ("<s>",) + tuple(rng.choice(words, size=n - 2)) if rng.random() < 0.3 else \
                tuple(rng.choice(words, size=n - 1))
            ng = hist + (str(rng.choice(uni[:-1])),)
            if ng[:-1] not in grams[n - 1]:  # ARPA: a history of an explicit n-gram is itself explicit
                grams[n - 1][ng[:-1]] = (float(rng.uniform(-2.0, -0.5)), float(rng.uniform(-0.5, 0.0)))
            grams[n][ng] = (float(rng.uniform(-1.5, -0.1)), float(rng.uniform(-0.5, 0.0)) if n < 4 else None)
    # lower orders referenced as histories need their own lower-order entries (fill by recursion)
    for n in (3, 2):
        for ng in list(grams[n]):
            for m in range(1, n):
                sub = ng[-m:]
                if sub not in grams[m]:
                    grams[m][sub] = (float(rng.uniform(-2.0, -0.5)), float(rng.uniform(-0.5, 0.0)))
    lines = ["\\data\\"] + [f"ngram {n}={len(grams[n])}" for n in (1, 2, 3, 4)] + [""]
    for n in (1, 2, 3, 4):
        lines.append(f"\\{n}-grams:")
        for ng, (p, b) in grams[n].items():
            lines.append(f"{p:.6f}\t{' '.join(ng)}" + (f"\t{b:.6f}" if b is not None and n < 4 else ""))
        lines.append("")
    lines.append("\\end\\")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def lattice_paths(lats, i):
    u = lats._utt(i)
    S = len(u["frame"])
    out_arcs = defaultdict(list)
    for a, s in enumerate(u["src"].tolist()):
        out_arcs[s].append(a)
    paths = []

    def dfs(s, arcs):
        if s == S - 1:
            paths.append(arcs)
        for a in out_arcs[s]:
            dfs(int(u["dst"][a]), arcs + [a])

    if S:
        dfs(0, [])
    return u, paths


@pytest.mark.parametrize("shape", ["HLG", "TLG"])
def test_rescoring_equals_brute_force(tmp_path, shape):
    rng = np.random.default_rng(51 if shape == "HLG" else 52)
    checked = 0
    for case in range(12):
        g = acyclic_eps_graph(rng) if shape == "TLG" else random_graph(rng, num_states=6, num_tokens=3, num_words=8,
                                                                          max_emitting=3)
        arpa = tmp_path / f"lm{case}.arpa"
        write_arpa4(arpa, g.words[1:6], rng)  # w6, w7 are out of the LM's vocabulary: <unk>
        lm = NgramLM(arpa)
        assert lm.order == 4
        T = int(rng.integers(1, 5))
        lp = random_log_probs(rng, 1, T, g.num_tokens, peaky=1.0)
        dec = WfstDecoder(g, WfstDecoderConfig(search_beam=NO_PRUNE, output_beam=5.0, min_active=0, max_active=10**6))
        lats = dec.decode_lattice(lp, torch.tensor([T]))
        u, paths = lattice_paths(lats, 0)
        if not paths:
            assert lattice_rescore(lats, lm)[0].score == -math.inf
            continue
        scale = float(rng.uniform(0.3, 2.0))
        weight = np.asarray(g.weight, dtype=np.float64)
        words_of = lambda p: [w for a in p for w in lats._word_strings(g.arc_words(int(u["arc"][a])))]  # noqa: E731
        am = lambda p: float(sum(float(u["score"][a]) - weight[u["arc"][a]] for a in p))  # noqa: E731
        orig = lambda p: float(sum(float(u["score"][a]) for a in p))  # noqa: E731
        brute = max(am(p) + scale * lm.sentence(words_of(p)) for p in paths)
        got = lattice_rescore(lats, lm, lm_scale=scale)[0]
        assert got.score == pytest.approx(brute, abs=1e-4), case
        assert am_words_score(got.words, paths, words_of, am, lm, scale) == pytest.approx(brute, abs=1e-4)
        # n-best rescoring over every distinct word sequence, each with its best (original-score) path
        best_path_of = {}
        for p in paths:
            key = tuple(words_of(p))
            if key not in best_path_of or orig(p) > orig(best_path_of[key]):
                best_path_of[key] = p
        brute_nb = max(am(p) + scale * lm.sentence(list(k)) for k, p in best_path_of.items())
        got_nb = nbest_rescore(lats, lm, k=len(best_path_of) + 5, lm_scale=scale)[0]
        assert got_nb.score == pytest.approx(brute_nb, abs=1e-4), case
        # lm_scale 0: the best path by am score alone
        assert lattice_rescore(lats, lm, lm_scale=0.0)[0].score == pytest.approx(max(am(p) for p in paths), abs=1e-4)
        checked += 1
    assert checked >= 8


def am_words_score(words, paths, words_of, am, lm, scale):
    """Best rescored score among the lattice paths that output `words` (the hypothesis is consistent)."""
    return max(am(p) + scale * lm.sentence(words_of(p)) for p in paths if words_of(p) == list(words))


def test_rescore_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError):
        NgramLM(tmp_path / "missing.arpa")
    rng = np.random.default_rng(3)
    g = acyclic_eps_graph(rng, finals="all")
    arpa = tmp_path / "lm.arpa"
    write_arpa4(arpa, g.words[1:], rng)
    lats = WfstDecoder(g).decode_lattice(random_log_probs(rng, 1, 3, g.num_tokens), torch.tensor([3]))
    with pytest.raises(ValueError, match="lm_scale"):
        lattice_rescore(lats, NgramLM(arpa), lm_scale=float("nan"))
    with pytest.raises(ValueError, match="k must be"):
        nbest_rescore(lats, NgramLM(arpa), k=0)
