"""The HLG builder (recipes/graphs/hlg.py: epsilon removal on arrays, H made epsilon-free before composing)
against the previous builder, kept here as the oracle (OpenFst RmEpsilon of eps:eps arcs, a Python pass folding
eps:word arcs forward, H o LG' then RmEpsilon of the composition): on the toy LM and the tiny workload, both
HLGs have the same arcs (labels, destinations, word sequences; weights to float rounding), give every sampled
frame-label sequence the same best graph score and words, and our CPU decoder the same best path on random
log-probs. Plus the array operations on their own (remove_epsilons,
connect_arrays, WordSequences) against OpenFst on small random FSTs."""
from __future__ import annotations

import kaldifst
import numpy as np
import pytest

from decoders.graph import WfstGraph
from recipes.graphs.build import build_lang
from recipes.graphs.compile import compile_HLG
from recipes.graphs.convert import hlg_to_graph
from recipes.graphs.fstutil import FstArrays, arrays_to_fst, fst_to_arrays
from recipes.graphs.hlg import WordSequences, connect_arrays, remove_epsilons
from recipes.graphs.paths import ArcIndex, forced_best_path, sample_label_sequence
from recipes.graphs.symbols import TokenTable, WordTable
from recipes.graphs.topologies import TOPOLOGIES, build_topology
from recipes.graphs.toy import TOY_WORDS, toy_tokens, write_toy_arpa


# ---------------------------------------------------------------------------------------------------------
# The previous builder (commit 7a45629 recipes/graphs/compile.py), the oracle
# ---------------------------------------------------------------------------------------------------------


def _csr(src, num_states):
    order = np.argsort(src, kind="stable")
    splits = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_states), out=splits[1:])
    return order, splits


def _fold_word_epsilons(a: FstArrays, base: int, max_rounds: int = 64):
    compounds: list[tuple] = []
    cindex: dict[tuple, int] = {}

    def seq(label):
        return () if label == 0 else compounds[label - base] if label >= base else (label,)

    def label_of(s):
        if not s:
            return 0
        if len(s) == 1:
            return s[0]
        if s not in cindex:
            cindex[s] = base + len(compounds)
            compounds.append(s)
        return cindex[s]

    for _ in range(max_rounds):
        eps = np.nonzero(a.ilabel == 0)[0]
        if eps.size == 0:
            return a, compounds
        order, splits = _csr(a.src, a.num_states)
        keep = a.ilabel != 0
        ns, nd, ni, no, nc = [], [], [], [], []
        for e in eps.tolist():
            s, t, w, c = int(a.src[e]), int(a.dest[e]), int(a.olabel[e]), float(a.cost[e])
            assert not np.isfinite(a.final[t])
            for f in order[splits[t]:splits[t + 1]].tolist():
                ns.append(s)
                nd.append(int(a.dest[f]))
                ni.append(int(a.ilabel[f]))
                no.append(label_of(seq(w) + seq(int(a.olabel[f]))))
                nc.append(np.float32(c) + a.cost[f])
        a = FstArrays(a.start, a.num_states, np.concatenate([a.src[keep], np.asarray(ns, np.int32)]),
                      np.concatenate([a.dest[keep], np.asarray(nd, np.int32)]),
                      np.concatenate([a.ilabel[keep], np.asarray(ni, np.int32)]),
                      np.concatenate([a.olabel[keep], np.asarray(no, np.int32)]),
                      np.concatenate([a.cost[keep], np.asarray(nc, np.float32)]), a.final)
    raise RuntimeError("epsilon chains did not terminate")


def reference_LGp(LG, table: TokenTable, words: WordTable):
    a = fst_to_arrays(LG)
    final_label = table.first_disambig_label
    ilabel = a.ilabel.copy()
    ilabel[ilabel >= table.first_disambig_label] = 0
    olabel = a.olabel.copy()
    olabel[olabel == words.disambig0] = 0
    fin = np.nonzero(np.isfinite(a.final))[0].astype(np.int32)
    sf = a.num_states
    final = np.full(a.num_states + 1, np.inf, np.float32)
    final[sf] = 0.0
    LGp = arrays_to_fst(FstArrays(a.start, a.num_states + 1, np.concatenate([a.src, fin]),
                                  np.concatenate([a.dest, np.full(fin.shape, sf, np.int32)]),
                                  np.concatenate([ilabel, np.full(fin.shape, final_label, np.int32)]),
                                  np.concatenate([olabel, np.zeros(fin.shape, np.int32)]),
                                  np.concatenate([a.cost, a.final[fin]]), final))
    kaldifst.rmepsilon(LGp)
    kaldifst.connect(LGp)
    b, compounds = _fold_word_epsilons(fst_to_arrays(LGp), len(words.symbols()))
    LGf = arrays_to_fst(b)
    kaldifst.connect(LGf)
    kaldifst.arcsort(LGf, sort_type="ilabel")
    return LGf, compounds


