"""WFST lattice mode (decoders/lattice.py, decoders/csrc/wfst_lattice_cpu.cpp) against exhaustive oracles.

Graphs are tiny and random in two shapes: HLG (epsilon-free, k2's) and TLG (acyclic epsilon arcs inside a frame),
T <= 4, so every path of graph x frames can be enumerated:
- the lattice's best path and score are decode()'s (scores bit-identical: the same forward pass);
- with no search pruning, the lattice's arc set is exactly the set of arcs on paths within output_beam of the best;
- nbest(k) is the brute-force ranking of distinct word sequences by their best path;
- arc posteriors and the total log-probability match brute-force sums over the lattice's own paths;
- MBR on a constructed lattice where MBR and MAP differ gives the MBR answer with the expected confidences.
k2py exposes its lattices only as an opaque `FsaVec` (no arcs, no scores), so lattices are not compared with
k2's directly; the best paths are, through decode() (tests/test_wfst_agreement.py).
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

from decoders.graph import EPSILON, FINAL, WfstGraph
from decoders.wfst import WfstDecoder, WfstDecoderConfig
from wfst_testlib import random_graph, random_log_probs

NO_PRUNE = 1.0e4  # search beam that admits every finite arc


def acyclic_eps_graph(rng, *, num_states=None, num_tokens=None, num_words=8, finals="some"):
    """TLG-shaped: emitting arcs anywhere, epsilon arcs only to higher-numbered states (acyclic), some words
    on epsilon arcs, final state last."""
    n = int(num_states or rng.integers(3, 9))
    v = int(num_tokens or rng.integers(2, 5))
    final = n - 1
    src, dst, il, ol, wt = [], [], [], [], []
    for s in range(n - 1):
        for _ in range(int(rng.integers(1, 3))):
            src.append(s)
            dst.append(int(rng.integers(0, n - 1)))
            il.append(int(rng.integers(0, v)))
            ol.append(0 if rng.random() < 0.6 else int(rng.integers(1, num_words)))
            wt.append(float(rng.uniform(-2.0, 0.3)))
        if s + 1 < n - 1 and rng.random() < 0.6:
            src.append(s)
            dst.append(int(rng.integers(s + 1, n - 1)))
            il.append(EPSILON)
            ol.append(0 if rng.random() < 0.5 else int(rng.integers(1, num_words)))
            wt.append(float(-rng.uniform(0.0, 1.0)))
        if finals == "all" or (finals == "some" and rng.random() < 0.5):
            src.append(s)
            dst.append(final)
            il.append(FINAL)
            ol.append(0)
            wt.append(float(rng.uniform(-1.0, 0.0)))
    words = ["<eps>"] + [f"w{i}" for i in range(1, num_words)]
    return WfstGraph.from_arcs(src, dst, il, ol, wt, num_states=n, start_state=0, final_state=final,
                               num_tokens=v, words=words)


def small_graph(rng, shape):
    if shape == "TLG":
        return acyclic_eps_graph(rng)
    return random_graph(rng, num_states=int(rng.integers(3, 8)), num_tokens=int(rng.integers(2, 5)), num_words=8,
                        max_emitting=3)


def all_paths(graph: WfstGraph, lp: np.ndarray, T: int, *, acoustic_scale=1.0, allow_partial=True):
    """Every complete path of graph x T frames with k2's final-step rule (no search pruning):
    [(score (float64 sum of the float32 arc scores), arc keys, word ids)], a key being
    (src frame, src state, graph arc, dst frame, dst state)."""
    rs, il, dest, wt = graph.row_splits, graph.ilabel, graph.dest, graph.weight

    def ll(a, t):
        ac = np.float32(0.0) if t is None else np.float32(np.float32(lp[t, il[a]]) * np.float32(acoustic_scale))
        return float(np.float32(ac + np.float32(wt[a])))

    # states reachable at frame T (after its epsilon closure): decides the allow_partial redirect
    reach = {graph.start_state}
    def closure(states):
        stack, seen = list(states), set(states)
        while stack:
            s = stack.pop()
            for a in range(rs[s], rs[s + 1]):
                if il[a] == EPSILON and int(dest[a]) not in seen:
                    seen.add(int(dest[a]))
                    stack.append(int(dest[a]))
        return seen
    reach = closure(reach)
    for _ in range(T):
        reach = closure({int(dest[a]) for s in reach for a in range(rs[s], rs[s + 1]) if il[a] >= 0})
    redirect = allow_partial and not any(il[a] == FINAL for s in reach for a in range(rs[s], rs[s + 1]))

    out = []

    def dfs(s, f, score, keys, words):
        for a in range(rs[s], rs[s + 1]):
            lab = int(il[a])
            ws = tuple(graph.arc_words(a))
            if f == T and (redirect or lab == FINAL):
                d = graph.final_state if redirect else int(dest[a])
                if d == graph.final_state:
                    out.append((score + ll(a, None), keys + [(f, s, a, f + 1, d)], words + ws))
            if lab == EPSILON:
                dfs(int(dest[a]), f, score + ll(a, None), keys + [(f, s, a, f, int(dest[a]))], words + ws)
            elif lab >= 0 and f < T:
                dfs(int(dest[a]), f + 1, score + ll(a, f), keys + [(f, s, a, f + 1, int(dest[a]))], words + ws)

    dfs(graph.start_state, 0, 0.0, [], ())
    return out


def lattice_keys(lats, i):
    u = lats._utt(i)
    return {(int(u["frame"][s]), int(u["gstate"][s]), int(a), int(u["frame"][d]), int(u["gstate"][d]))
            for s, d, a in zip(u["src"], u["dst"], u["arc"])}


def words_of(graph, names):
    return tuple(graph.words.index(w) for w in names)


# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["HLG", "TLG"])
def test_lattice_best_path_and_score_equal_decode(shape):
    rng = np.random.default_rng(11 if shape == "HLG" else 12)
    for case in range(25):
        g = small_graph(rng, shape)
        T = int(rng.integers(1, 7))
        lp = random_log_probs(rng, 3, T, g.num_tokens)
        lengths = torch.tensor([T, int(rng.integers(0, T + 1)), 0])
        beam = [NO_PRUNE, 3.0, 1.0][case % 3]  # tight beams too: the lattice follows the pruned search
        cfg = WfstDecoderConfig(search_beam=beam, output_beam=float(rng.uniform(0.5, 6.0)), min_active=1, max_active=3)
        dec = WfstDecoder(g, cfg)
        ref = dec.decode(lp, lengths)
        lats = dec.decode_lattice(lp, lengths)
        assert lats.scores.double().tolist() == ref.scores.tolist()  # bit-identical forward pass
        assert lats.has_path == ref.has_path and lats.reached_final == ref.reached_final
        best = lats.best()
        for b in range(3):
            if not ref.has_path[b]:
                assert lats.num_arcs(b) == 0 and best[b].words == [] and best[b].score == -math.inf
                continue
            assert best[b].words == ref.word_strings[b], (case, b)
            assert best[b].score == pytest.approx(float(ref.scores[b]), abs=1e-4)
            # the lattice is topologically sorted: start first, final last, arcs forward
            u = lats._utt(b)
            assert np.all(u["src"] < u["dst"]) and np.all(np.diff(u["src"]) >= 0)
            assert u["gstate"][-1] == g.final_state and u["frame"][-1] == int(lengths[b]) + 1
            assert u["gstate"][0] == g.start_state and u["frame"][0] == 0


@pytest.mark.parametrize("shape", ["HLG", "TLG"])
def test_lattice_is_every_arc_on_a_path_within_output_beam(shape):
    rng = np.random.default_rng(21 if shape == "HLG" else 22)
    checked = 0
    for case in range(30):
        g = small_graph(rng, shape)
        T = int(rng.integers(0, 5))
        lp = random_log_probs(rng, 1, max(T, 1), g.num_tokens)
        ob = float(rng.uniform(0.3, 5.0))
        dec = WfstDecoder(g, WfstDecoderConfig(search_beam=NO_PRUNE, output_beam=ob, min_active=0, max_active=10**6))
        lats = dec.decode_lattice(lp, torch.tensor([T]))
        paths = all_paths(g, lp[0].numpy(), T)
        if not paths:
            assert not lats.has_path[0] and lats.num_arcs(0) == 0
            continue
        best = max(p[0] for p in paths)
        through: dict = defaultdict(lambda: -math.inf)  # best path score through each arc key
        for score, keys, _ in paths:
            for k in keys:
                through[k] = max(through[k], score)
        assert float(lats.scores[0]) == pytest.approx(best, abs=1e-4)
        got = lattice_keys(lats, 0)
        # exact set, away from float rounding at the threshold (1e-4 band)
        inside = {k for k, s in through.items() if s >= best - ob + 1e-4}
        border = {k for k, s in through.items() if abs(s - (best - ob)) < 1e-4}
        assert inside <= got, case
        assert got - inside <= border, case
        # k2's backward score: best completion minus the best path (<= 0; 0 on the best path)
        u = lats._utt(0)
        assert np.all(u["fwd"] + u["bwd"] <= 1e-4) and np.all(u["fwd"] + u["bwd"] >= -ob - 1e-4)
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("shape", ["HLG", "TLG"])
def test_nbest_equals_brute_force_distinct_word_sequences(shape):
    rng = np.random.default_rng(31 if shape == "HLG" else 32)
    checked = 0
    for case in range(30):
        g = small_graph(rng, shape)
        T = int(rng.integers(1, 5))
        lp = random_log_probs(rng, 1, T, g.num_tokens, peaky=1.0)
        ob = float(rng.uniform(2.0, 8.0))
        dec = WfstDecoder(g, WfstDecoderConfig(search_beam=NO_PRUNE, output_beam=ob, min_active=0, max_active=10**6))
        lats = dec.decode_lattice(lp, torch.tensor([T]))
        paths = all_paths(g, lp[0].numpy(), T)
        if not paths:
            assert lats.nbest(3) == [[]]
            continue
        best = max(p[0] for p in paths)
        by_words: dict = {}
        for score, _, words in paths:
            if score >= best - ob + 1e-4:  # word sequences whose best path is in the lattice
                by_words[words] = max(by_words.get(words, -math.inf), score)
        ranked = sorted(by_words.items(), key=lambda kv: -kv[1])
        k = int(rng.integers(1, 6))
        got = lats.nbest(k)[0]
        assert len(got) == min(k, len(ranked)) or len(got) <= len(by_words) + 1
        for h, (words, score) in zip(got, ranked):
            assert h.score == pytest.approx(score, abs=1e-4), case  # same score sequence, best first
        for h in got:  # each hypothesis is a distinct word sequence scored by its best path
            ids = words_of(g, h.words)
            assert ids in by_words or abs(h.score - (best - ob)) < 1e-3
            if ids in by_words:
                assert h.score == pytest.approx(by_words[ids], abs=1e-4)
        assert len({tuple(h.words) for h in got}) == len(got)
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("shape", ["HLG", "TLG"])
def test_posteriors_equal_brute_force_over_lattice_paths(shape):
    rng = np.random.default_rng(41 if shape == "HLG" else 42)
    for case in range(15):
        g = small_graph(rng, shape)
        T = int(rng.integers(1, 5))
        lp = random_log_probs(rng, 1, T, g.num_tokens, peaky=1.0)
        dec = WfstDecoder(g, WfstDecoderConfig(search_beam=NO_PRUNE, output_beam=4.0, min_active=0, max_active=10**6))
        lats = dec.decode_lattice(lp, torch.tensor([T]))
        if not lats.has_path[0]:
            continue
        u = lats._utt(0)
        S = len(u["frame"])
        # enumerate the lattice's own paths (a DAG)
        out_arcs = defaultdict(list)
        for a, s in enumerate(u["src"].tolist()):
            out_arcs[s].append(a)
        paths = []
        def dfs(s, score, arcs):
            if s == S - 1:
                paths.append((score, arcs))
            for a in out_arcs[s]:
                dfs(int(u["dst"][a]), score + float(u["score"][a]), arcs + [a])
        dfs(0, 0.0, [])
        logz = np.logaddexp.reduce([p[0] for p in paths])
        assert lats.total_logprob(0) == pytest.approx(logz, abs=1e-4)
        post = np.zeros(len(u["src"]))
        for score, arcs in paths:
            post[arcs] += math.exp(score - logz)
        np.testing.assert_allclose(lats.arc_posteriors(0), post, atol=1e-5)
        # word posteriors aggregate the arc posteriors by (word, start frame)
        wp = lats.word_posteriors(0)
        assert all(0.0 <= p <= 1.0 + 1e-5 for _, _, p in wp)


def _three_path_graph():
    """Paths (one token per frame, log-prob 0): 'a b' p=.4, 'a c' p=.3, 'd c' p=.3. MAP: 'a b'; word-level
    MBR: position 1 'a' (.7), position 2 'c' (.6) -> 'a c'."""
    words = ["<eps>", "a", "b", "c", "d"]
    arcs = [(0, 1, 0, 1, math.log(0.4)), (1, 4, 0, 2, 0.0),
            (0, 2, 0, 1, math.log(0.3)), (2, 4, 0, 3, 0.0),
            (0, 3, 0, 4, math.log(0.3)), (3, 4, 0, 3, 0.0),
            (4, 5, FINAL, 0, 0.0)]
    s, d, il, ol, w = zip(*arcs)
    return WfstGraph.from_arcs(list(s), list(d), list(il), list(ol), list(w), num_states=6, start_state=0,
                               final_state=5, num_tokens=1, words=words)


def test_mbr_differs_from_map_as_kaldi_defines():
    g = _three_path_graph()
    dec = WfstDecoder(g, WfstDecoderConfig(search_beam=50.0, output_beam=50.0))
    lp = torch.zeros(1, 2, 1)
    lats = dec.decode_lattice(lp, torch.tensor([2]))
    assert dec.decode(lp, torch.tensor([2])).word_strings[0] == ["a", "b"]
    assert [h.words for h in lats.nbest(3)[0]] == [["a", "b"], ["a", "c"], ["d", "c"]]
    h = lats.mbr()[0]
    assert h.words == ["a", "c"]
    assert h.word_confidences == pytest.approx([0.7, 0.6], abs=1e-5)
    assert h.score == pytest.approx(0.0, abs=1e-6)  # total probability 1
    assert h.word_start_frames[0] < h.word_start_frames[1] and h.word_end_frames[1] <= 2.0 + 1e-6
    post = {(w, f): p for w, f, p in lats.word_posteriors(0)}
    assert post[("a", 0)] == pytest.approx(0.7, abs=1e-6) and post[("c", 1)] == pytest.approx(0.6, abs=1e-6)


def test_phase_timer_lines_only_when_asked(monkeypatch, capfd):
    """BEAMDEC_LATTICE_TIMING=1 prints one 'lattice-phase <op> <phase> <ms> ms <faults>' line per phase of the
    Python side (decode_lattice, best, mbr); unset, nothing; the results are the same either way."""
    import re

    g = _three_path_graph()
    dec = WfstDecoder(g, WfstDecoderConfig(search_beam=50.0, output_beam=50.0))
    lp, ln = torch.zeros(1, 2, 1), torch.tensor([2])

    def run():
        lats = dec.decode_lattice(lp, ln)
        return [h.words for h in lats.best()], [h.words for h in lats.mbr()]

    monkeypatch.delenv("BEAMDEC_LATTICE_TIMING", raising=False)
    quiet = run()
    assert "lattice-phase" not in capfd.readouterr().err
    monkeypatch.setenv("BEAMDEC_LATTICE_TIMING", "1")
    assert run() == quiet == ([["a", "b"]], [["a", "c"]])
    lines = [l for l in capfd.readouterr().err.splitlines() if l.startswith("lattice-phase")]
    phases = [l.split(" ", 2)[1] for l in lines]
    assert phases.count("decode_lattice") == 2 and phases.count("best") == 2 and phases.count("mbr") == 2
    assert all(re.fullmatch(r"lattice-phase \S+ .+ \d+\.\d{3} ms -?\d+( cuda \d+ peak \d+)?", l) for l in lines), lines


def test_lattice_walk_knob_is_checked(monkeypatch):
    """BEAMDEC_LATTICE_WALK (the CUDA kernels' arc walk) accepts auto / token / warp / adaptive, BEAMDEC_LATTICE_MAP
    (their state map) dense / hash, BEAMDEC_LATTICE_PERSISTENT and BEAMDEC_LATTICE_OVERLAP 0 / 1,
    BEAMDEC_LATTICE_GROUP host / device; anything else is a one-line error."""
    g = _three_path_graph()
    dec = WfstDecoder(g, WfstDecoderConfig(search_beam=50.0, output_beam=50.0))
    knobs = [("BEAMDEC_LATTICE_WALK", ("auto", "token", "warp", "adaptive"), "Warp",
              "'auto', 'token', 'warp' or 'adaptive'"),
             ("BEAMDEC_LATTICE_MAP", ("dense", "hash"), "hashed", "'dense' or 'hash'"),
             ("BEAMDEC_LATTICE_PERSISTENT", ("0", "1"), "yes", "'0' or '1'"),
             ("BEAMDEC_LATTICE_OVERLAP", ("0", "1"), "on", "'0' or '1'"),
             ("BEAMDEC_LATTICE_GROUP", ("host", "device"), "gpu", "'host' or 'device'")]
    for name, good, bad, allowed in knobs:
        for ok in good:
            monkeypatch.setenv(name, ok)
            assert dec.decode_lattice(torch.zeros(1, 2, 1), torch.tensor([2])).nbest(1)[0][0].words == ["a", "b"]
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValueError, match=f"{name} must be {allowed}"):
            dec.decode_lattice(torch.zeros(1, 2, 1), torch.tensor([2]))
        monkeypatch.delenv(name)


def test_mbr_of_a_single_path_lattice_is_that_path_with_confidence_one():
    rng = np.random.default_rng(5)
    g = acyclic_eps_graph(rng, num_states=6, finals="all")
    lp = random_log_probs(rng, 2, 4, g.num_tokens, peaky=6.0)
    lengths = torch.tensor([4, 3])
    dec = WfstDecoder(g, WfstDecoderConfig(output_beam=1e-6))  # keeps the best path only (no exact ties here)
    lats = dec.decode_lattice(lp, lengths)
    ref = dec.decode(lp, lengths)
    for b, h in enumerate(lats.mbr()):
        assert h.words == ref.word_strings[b]
        assert h.word_confidences == pytest.approx([1.0] * len(h.words), abs=1e-5)
        assert h.score == pytest.approx(float(ref.scores[b]), abs=1e-4)


def test_word_times_of_a_ctc_path():
    """Token 1 = 'x' (its word on the first token arc), blank 0 loops: frames b x x b y b -> x at [1, 3),
    y at [4, 5)."""
    words = ["<eps>", "x", "y"]
    # 0 -blank-> 0; 0 -x:x-> 1; 1 -x-> 1; 1 -blank-> 2; 2 -blank-> 2; 2 -y:y-> 3; 3 -blank-> 3; 3 final
    arcs = [(0, 0, 0, 0, 0.0), (0, 1, 1, 1, 0.0), (1, 1, 1, 0, 0.0), (1, 2, 0, 0, 0.0), (2, 2, 0, 0, 0.0),
            (2, 3, 2, 2, 0.0), (3, 3, 0, 0, 0.0), (3, 4, FINAL, 0, 0.0)]
    s, d, il, ol, w = zip(*arcs)
    g = WfstGraph.from_arcs(list(s), list(d), list(il), list(ol), list(w), num_states=5, start_state=0,
                            final_state=4, num_tokens=3, words=words, info={"blank_id": 0})
    seq = [0, 1, 1, 0, 2, 0]
    lp = torch.full((1, 6, 3), -20.0)
    for t, k in enumerate(seq):
        lp[0, t, k] = 0.0
    lats = WfstDecoder(g, WfstDecoderConfig(output_beam=2.0)).decode_lattice(lp, torch.tensor([6]))
    h = lats.best()[0]
    assert h.words == ["x", "y"]
    assert h.word_start_frames == [1.0, 4.0] and h.word_end_frames == [3.0, 5.0]
    assert list(h.tokens) == [1, 2] and list(h.timesteps) == [1, 4]


def test_boosted_and_fp16_lattices_follow_decode():
    rng = np.random.default_rng(7)
    g = acyclic_eps_graph(rng, num_states=7, finals="all")
    lp = random_log_probs(rng, 2, 5, g.num_tokens)
    lengths = torch.tensor([5, 4])
    dec = WfstDecoder(g, WfstDecoderConfig(output_beam=3.0))
    boosts = [{"w1": 3.0, "w3": -2.0}, {"w2": 5.0}]
    for x in (lp, lp.half()):
        ref = dec.decode(x, lengths, boosts=boosts)
        lats = dec.decode_lattice(x, lengths, boosts=boosts)
        assert lats.scores.double().tolist() == ref.scores.tolist()
        assert [h.words for h in lats.best()] == ref.word_strings


def test_bad_input_and_empty_lattices():
    rng = np.random.default_rng(8)
    g = random_graph(rng, num_states=6, num_tokens=3, finals="none")
    lp = random_log_probs(rng, 2, 3, 3)
    with pytest.raises(ValueError, match="output_beam"):
        WfstDecoderConfig(output_beam=float("nan"))
    with pytest.raises(ValueError, match="output_beam"):
        WfstDecoderConfig(output_beam=0.0)
    dec = WfstDecoder(g, WfstDecoderConfig(allow_partial=False))
    dec.config.output_beam = float("nan")  # a config mutated after construction is still refused
    with pytest.raises(ValueError, match="output_beam"):
        dec.decode_lattice(lp, torch.tensor([3, 2]))
    dec.config.output_beam = 8.0
    lats = dec.decode_lattice(lp, torch.tensor([3, 2]))  # no final state reachable, no allow_partial
    assert lats.has_path == [False, False] and lats.num_arcs(0) == 0 and lats.num_states(1) == 0
    assert lats.nbest(2) == [[], []]
    assert [h.words for h in lats.mbr()] == [[], []] and all(h.score == -math.inf for h in lats.mbr())
    assert lats.to_k2_dict(0)["arcs"].shape == (0, 4) and lats.word_posteriors(1) == []
    with pytest.raises(ValueError, match="k must be >= 1"):
        lats.nbest(0)
    with pytest.raises(TypeError):
        lats.nbest(1.5)
    with pytest.raises(IndexError):
        lats.to_k2_dict(2)
    with pytest.raises(ValueError, match="log_probs"):
        dec.decode_lattice(lp[:, :, :2], torch.tensor([3, 2]))
    cyclic = random_graph(np.random.default_rng(3), num_states=10, epsilon=True)
    from decoders.lattice import epsilon_levels
    from decoders.wfst import epsilon_depth
    if epsilon_depth(cyclic) < 0:
        with pytest.raises(ValueError, match="acyclic"):
            WfstDecoder(cyclic).decode_lattice(random_log_probs(rng, 1, 2, cyclic.num_tokens), torch.tensor([2]))
    empty = dec.decode_lattice(lp[:0], torch.zeros(0, dtype=torch.int64))
    assert len(empty) == 0 and empty.nbest(3) == [] and empty.mbr() == []


def test_k2_dict_and_openfst_export(tmp_path):
    kaldifst = pytest.importorskip("kaldifst")
    rng = np.random.default_rng(9)
    g = acyclic_eps_graph(rng, num_states=7, finals="all")
    lp = random_log_probs(rng, 1, 5, g.num_tokens)
    lats = WfstDecoder(g, WfstDecoderConfig(output_beam=4.0)).decode_lattice(lp, torch.tensor([5]))
    d = lats.to_k2_dict(0)
    arcs = d["arcs"].numpy()
    A, S = lats.num_arcs(0), lats.num_states(0)
    assert arcs.shape == (A, 4) and d["aux_labels"].shape == (A,) and d["scores"].shape == (A,)
    assert np.array_equal(arcs[:, 3].view(np.float32), d["scores"].numpy())
    into_final = arcs[:, 1] == S - 1
    assert np.all(arcs[into_final, 2] == -1) and np.all(arcs[~into_final, 2] >= 0)
    assert not np.any(arcs[:, 0] == S - 1)  # k2: the final state is last and has no arcs
    path = tmp_path / "lat.fst"
    lats.to_openfst(0, path, words_path=tmp_path / "words.txt")
    fst = kaldifst.StdVectorFst.read(str(path))
    assert fst.num_states == S and sum(1 for _ in kaldifst.ArcIterator(fst, 0)) == int(np.sum(arcs[:, 0] == 0))
    best = kaldifst.shortest_path(fst, n=1)
    cost = 0.0
    for state in kaldifst.StateIterator(best):  # a linear FST: sum its arc costs
        for arc in kaldifst.ArcIterator(best, state):
            cost += float(arc.weight.value)
    assert -cost == pytest.approx(float(lats.scores[0]), abs=1e-4)


def test_harness_output_modes_and_hyps_record(tmp_path):
    """eval/adapters/wfst.py `output`: nbest / mbr / lattice_rescore hypotheses equal the lattice API's, and
    hyps.jsonl carries word times, confidences and the n-best list (eval.runner.hypothesis_extra)."""
    import json
    from types import SimpleNamespace

    from eval.adapters.base import DecodingContext
    from eval.adapters.wfst import WfstAdapter
    from eval.rescore import NgramLM, lattice_rescore
    from eval.results import hypothesis_record
    from eval.runner import hypothesis_extra
    from test_wfst_lattice_rescore import write_arpa4

    rng = np.random.default_rng(15)
    g = acyclic_eps_graph(rng, num_states=7, finals="all")
    g.save(tmp_path / "TLG.bin")
    write_arpa4(tmp_path / "lm.arpa", g.words[1:], rng)
    ctx = DecodingContext(tokens=SimpleNamespace(blank_id=0, vocab_size=g.num_tokens), graph_dir=tmp_path,
                          arpa_path=tmp_path / "lm.arpa")
    lp = random_log_probs(rng, 2, 5, g.num_tokens)
    lengths = torch.tensor([5, 4])
    base = {"graph": "TLG", "acoustic_scale": 1.0, "output_beam": 6.0}
    lats = WfstDecoder(g, WfstDecoderConfig(search_beam=17.0, output_beam=6.0, blank_id=0)).decode_lattice(lp, lengths)
    nb = WfstAdapter({**base, "output": "nbest", "nbest_size": 3}, ctx).decode(lp, lengths)
    want = lats.nbest(3)
    assert [[x.words for x in h.nbest] for h in nb] == [[x.words for x in w] for w in want]
    assert [h.words for h in nb] == [w[0].words for w in want]
    mbr = WfstAdapter({**base, "output": "mbr"}, ctx).decode(lp, lengths)
    assert [h.words for h in mbr] == [h.words for h in lats.mbr()]
    rs = WfstAdapter({**base, "output": "lattice_rescore", "rescore_lm_scale": 0.5}, ctx).decode(lp, lengths)
    assert [h.score for h in rs] == pytest.approx([h.score for h in lattice_rescore(lats, NgramLM(ctx.arpa_path), 0.5)])
    rec = json.loads(hypothesis_record(decoder="wfst", dataset="d", utterance_id="u", ref="r", hyp="h",
                                       score=nb[0].score, tokens=nb[0].tokens, extra=hypothesis_extra(nb[0])))
    assert rec["hyp"] == "h" and len(rec["nbest"]) == len(nb[0].nbest)
    assert rec["word_start_frames"] == list(nb[0].word_start_frames)
    assert rec["nbest"][0]["hyp"] == " ".join(nb[0].words)
    rec = json.loads(hypothesis_record(decoder="wfst", dataset="d", utterance_id="u", ref="r", hyp="h",
                                       score=mbr[0].score, tokens=[], extra=hypothesis_extra(mbr[0])))
    assert rec["word_confidences"] == pytest.approx(list(mbr[0].word_confidences))
    with pytest.raises(ValueError, match="output"):
        WfstAdapter({**base, "output": "sausage"}, ctx)


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc not installed")
def test_cuda_lattice_launcher_compiles_with_nvcc(tmp_path):
    """Compile-check of the torch-free lattice launcher + kernels (nothing runs without a GPU; the GPU == CPU
    tests are tests/test_wfst_lattice_gpu.py)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    cmd = ["nvcc", "-std=c++17", "-arch=sm_90", "-c", str(root / "decoders/csrc/wfst_lattice_launch.cu"), "-I",
           str(root / "decoders/include"), "-o", str(tmp_path / "wfst_lattice_launch.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_demo_lattice_opens_in_kaldifst_and_as_k2_dict(tmp_path, demo_bpe_compact_dir):
    """A lattice of the demo's TLG (embedded workload, BPE, compact topology; built by `make demo`) on a simulated
    test-other utterance: written as OpenFst and read back by kaldifst (same states, arcs and best cost), loaded
    as a k2-layout dict, and its MBR / n-best outputs are well formed."""
    kaldifst = pytest.importorskip("kaldifst")
    gdir = demo_bpe_compact_dir
    from eval.bench.common import workload_set

    data = workload_set("tiny", "bpe", "other", 4)
    g = WfstGraph.load(gdir / "TLG.bin")
    dec = WfstDecoder(g, WfstDecoderConfig(search_beam=17.0, output_beam=8.0, acoustic_scale=3.0,
                                           blank_id=data.blank_id))
    lats = dec.decode_lattice(data.log_probs, data.lengths)
    ref = dec.decode(data.log_probs, data.lengths)
    assert [h.words for h in lats.best()] == ref.word_strings
    i = 0
    d = lats.to_k2_dict(i)
    S, A = lats.num_states(i), lats.num_arcs(i)
    assert d["arcs"].shape == (A, 4) and d["arcs"].dtype == torch.int32 and int(d["arcs"][:, 1].max()) == S - 1
    assert set(d["aux_labels"].tolist()) - {-1, 0} <= set(range(1, g.num_words))
    path = tmp_path / "lat.fst"
    lats.to_openfst(i, path, words_path=tmp_path / "words.txt")
    fst = kaldifst.StdVectorFst.read(str(path))
    assert fst.num_states == S
    assert sum(sum(1 for _ in kaldifst.ArcIterator(fst, s)) for s in range(S)) == A
    best = kaldifst.shortest_path(fst, n=1)
    cost = sum(float(arc.weight.value) for s in kaldifst.StateIterator(best) for arc in kaldifst.ArcIterator(best, s))
    assert -cost == pytest.approx(float(lats.scores[i]), abs=1e-3)
    h = lats.mbr()[i]
    assert len(h.words) == len(h.word_confidences) == len(h.word_start_frames)
    assert all(0.0 <= c <= 1.0 + 1e-6 for c in h.word_confidences)
    nb = lats.nbest(5)[i]
    assert nb[0].words == ref.word_strings[i] and all(a.score >= b.score for a, b in zip(nb, nb[1:]))


def _with_multiword_arcs(rng, g):
    """`g` with 1-3 words on each arc that outputs one (aux CSR), so words of one arc share their times."""
    from dataclasses import replace

    counts = np.where(np.asarray(g.olabel) != 0, rng.integers(1, 4, size=g.num_arcs), 0)
    splits = np.zeros(g.num_arcs + 1, dtype=np.int32)
    np.cumsum(counts, out=splits[1:])
    words = rng.integers(1, max(g.num_words, 2), size=int(splits[-1])).astype(np.int32)
    return replace(g, aux_splits=splits, aux_words=words)


def _path_test_graph(rng, shape, multiword, *, max_states, max_tokens, num_words):
    """A random graph for the path-rule tests: "TLG" an acyclic-epsilon graph with `num_words` words and some finals,
    "HLG" an epsilon-free one; `multiword`: several words on its word arcs."""
    if shape == "TLG":
        g = acyclic_eps_graph(rng, num_states=int(rng.integers(3, max_states)),
                              num_tokens=int(rng.integers(2, max_tokens)), num_words=num_words, finals="some")
    else:
        g = random_graph(rng, num_states=int(rng.integers(2, max_states)), num_tokens=int(rng.integers(2, max_tokens)))
    return _with_multiword_arcs(rng, g) if multiword else g


@pytest.mark.parametrize("shape", ["HLG", "TLG"])
@pytest.mark.parametrize("multiword", [False, True])
def test_batched_best_equals_the_python_path_rules(shape, multiword):
    """WfstLattices.best() (one C++ pass over the batch) equals best_path + _path_hypothesis per utterance (the Python
    rules, also behind nbest): tokens, frames, words and their start/end frames, with and without a blank id."""
    rng = np.random.default_rng(77 + len(shape) + 3 * multiword)
    for gi in range(6):
        g = _path_test_graph(rng, shape, multiword, max_states=60, max_tokens=12, num_words=15)
        lp = random_log_probs(rng, 6, 30, g.num_tokens)
        lengths = torch.tensor([30, 0, 1, 17, 30, 5])
        for blank in (None, 0, g.num_tokens - 1):
            cfg = WfstDecoderConfig(search_beam=12.0, output_beam=5.0, blank_id=blank)
            lats = WfstDecoder(g, cfg, "cpu").decode_lattice(lp, lengths)
            fast = lats.best()
            for i in range(len(lats)):
                if lats.num_states(i) == 0:
                    assert fast[i].words == [] and fast[i].score == -math.inf
                    continue
                ref = lats._path_hypothesis(lats._utt(i), lats.best_path(i), float(lats.scores[i]))
                assert fast[i] == ref, (gi, blank, i)
                assert len(fast[i].word_end_frames) == len(fast[i].words)


def test_lattice_arena_settings_and_capacities():
    """lattice_tokens_per_step / lattice_arcs_per_step: integers >= 1 or None (one-line errors otherwise); the
    arenas are the decoded steps times the per-step sizes, at most the frontier / candidates per step, scaled by
    the rescue factor only when no per-step size is given."""
    from decoders.lattice import lattice_capacities

    for bad in (0, -3, 2.5, True, "8"):
        with pytest.raises(ValueError, match="lattice_arcs_per_step must be an integer >= 1 or None"):
            WfstDecoderConfig(lattice_arcs_per_step=bad)
    with pytest.raises(ValueError, match="lattice_tokens_per_step"):
        WfstDecoderConfig(lattice_tokens_per_step=0)
    cfg = WfstDecoderConfig(max_active=1000)  # frontier 4096, candidates 8192
    c = lattice_capacities(cfg, 2, 50, 100)
    assert (c["token_capacity"], c["arc_capacity"]) == (100 * 1024, 100 * 2048)
    c8 = lattice_capacities(cfg, 2, 50, 100, factor=8)
    assert (c8["token_capacity"], c8["arc_capacity"]) == (100 * 8192, 100 * 16384)  # 1024 / 2048 x 8
    c = lattice_capacities(WfstDecoderConfig(max_active=1000, lattice_tokens_per_step=7, lattice_arcs_per_step=9),
                           2, 50, 100)
    assert (c["token_capacity"], c["arc_capacity"]) == (700, 900)
    c = lattice_capacities(cfg, 2, 50, 100, factor=1, per_step=(5000, 3000))
    assert (c["token_capacity"], c["arc_capacity"]) == (100 * 4096, 100 * 3000)  # tokens capped by the frontier
    lats = WfstDecoder(_three_path_graph(), WfstDecoderConfig(search_beam=50.0, output_beam=50.0)).decode_lattice(
        torch.zeros(1, 2, 1), torch.tensor([2]))
    assert lats.rescued == [] and lats.overflow == [0]  # the CPU reference has no capacities to rescue


def test_rescue_plan_grows_what_overflowed():
    """The lattice rescue's plan (decoders/lattice.py rescue_plan): a search overflow (frontier 8, candidates 1,
    hash 2, epsilon 16, with or without the arena bit) scales the search capacities and the arenas by the rescue
    factor and doubles the epsilon passes; an arena overflow alone keeps the search capacities and sizes the arenas
    from the densest measured utterance (x1.25, at least doubled; x the factor when none measured denser than the
    arenas were); utterances
    with the same new settings form one group; nothing flagged, no group. batch_arena_mean (what a decoder records
    for its next batches): the steps-weighted mean over the measured utterances."""
    from decoders.lattice import arena_use, rescue_plan

    steps = torch.tensor([11, 21, 5, 9, 3])
    # header: [overflow, flags, arcs before the prune, tokens before]
    header = torch.tensor([[0, 3, 440, 110], [4, 3, 50, 20], [8, 3, 10, 5], [4 | 8, 3, 7, 7], [0, 3, 3000, 300]])
    use = arena_use(header, steps)
    assert use[0][0] == 10.0 and use[1][0] == 40.0 and use[1][4] == 1000.0 and use[0][4] == 100.0
    assert math.isnan(use[0][1]) and math.isnan(use[1][3]) and use[1][2] == 2.0
    lanes = [(1, (1024, 2048), 8)] * 5
    groups = rescue_plan([int(x) for x in header[:, 0]], use, lanes, 8)
    assert lanes[0] == lanes[4] == (1, (1024, 2048), 8)  # not flagged: unchanged
    assert lanes[1] == (1, (8192, 16384), 8)  # arena only: none measured denser than 1024 / 2048 -> x8, same search
    assert lanes[2] == lanes[3] == (8, (8192, 16384), 16)
    assert groups == {(1, (8192, 16384), 8): [1], (8, (8192, 16384), 16): [2, 3]}
    lanes = [(1, (4, 6), 8)] * 5
    rescue_plan([0, 4, 0, 0, 0], use, lanes, 8)
    assert lanes[1] == (1, (125, 1250), 8)  # ceil(1.25 x 100), ceil(1.25 x 1000)
    lanes = [(1, (100, 900), 8)] * 5
    rescue_plan([0, 4, 0, 0, 0], use, lanes, 8)
    assert lanes[1] == (1, (800, 1800), 8)  # tokens: nothing measured denser than 100 -> x8; arcs: 1,000 > 900
    from decoders.lattice import batch_arena_mean

    assert batch_arena_mean(use, steps.tolist()) == pytest.approx(((110 + 5 + 300) / 19, (440 + 10 + 3000) / 19))  # 0, 2, 4
    assert batch_arena_mean(([math.nan], [math.nan]), [5]) is None
    nothing = ([math.nan] * 2, [math.nan] * 2)
    lanes = [(1, (4, 6), 8)] * 2
    assert rescue_plan([4, 4], nothing, lanes, 8) == {(1, (32, 48), 8): [0, 1]}
    assert rescue_plan([0, 0], use, lanes, 8) == {}


def test_take_splices_utterances_from_several_batches():
    """_take (the rescue's splice) equals taking each utterance's rows one by one, for pieces from three sources in
    any order, repeated utterances, empty utterances and a single source."""
    from decoders.lattice import WfstLattices, _take

    def synth(B, seed):
        g = np.random.default_rng(seed)
        na, ns = g.integers(0, 6, B), g.integers(0, 5, B)
        asp = torch.tensor(np.concatenate([[0], np.cumsum(na)]), dtype=torch.int64)
        ssp = torch.tensor(np.concatenate([[0], np.cumsum(ns)]), dtype=torch.int64)
        A, S = int(asp[-1]), int(ssp[-1])
        return WfstLattices(None, torch.randn(B), torch.randint(0, 9, (B, 4)), ssp,
                            torch.randint(0, 99, (S, 2), dtype=torch.int32), torch.randn(S, 2), asp,
                            torch.randint(0, 99, (A, 3), dtype=torch.int32), torch.randn(A), None,
                            [[f"w{seed}_{b}"] for b in range(B)])

    srcs = [synth(9, 1), synth(4, 2), synth(3, 3)]
    rng = np.random.default_rng(0)
    for trial in range(30):
        n = int(rng.integers(1, 12))
        pieces = [(srcs[int(k)], int(rng.integers(0, len(srcs[int(k)])))) for k in rng.integers(0, 3 if trial else 1, n)]
        got = _take(srcs[0], pieces)
        assert torch.equal(got.scores, torch.stack([l.scores[j] for l, j in pieces]))
        assert torch.equal(got.header, torch.stack([l.header[j] for l, j in pieces]))
        for split, names in (("state_splits", ("states", "state_scores")), ("arc_splits", ("arcs", "arc_scores"))):
            want_counts = [int(getattr(l, split)[j + 1] - getattr(l, split)[j]) for l, j in pieces]
            assert getattr(got, split).tolist() == np.concatenate([[0], np.cumsum(want_counts)]).tolist()
            for name in names:
                want = torch.cat([getattr(l, name)[int(getattr(l, split)[j]):int(getattr(l, split)[j + 1])]
                                  for l, j in pieces])
                assert torch.equal(getattr(got, name), want), (trial, name)
        assert got.oov_boost_words == [l.oov_boost_words[j] for l, j in pieces]


def test_group_by_lane_is_a_stable_counting_sort():
    """wfst_lattice_group_by_lane (the CUDA lattice op's grouping of kept tokens and arcs by utterance with
    BEAMDEC_LATTICE_GROUP=device; the same torch ops on any device): the tokens by lane in their kept order, each
    token's rank within its lane, the arcs by their source's lane in kept order, and the lanes' begin offsets; empty
    lanes, no tokens, no arcs; bad lanes or sources are one-line errors."""
    from decoders.wfst import _ops

    op = _ops().wfst_lattice_group_by_lane
    rng = np.random.default_rng(3)
    for K, M, B in ((0, 0, 3), (1, 0, 1), (7, 12, 4), (500, 1300, 37), (64, 0, 200)):
        lane = rng.integers(0, B, K).astype(np.int32)
        src = rng.integers(0, max(K, 1), M) if K else np.zeros(0, dtype=np.int64)
        tok_order, tok_begin, local, arc_order, arc_begin = op(torch.from_numpy(lane), torch.from_numpy(src), B)
        want_order = np.argsort(lane, kind="stable")
        assert tok_order.tolist() == want_order.tolist()
        assert tok_begin.tolist() == [0] + np.cumsum(np.bincount(lane, minlength=B)).tolist()
        for p in range(K):
            assert local[p] == sum(1 for q in range(p) if lane[q] == lane[p])
        arc_lane = lane[src] if M else np.zeros(0, dtype=np.int32)
        assert arc_order.tolist() == np.argsort(arc_lane, kind="stable").tolist()
        assert arc_begin.tolist() == [0] + np.cumsum(np.bincount(arc_lane, minlength=B)).tolist()
    with pytest.raises(RuntimeError, match="lanes must be in"):
        op(torch.tensor([0, 3], dtype=torch.int32), torch.zeros(0, dtype=torch.int64), 3)
    with pytest.raises(RuntimeError, match="arc sources must be in"):
        op(torch.tensor([0, 1], dtype=torch.int32), torch.tensor([2]), 3)


def _gathered_from(lats, levels, rng, device_group):
    """The CUDA lattice op's gathered half (wfst_lattice_ops.h LatticeGathered) holding the kept states and arcs of
    `lats` (CPU lattices) in a random arena order: tokens by arena id with random gaps, arcs shuffled, epsilon arcs
    carrying the arena's epsilon bit; with `device_group` the grouping as the device computes it."""
    from decoders.wfst import _ops

    B = lats.scores.shape[0]
    S = int(lats.state_splits[-1])
    ids = np.sort(rng.choice(10 * S + 10, size=S, replace=False))  # arena ids, ascending with gaps
    perm = rng.permutation(S)  # which lattice state sits at each arena position
    state_lane = np.repeat(np.arange(B), np.diff(lats.state_splits.numpy()))
    pos_of_state = np.empty(S, dtype=np.int64)
    pos_of_state[perm] = np.arange(S)
    st, sc = lats.states.numpy(), lats.state_scores.numpy()
    fwd_bits = sc[:, 0].astype(np.float32).view(np.int32)
    u = sc[:, 1].astype(np.float32).view(np.uint32)
    bwd_ord = np.where(u & 0x80000000, ~u, u | 0x80000000).astype(np.uint32).view(np.int32)  # float_to_ordered
    tok = np.stack([ids, state_lane[perm], st[perm, 0], st[perm, 1], levels[st[perm, 1]], fwd_bits[perm],
                    bwd_ord[perm]], 1).astype(np.int32)
    arc_lane = np.repeat(np.arange(B), np.diff(lats.arc_splits.numpy()))
    base = lats.state_splits.numpy()[arc_lane]
    ar = lats.arcs.numpy()
    src, dst = ar[:, 0] + base, ar[:, 1] + base
    eps = (st[src, 0] == st[dst, 0]).astype(np.int64) << 30  # kLatticeEpsArcBit: same frame
    order = rng.permutation(len(ar))
    arc = np.stack([ids[pos_of_state[src]], ids[pos_of_state[dst]], ar[:, 2] | eps,
                    lats.arc_scores.numpy().astype(np.float32).view(np.int32)], 1)[order].astype(np.int32)
    pos = np.stack([pos_of_state[src], pos_of_state[dst]], 1)[order].astype(np.int32)
    h = lats.header.numpy()
    has = (h[:, 1] & 2) != 0
    lanes = np.stack([np.where(has, 0, -1), h[:, 3], h[:, 2], lats.scores.numpy().astype(np.float32).view(np.int32)],
                     1).astype(np.int32)
    flags = np.stack([h[:, 0], (h[:, 1] & 1) == 0], 1).astype(np.int32)
    t = [torch.from_numpy(np.ascontiguousarray(x)) for x in (tok, arc, pos, lanes, flags)]
    if device_group:
        groups = list(_ops().wfst_lattice_group_by_lane(t[0][:, 1], t[2][:, 0].to(torch.int64), B))
    else:
        groups = [torch.zeros(0, dtype=torch.int64)] * 5
    return t + groups


@pytest.mark.parametrize("device_group", [False, True])
def test_assemble_rebuilds_the_canonical_lattices_from_any_arena_order(device_group):
    """wfst_lattice_assemble (the host half of the CUDA lattice op, run beside the rescue's GPU pass by
    decode_lattice) turns kept tokens and arcs in any arena order, grouped on the host or on the device, into the
    CPU reference's lattices bit for bit: TLG and HLG graphs, empty and no-path utterances."""
    from decoders.lattice import epsilon_levels
    from decoders.wfst import _ops

    rng = np.random.default_rng(21)
    for case in range(12):
        g = small_graph(rng, "TLG" if case % 2 else "HLG")
        T = int(rng.integers(1, 6))
        lp = random_log_probs(rng, 4, T, g.num_tokens)
        lengths = torch.tensor([T, int(rng.integers(0, T + 1)), 0, T])
        dec = WfstDecoder(g, WfstDecoderConfig(search_beam=NO_PRUNE, output_beam=float(rng.uniform(0.5, 5.0)),
                                               allow_partial=bool(case % 3)))
        want = dec.decode_lattice(lp, lengths)
        got = _ops().wfst_lattice_assemble(*_gathered_from(want, epsilon_levels(g), rng, device_group))
        names = ("scores", "header", "state_splits", "states", "state_scores", "arc_splits", "arcs", "arc_scores")
        for name, t in zip(names, got):
            assert torch.equal(t, getattr(want, name)), (case, name)


def test_assemble_rejects_bad_input_with_one_line_errors():
    """wfst_lattice_assemble checks what it indexes with: shapes and dtypes, lanes outside the batch, arc ends that
    are not kept tokens, device groups that disagree with the tokens."""
    from decoders.lattice import epsilon_levels
    from decoders.wfst import _ops

    rng = np.random.default_rng(5)
    g = small_graph(rng, "TLG")
    lats = WfstDecoder(g, WfstDecoderConfig(search_beam=NO_PRUNE, output_beam=4.0)).decode_lattice(
        random_log_probs(rng, 2, 3, g.num_tokens), torch.tensor([3, 3]))
    assert lats.num_arcs(0) > 0
    op = _ops().wfst_lattice_assemble

    def fails(args, match):
        with pytest.raises(RuntimeError, match=match) as e:
            op(*args)
        assert len(str(e.value).strip().splitlines()) == 1

    for device_group in (False, True):
        good = _gathered_from(lats, epsilon_levels(g), rng, device_group)
        op(*good)
        fails([good[0].to(torch.int64)] + good[1:], "tokens must be a contiguous CPU int32 tensor")
        fails(good[:1] + [good[1][:, :3].contiguous()] + good[2:], r"arcs must be .* shape \(n, 4\)")
        fails(good[:4] + [good[4][:1]] + good[5:], "disagree in size")
        bad = [t.clone() for t in good]
        bad[2][0, 1] = int(bad[0].shape[0])  # an arc end past the kept tokens
        fails(bad, "a kept arc ends in an unkept token")
        bad = [t.clone() for t in good]
        bad[2][0, 0] = (int(bad[2][0, 0]) + 1) % int(bad[0].shape[0])  # a position whose arena id differs
        fails(bad, "a kept arc ends in an unkept token")
        if device_group:
            bad = [t.clone() for t in good]
            bad[6][-1] += 1
            fails(bad, "group bounds must run from 0")
            bad = [t.clone() for t in good]
            bad[5] = bad[5].flip(0).contiguous()  # tokens grouped under the wrong lanes
            fails(bad, "grouped under the wrong lane")
            fails(good[:5] + [good[5]] + [torch.zeros(0, dtype=torch.int64)] * 4,
                  "the device grouping's tensors come all five or none|must be a contiguous CPU int64 tensor")
        else:
            bad = [t.clone() for t in good]
            bad[0][0, 1] = 7  # a lane outside the batch of 2
            fails(bad, "a token's lane is outside the batch")


def _packed_paths(packed, i, compounds, base):
    """Every start-to-final path of utterance i of a packed lattice (the MBR op's layout): {word ids: score}."""
    ss, _, asp, arcs, scores, labels = packed
    s0, s1, a0, a1 = int(ss[i]), int(ss[i + 1]), int(asp[i]), int(asp[i + 1])
    out_arcs: dict = defaultdict(list)
    for k in range(a0, a1):
        out_arcs[int(arcs[k, 0])].append((int(arcs[k, 1]), int(labels[k]), float(scores[k])))
    final, paths = s1 - s0 - 1, {}

    def walk(st, words, score):
        if st == final:
            assert words not in paths, "two paths with one word sequence: not deterministic"
            paths[words] = score
        for t, lab, sc in out_arcs[st]:
            assert t > st
            more = () if lab == 0 else (compounds[lab] if lab >= base else (lab,))
            walk(t, words + tuple(more), score + sc)

    if s1 > s0:
        walk(0, (), 0.0)
    return paths


@pytest.mark.parametrize("shape", ["HLG", "TLG"])
def test_word_determinized_lattice_is_one_path_per_word_sequence_at_its_best_score(shape):
    """WfstLattices.word_determinized (OpenFst's epsilon removal and determinization through kaldifst, what
    mbr(determinize=True) runs MBR on) against brute force: one path per word sequence, scored by that sequence's best
    path; every sequence within output_beam of the best is there (all of them without a beam); states topologically
    numbered, one final state last."""
    rng = np.random.default_rng(41 if shape == "HLG" else 42)
    checked = 0
    for case in range(30):
        g = small_graph(rng, shape)
        T = int(rng.integers(1, 5))
        lp = random_log_probs(rng, 2, T, g.num_tokens, peaky=1.0)
        ob = float(rng.uniform(1.0, 8.0)) if case % 3 else math.inf
        dec = WfstDecoder(g, WfstDecoderConfig(search_beam=NO_PRUNE, output_beam=ob, min_active=0, max_active=10**6))
        lats = dec.decode_lattice(lp, torch.tensor([T, T]))
        label, compounds, base = lats.mbr_arc_labels()
        packed = lats.word_determinized(label)
        paths = all_paths(g, lp[0].numpy(), T)
        got = _packed_paths(packed, 0, compounds, base)
        if not paths:
            assert got == {}
            continue
        best = max(p[0] for p in paths)
        by_words: dict = {}
        for score, _, words in paths:
            by_words[words] = max(by_words.get(words, -math.inf), score)
        # OpenFst determinizes float32 weights by division (residuals) with its default delta 2^-10: scores agree to
        # ~1e-3. Its pruned determinization keeps every path within the threshold and may keep some beyond it (as
        # Kaldi's determinize-pruned may): those must still be real word sequences at their best scores.
        for words, score in by_words.items():
            if score >= best - ob + 5e-3:
                assert words in got, (case, words)
        assert set(got) <= set(by_words)
        for words, score in got.items():
            assert score == pytest.approx(by_words[words], abs=2e-3), (case, words)
        checked += 1
    assert checked >= 20


def test_determinized_mbr_weighs_a_word_sequence_by_its_best_alignment():
    """'a' has two alignments of probability .3 each, 'b' one of .4. Over the lattice (the default) 'a' has
    posterior .6 and wins; over the word-determinized lattice (Kaldi's recipes, Riva) a word sequence counts by its
    best alignment, so 'b' (.4 / .7) wins, with its compact-lattice times; the flag must be a bool."""
    words = ["<eps>", "a", "b"]
    arcs = [(0, 1, 0, 1, math.log(0.3)), (1, 4, 0, 0, 0.0),
            (0, 2, 0, 0, math.log(0.3)), (2, 4, 0, 1, 0.0),
            (0, 3, 0, 2, math.log(0.4)), (3, 4, 0, 0, 0.0),
            (4, 5, FINAL, 0, 0.0)]
    s, d, il, ol, w = zip(*arcs)
    g = WfstGraph.from_arcs(list(s), list(d), list(il), list(ol), list(w), num_states=6, start_state=0,
                            final_state=5, num_tokens=1, words=words)
    lats = WfstDecoder(g, WfstDecoderConfig(search_beam=50.0, output_beam=50.0)).decode_lattice(
        torch.zeros(1, 2, 1), torch.tensor([2]))
    summed, det = lats.mbr(determinize=False)[0], lats.mbr()[0]
    assert lats.mbr(determinize=True)[0] == det  # the default is the determinized form
    assert summed.words == ["a"] and summed.word_confidences == pytest.approx([0.6], abs=1e-5)
    assert summed.score == pytest.approx(0.0, abs=1e-6)
    assert det.words == ["b"] and det.word_confidences == pytest.approx([0.4 / 0.7], abs=1e-5)
    assert det.score == pytest.approx(math.log(0.7), abs=1e-5)
    # 'b' is emitted on frame 0's arc (lattice frame 1), the final state at frame 3: Kaldi's compact-lattice times
    assert det.word_start_frames == pytest.approx([0.0]) and det.word_end_frames == pytest.approx([1.0])
    packed = lats.word_determinized()
    frames = packed[1][:, 0].tolist()
    assert frames[0] == 0 and frames[-1] == 3 and sorted(frames) == frames
    assert lats.mbr(determinize=False)[0] == summed  # each form cached on its own
    with pytest.raises(TypeError, match="determinize must be a bool"):
        lats.mbr(determinize="yes")
    three = WfstDecoder(_three_path_graph(), WfstDecoderConfig(search_beam=50.0, output_beam=50.0)).decode_lattice(
        torch.zeros(1, 2, 1), torch.tensor([2]))
    assert three.mbr(determinize=False)[0].words == three.mbr()[0].words == ["a", "c"]  # one alignment each


@pytest.mark.parametrize("shape", ["HLG", "TLG"])
@pytest.mark.parametrize("multiword", [False, True])
def test_nbest_op_equals_the_python_reference(shape, multiword):
    """nbest / nbest_paths run the C++ op wfst_lattice_nbest; it returns exactly the paths and float64 scores of the
    Python A* it was written from (_nbest_paths_reference), for the whole batch and one utterance at a time: random
    graphs, several words on one arc, ties (peaky=0: flat log-probs), empty lattices, k beyond what a lattice holds."""
    rng = np.random.default_rng(401 + len(shape) + 7 * multiword)
    compared = 0
    for gi in range(6):
        g = _path_test_graph(rng, shape, multiword, max_states=40, max_tokens=8, num_words=9)
        lp = random_log_probs(rng, 5, 12, g.num_tokens, peaky=float(rng.choice([0.0, 1.0, 4.0])))
        lengths = torch.tensor([12, 0, 1, 7, 12])
        lats = WfstDecoder(g, WfstDecoderConfig(search_beam=12.0, output_beam=6.0)).decode_lattice(lp, lengths)
        for k in (1, 4, 50):
            batch = lats._nbest_op(k)
            for i in range(len(lats)):
                ref = lats._nbest_paths_reference(i, k)
                assert batch[i] == ref == lats.nbest_paths(i, k), (gi, k, i)
                compared += len(ref)
            # the hypotheses (wfst_lattice_path_hypotheses) by _path_hypothesis's rules, field for field
            assert lats.nbest(k) == \
                [[lats._path_hypothesis(lats._utt(i), p, s) for p, s in batch[i]] for i in range(len(lats))]
    assert compared > 100  # the lattices held paths: the comparison could fail


def test_nbest_op_rejects_bad_input_with_one_line_errors():
    from decoders.wfst import _ops

    op = _ops().wfst_lattice_nbest
    lats = WfstDecoder(_three_path_graph(), WfstDecoderConfig(search_beam=50.0, output_beam=50.0)).decode_lattice(
        torch.zeros(2, 2, 1), torch.tensor([2, 0]))
    g = lats.graph
    ws, w = (torch.as_tensor(np.asarray(x), dtype=torch.int32) for x in g.aux_csr())  # the graph's word CSR
    args = [lats.state_splits, lats.states, lats.arc_splits, lats.arcs, lats.arc_scores]
    counts, splits, arcs, scores = op(*args, ws, w, 5)
    assert counts[0] == 3 and int(splits[-1]) == len(arcs)  # the three word sequences of the graph
    assert lats._nbest_op(5) == [lats._nbest_paths_reference(i, 5) for i in range(2)]

    def fails(a, ws_, w_, k, match):
        with pytest.raises(RuntimeError, match=match) as e:
            op(*a, ws_, w_, k)
        assert len(str(e.value).strip().splitlines()) == 1

    fails(args, ws, w, 0, "k must be >= 1")
    fails(args, ws.to(torch.int64), w, 3, "aux_splits .* must be contiguous int32")
    fails(args, ws, w.to(torch.int64), 3, "aux_words must be contiguous int32")
    used = int(lats.arcs[:, 2].max())  # a graph arc some lattice arc uses
    fails(args, ws[:used + 1].contiguous(), w, 3, "outside the graph")  # the CSR ends before that arc
    word_arc = next(int(a) for a in lats.arcs[:, 2].tolist() if int(ws[a + 1]) > int(ws[a]))
    fails(args, ws, w[:int(ws[word_arc])].contiguous(), 3, "outside the graph")  # its words cut off
    bad = w.clone()
    bad[int(ws[word_arc])] = -2
    fails(args, ws, bad, 3, "words must be >= 0")
    scores_ = lats.arc_scores.clone()
    scores_[0] = float("nan")
    fails(args[:4] + [scores_], ws, w, 3, "scores must be finite")
    arcs_ = lats.arcs.clone()
    n0 = lats.num_arcs(0)
    arcs_[[0, n0 - 1]] = arcs_[[n0 - 1, 0]]
    fails(args[:3] + [arcs_] + args[4:], ws, w, 3, "sorted by source")
    # the path hypotheses op: paths must name a non-empty utterance and arcs inside it
    hyp = _ops().wfst_lattice_path_hypotheses
    graph_args = [torch.as_tensor(np.asarray(g.ilabel), dtype=torch.int32), ws, w, -1]
    ok = hyp(*args, torch.tensor([0]), torch.tensor([0, 1]), torch.tensor([0], dtype=torch.int32), *graph_args)
    assert len(ok) == 4 and ok[0].tolist() == [0, int(ok[1].shape[0])]
    for pu, ps, pa, match in ((torch.tensor([2]), torch.tensor([0, 1]), torch.tensor([0]), "names no utterance"),
                              (torch.tensor([0]), torch.tensor([0, 1]), torch.tensor([99]), "outside its utterance"),
                              (torch.tensor([0]), torch.tensor([0, 2]), torch.tensor([0]), "end at L")):
        with pytest.raises(RuntimeError, match=match) as e:
            hyp(*args, pu, ps, pa.to(torch.int32), *graph_args)
        assert len(str(e.value).strip().splitlines()) == 1


def test_word_determinize_op_rejects_bad_input_with_one_line_errors():
    """wfst_lattice_word_determinize checks what it walks: label shape and dtype, the beam, arcs sorted by source
    and going forward, negative labels and non-finite scores; an empty batch and empty lattices pass through."""
    from decoders.wfst import _ops

    op = _ops().wfst_lattice_word_determinize
    lats = WfstDecoder(_three_path_graph(), WfstDecoderConfig(search_beam=50.0, output_beam=50.0)).decode_lattice(
        torch.zeros(2, 2, 1), torch.tensor([2, 0]))
    label = lats.mbr_arc_labels()[0]
    args = [lats.state_splits, lats.states, lats.arc_splits, lats.arcs, lats.arc_scores]
    out = op(*args, label, 8.0)
    assert int(out[0][-1]) > 0 and len(out) == 6

    def fails(a, lab, beam, match):
        with pytest.raises(RuntimeError, match=match) as e:
            op(*a, lab, beam)
        assert len(str(e.value).strip().splitlines()) == 1

    fails(args, label.to(torch.int64), 8.0, "labels must be contiguous int32")
    fails(args, label[:-1].contiguous(), 8.0, "labels must be contiguous int32")
    fails(args, label, 0.0, "beam must be > 0")
    fails(args, label, float("nan"), "beam must be > 0")
    bad = label.clone()
    bad[0] = -1
    fails(args, bad, 8.0, "labels must be >= 0")
    arcs = lats.arcs.clone()
    n0 = lats.num_arcs(0)
    arcs[[0, n0 - 1]] = arcs[[n0 - 1, 0]]  # the first utterance's first and last arcs swapped: sources out of order
    assert int(arcs[0, 0]) > int(arcs[1, 0])
    fails(args[:3] + [arcs] + args[4:], label, 8.0, "sorted by source")
    scores = lats.arc_scores.clone()
    scores[0] = float("inf")
    fails(args[:4] + [scores], label, 8.0, "scores finite")
    empty = op(torch.zeros(1, dtype=torch.int64), torch.zeros(0, 2, dtype=torch.int32), torch.zeros(1, dtype=torch.int64),
               torch.zeros(0, 3, dtype=torch.int32), torch.zeros(0), torch.zeros(0, dtype=torch.int32), 8.0)
    assert [t.shape[0] for t in empty] == [1, 0, 1, 0, 0, 0]