def reference_HLG(LGp, topology: str, table: TokenTable):
    H = build_topology(topology, table, with_disambig=False, final_label=table.first_disambig_label)
    HLG = kaldifst.compose(H, LGp, connect=True)
    kaldifst.rmepsilon(HLG)
    kaldifst.connect(HLG)
    kaldifst.arcsort(HLG, sort_type="ilabel")
    return HLG


# ---------------------------------------------------------------------------------------------------------
# Both builders on one lang directory
# ---------------------------------------------------------------------------------------------------------


def _both_hlgs(lang, tokens, topology):
    symbols = lang.words.symbols()
    new = hlg_to_graph(compile_HLG(lang.LG_epsfree, topology, lang.table), lang.table, symbols, lang.compounds)
    LGf, compounds = reference_LGp(lang.LG, lang.table, lang.words)
    old = hlg_to_graph(reference_HLG(LGf, topology, lang.table), lang.table, symbols, compounds)
    return new, old


def _assert_same_arcs(new: WfstGraph, old: WfstGraph) -> None:
    """The same graph up to state numbering (the two compositions discover states in another order): as many
    states, arcs and multi-word arcs, the same out-degree distribution and in-degree distribution, and the same
    multiset of arcs as (input label, word sequence, weight) -- weights to float rounding (sums taken in another
    order)."""
    from decoders.graph import _permute_csr

    assert (new.num_states, new.num_arcs, new.num_multiword_arcs) == (old.num_states, old.num_arcs,
                                                                      old.num_multiword_arcs)
    np.testing.assert_array_equal(np.sort(np.diff(new.row_splits)), np.sort(np.diff(old.row_splits)))
    np.testing.assert_array_equal(np.sort(np.bincount(new.dest, minlength=new.num_states)),
                                  np.sort(np.bincount(old.dest, minlength=old.num_states)))
    keyed = []
    for g in (new, old):
        splits, words = g.aux_csr()
        n = np.diff(splits)
        last = np.zeros(g.num_arcs, np.int64)
        last[n > 0] = words[splits[1:][n > 0] - 1]
        order = np.lexsort((g.weight, last, n, g.olabel, g.ilabel))
        keyed.append((g.ilabel[order], g.olabel[order], n[order], g.weight[order], _permute_csr(splits, words, order)[1]))
    for name, x, y in zip(("ilabel", "olabel", "words per arc"), keyed[0][:3], keyed[1][:3]):
        np.testing.assert_array_equal(x, y, err_msg=name)
    np.testing.assert_allclose(keyed[0][3], keyed[1][3], atol=1e-4, err_msg="weights")
    np.testing.assert_array_equal(keyed[0][4], keyed[1][4], err_msg="word sequences")


def _words(g: WfstGraph, ids):
    return [g.words[w] for w in ids]


def _assert_equivalent(new: WfstGraph, old: WfstGraph, rng, n_paths: int, n_utts: int, frames: int):
    """Same best graph score and words for label sequences sampled from either graph; the same best path of our
    CPU decoder (wide beam) on random log-probs."""
    assert new.num_epsilon_arcs == old.num_epsilon_arcs == 0
    assert new.num_tokens == old.num_tokens and new.words == old.words
    ni, oi = ArcIndex(new), ArcIndex(old)
    checked = ties = 0
    for g in (new, old):
        for _ in range(n_paths):
            labels = sample_label_sequence(g, rng, max_frames=frames)
            if labels is None:
                continue
            pn, po = forced_best_path(new, labels, index=ni), forced_best_path(old, labels, index=oi)
            assert pn.reached_final and po.reached_final, labels
            assert pn.graph_score == pytest.approx(po.graph_score, abs=1e-4), labels
            if _words(new, pn.words) != _words(old, po.words):  # an exact tie of a back-off LM: same multiset
                assert sorted(_words(new, pn.words)) == sorted(_words(old, po.words)), labels
                ties += 1
            checked += 1
    assert checked >= n_paths and ties <= checked // 10
    import torch

    from decoders.wfst import WfstDecoder, WfstDecoderConfig

    lp = torch.log_softmax(torch.from_numpy(rng.normal(size=(n_utts, frames, new.num_tokens)) * 4).float(), -1)
    lengths = torch.tensor([frames] + rng.integers(1, frames + 1, size=n_utts - 1).tolist())
    cfg = WfstDecoderConfig(search_beam=30.0, max_active=100000)
    rn, ro = (WfstDecoder(g, cfg, "cpu").decode(lp, lengths) for g in (new, old))
    np.testing.assert_allclose(rn.scores.numpy(), ro.scores.numpy(), atol=1e-3)
    same = sum(a == b for a, b in zip(rn.word_strings, ro.word_strings))
    assert same >= n_utts - 1  # one exact tie allowed


@pytest.fixture(scope="module")
def toy_lang(tmp_path_factory):
    root = tmp_path_factory.mktemp("hlg_toy")
    tokens = toy_tokens("last")
    lang = build_lang(root / "lang", tokens, TOY_WORDS, write_toy_arpa(root / "toy.arpa"))
    return lang, tokens


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_toy_hlg_equals_previous_builder(toy_lang, topology):
    lang, tokens = toy_lang
    new, old = _both_hlgs(lang, tokens, topology)
    _assert_same_arcs(new, old)
    _assert_equivalent(new, old, np.random.default_rng(1), n_paths=60, n_utts=6, frames=16)


@pytest.fixture(scope="module")
def tiny_lang(tmp_path_factory):
    from recipes.workload import prepare_workload

    wl = prepare_workload("tiny")  # cached under data/workload (~5 s the first time)
    tokens = wl.token_set("char", "last")
    root = tmp_path_factory.mktemp("hlg_tiny")
    lang = build_lang(root / "lang", tokens, wl.words(), wl.arpa_path)
    return lang, tokens


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["compact", "normal"])
def test_tiny_hlg_equals_previous_builder(tiny_lang, topology):
    """The tiny workload (2k words, 123k n-grams): the back-off structure of a real LM, words on epsilon arcs."""
    lang, tokens = tiny_lang
    new, old = _both_hlgs(lang, tokens, topology)
    _assert_same_arcs(new, old)
    _assert_equivalent(new, old, np.random.default_rng(2), n_paths=40, n_utts=4, frames=40)


# ---------------------------------------------------------------------------------------------------------
# The array operations on their own
# ---------------------------------------------------------------------------------------------------------


def _random_fst(rng, n=12, eps_words=True) -> FstArrays:
    """A random transducer with an acyclic epsilon part (epsilons go to higher state ids), labels 1..4, words 1..5;
    with eps_words, epsilons carrying words and finality as explicit arcs, else plain epsilons and final weights."""
    src, dst, il, ol, c = [], [], [], [], []
    for s in range(n):
        for _ in range(int(rng.integers(1, 4))):
            src.append(s), dst.append(int(rng.integers(0, n))), il.append(int(rng.integers(1, 5)))
            ol.append(int(rng.integers(0, 6))), c.append(float(rng.uniform(0, 2)))
        if s < n - 1 and rng.random() < 0.6:
            for _ in range(int(rng.integers(1, 3))):
                src.append(s), dst.append(int(rng.integers(s + 1, n))), il.append(0)
                ol.append(int(rng.integers(1, 6)) if eps_words and rng.random() < 0.3 else 0)
                c.append(float(rng.uniform(0, 1)))
    final = np.full(n + 1, np.inf, np.float32)
    if eps_words:  # finality as explicit arcs (label 5) into a super-final state, as the HLG recipe makes it
        for s in rng.choice(n, size=3, replace=False).tolist():
            src.append(s), dst.append(n), il.append(5), ol.append(0), c.append(float(rng.uniform(0, 1)))
        final[n] = 0.0
    else:  # final weights inherited through epsilon paths
        final[rng.choice(n, size=3, replace=False)] = rng.uniform(0, 1, size=3).astype(np.float32)
    return FstArrays(0, n + 1, np.asarray(src, np.int32), np.asarray(dst, np.int32), np.asarray(il, np.int32),
                     np.asarray(ol, np.int32), np.asarray(c, np.float32), final)


def _paths(a: FstArrays, seqs, max_len=3) -> dict:
    """{(input labels, output words): best cost} over every accepting path reading at most max_len labels
    (dynamic programming over (state, inputs, outputs); epsilon arcs read nothing, costs are >= 0)."""
    best: dict = {}
    level = {(a.start, (), ()): 0.0}
    arcs = [np.nonzero(a.src == s)[0].tolist() for s in range(a.num_states)]
    for k in range(max_len + 1):
        changed = True
        while changed:  # epsilon closure of this level (relaxation; the epsilon part is acyclic)
            changed = False
            for (s, ins, outs), cost in list(level.items()):
                for e in arcs[s]:
                    if a.ilabel[e] != 0:
                        continue
                    key = (int(a.dest[e]), ins, outs + seqs.words(int(a.olabel[e])))
                    c = cost + float(a.cost[e])
                    if c < level.get(key, np.inf) - 1e-9:
                        level[key], changed = c, True
        for (s, ins, outs), cost in level.items():
            if np.isfinite(a.final[s]):
                best[(ins, outs)] = min(best.get((ins, outs), np.inf), cost + float(a.final[s]))
        if k == max_len:
            break
        nxt: dict = {}
        for (s, ins, outs), cost in level.items():
            for e in arcs[s]:
                if a.ilabel[e] == 0:
                    continue
                key = (int(a.dest[e]), ins + (int(a.ilabel[e]),), outs + seqs.words(int(a.olabel[e])))
                nxt[key] = min(nxt.get(key, np.inf), cost + float(a.cost[e]))
        level = nxt
    return best


@pytest.mark.parametrize("seed", range(6))
def test_remove_epsilons_keeps_every_best_path(seed):
    """Exhaustively: the same (input, output) relation with the same best cost per pair; no epsilon left."""
    rng = np.random.default_rng(seed)
    a = _random_fst(rng, eps_words=seed % 2 == 0)
    seqs = WordSequences(base=6)
    b, stats = remove_epsilons(a, seqs)
    assert not np.any(b.ilabel == 0) and stats["epsilon_arcs_removed"] == int(np.count_nonzero(a.ilabel == 0))
    want, got = _paths(a, seqs), _paths(b, seqs)
    assert want.keys() == got.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-5), k


def test_remove_epsilons_refuses_cycles_and_words_into_finals():
    cyc = FstArrays(0, 2, np.array([0, 1, 0], np.int32), np.array([1, 0, 1], np.int32), np.array([0, 0, 1], np.int32),
                    np.zeros(3, np.int32), np.ones(3, np.float32), np.array([np.inf, 0.0], np.float32))
    with pytest.raises(RuntimeError, match="cycle"):
        remove_epsilons(cyc, WordSequences(base=2), max_depth=10)
    wordy = FstArrays(0, 2, np.array([0], np.int32), np.array([1], np.int32), np.array([0], np.int32),
                      np.array([1], np.int32), np.ones(1, np.float32), np.array([np.inf, 0.0], np.float32))
    with pytest.raises(ValueError, match="final"):
        remove_epsilons(wordy, WordSequences(base=2))


@pytest.mark.parametrize("seed", range(4))
def test_connect_arrays_matches_openfst(seed):
    rng = np.random.default_rng(100 + seed)
    a = _random_fst(rng, n=15)
    ours = connect_arrays(a)
    fst = arrays_to_fst(a)
    kaldifst.connect(fst)
    theirs = fst_to_arrays(fst)
    assert (ours.num_states, ours.num_arcs) == (theirs.num_states, theirs.num_arcs)
    seqs = WordSequences(base=6)
    assert _paths(ours, seqs) == pytest.approx(_paths(a, seqs))


def test_word_sequences_concat():
    seqs = WordSequences(base=10)
    got = seqs.concat(np.array([0, 3, 3, 0, 3]), np.array([4, 0, 4, 0, 4]))
    assert got[:2].tolist() == [4, 3] and got[3] == 0 and got[2] == got[4] == 10 and seqs.compounds == [(3, 4)]
    assert seqs.concat(np.array([10]), np.array([5])).tolist() == [11] and seqs.words(11) == (3, 4, 5)
