"""Helpers shared by tests/test_wfst_*.py: random graphs with awkward shapes, k2py and exhaustive oracles."""
from __future__ import annotations

import math
import weakref
from typing import Optional

import numpy as np
import torch

from decoders.graph import EPSILON, FINAL, WfstGraph
from decoders.wfst import epsilon_cycle_arcs


def random_graph(
    rng: np.random.Generator,
    *,
    num_states: Optional[int] = None,
    num_tokens: Optional[int] = None,
    num_words: int = 12,
    epsilon: bool = False,
    finals: str = "some",  # "some" | "none" (unreachable finals: allow_partial paths) | "all"
    dead_end_prob: float = 0.15,
    max_emitting: int = 5,
    words_on_epsilon_cycles: bool = True,
) -> WfstGraph:
    """A random graph in our conventions: odd sizes, dead ends, epsilon chains/cycles, optional finals.

    The final state is the last state (k2's convention, so the same graph can be given to k2py).
    Epsilon weights are <= 0 so every epsilon cycle is non-improving and the closure converges.
    words_on_epsilon_cycles=False: the epsilon arcs that lie on an epsilon cycle output no word (the same draws
    otherwise), so a positive word bonus or boost cannot make a cycle gain score (decoders/wfst.py
    check_epsilon_cycles refuses that); tests that boost words on epsilon graphs ask for it.
    """
    n = int(num_states or rng.integers(2, 40))
    v = int(num_tokens or rng.integers(2, 13))
    final = n - 1
    src, dst, il, ol, wt = [], [], [], [], []
    for s in range(n - 1):
        if s != 0 and rng.random() < dead_end_prob:
            continue  # dead end: no out-arcs at all
        for _ in range(int(rng.integers(1, max_emitting + 1))):
            src.append(s)
            dst.append(int(rng.integers(0, n - 1)))
            il.append(int(rng.integers(0, v)))
            ol.append(0 if rng.random() < 0.6 else int(rng.integers(1, num_words)))
            wt.append(float(rng.uniform(-2.0, 0.5)))
        if epsilon and rng.random() < 0.5:
            for _ in range(int(rng.integers(1, 3))):
                src.append(s)
                dst.append(int(rng.integers(0, n - 1)))
                il.append(EPSILON)
                ol.append(0 if rng.random() < 0.7 else int(rng.integers(1, num_words)))
                wt.append(float(-rng.uniform(0.0, 1.5)))
        if finals == "all" or (finals == "some" and rng.random() < 0.4):
            src.append(s)
            dst.append(final)
            il.append(FINAL)
            ol.append(0)
            wt.append(float(rng.uniform(-1.0, 0.0)))
    words = ["<eps>"] + [f"w{i}" for i in range(1, num_words)]
    if not words_on_epsilon_cycles and epsilon:
        ol = np.asarray(ol)
        ol[epsilon_cycle_arcs(src, dst, il, n)] = 0
    return WfstGraph.from_arcs(
        src, dst, il, ol, wt, num_states=n, start_state=0, final_state=final, num_tokens=v, words=words
    )


def with_multiword_arcs(rng: np.random.Generator, graph: WfstGraph, prob: float = 0.4) -> WfstGraph:
    """`graph` with extra words on some arcs (ragged aux labels, as an epsilon-removed HLG has): each arc gets 1-2
    more words with probability `prob` (a word arc keeps its first word, a wordless arc may get words)."""
    splits, vals = graph.aux_csr()
    aux = []
    nw = len(graph.words) if graph.words else 12
    for a in range(graph.num_arcs):
        w = [int(x) for x in vals[splits[a]: splits[a + 1]]]
        if rng.random() < prob:
            w += [int(x) for x in rng.integers(1, nw, size=int(rng.integers(1, 3)))]
        aux.append(w)
    return WfstGraph.from_arcs(graph.src(), graph.dest, graph.ilabel, graph.olabel, graph.weight,
                               num_states=graph.num_states, start_state=graph.start_state,
                               final_state=graph.final_state, num_tokens=graph.num_tokens, words=graph.words,
                               aux=aux)


def random_log_probs(rng: np.random.Generator, batch: int, frames: int, vocab: int, peaky: float = 3.0):
    x = rng.normal(size=(batch, frames, vocab)) * peaky
    return torch.log_softmax(torch.from_numpy(x).float(), dim=-1)


def random_batch(rng: np.random.Generator, batch: int, vocab: int, max_frames: int = 40):
    """Log-probs (batch, T, vocab) with T drawn from [1, max_frames) and lengths drawn from [0, T]: the first
    utterance full length and, from batch 3 up, an empty and a one-frame utterance."""
    T = int(rng.integers(1, max_frames))
    lp = random_log_probs(rng, batch, T, vocab)
    lengths = torch.from_numpy(rng.integers(0, T + 1, size=batch))
    lengths[0] = T
    if batch > 2:
        lengths[1], lengths[2] = 0, 1
    return lp, lengths


# ---- k2py oracle (epsilon-free graphs) -------------------------------------------------------------
def to_k2_text(graph: WfstGraph) -> str:
    lines = []
    rs = graph.row_splits
    for s in range(graph.num_states):
        for a in range(rs[s], rs[s + 1]):
            il = int(graph.ilabel[a])
            assert il != EPSILON, "k2 graphs have no epsilon arcs"
            ol = -1 if il == FINAL else int(graph.olabel[a])
            lines.append(f"{s} {int(graph.dest[a])} {il} {ol} {float(graph.weight[a]):.9g}")
    lines.append(str(graph.final_state))
    return "\n".join(lines)


_k2py_graphs: dict = {}


def k2py_decode(graph: WfstGraph, lp: np.ndarray, search_beam=20.0, output_beam=8.0, min_active=30,
                max_active=10000, allow_partial=True):
    """(words, per-frame labels) of k2's intersect_dense_pruned best path, via k2py."""
    import k2py

    g = _k2py_graphs.get(id(graph))
    if g is None:  # cached beside the graph, not inside it (issue 11: no caches in the graph's __dict__)
        g = _k2py_graphs[id(graph)] = k2py.CreateFsaVecFromStr(to_k2_text(graph), -1, False)
        weakref.finalize(graph, _k2py_graphs.pop, id(graph), None)
    r = k2py._k2.AlignSegments(g, np.ascontiguousarray(lp, dtype=np.float32), search_beam, output_beam, min_active,
                               max_active, True, allow_partial)
    return [int(w) for w in r["token_ids"] if int(w) > 0], list(r["labels"])


def constrained_best(graph: WfstGraph, lp: np.ndarray, labels, allow_partial=True) -> tuple[float, list[int]]:
    """(score, words) of the best path reading exactly `labels` (one ilabel per frame), then a FINAL arc;
    if no state reached has a FINAL arc and allow_partial, then any arc redirected to the final state
    (k2's rule). k2py reports its best path as per-frame labels (its token list collapses repeated words
    and drops the redirected arc's word), so this recovers k2's words and score from those labels."""
    rs, il, dst, wt, ol = graph.row_splits, graph.ilabel, graph.dest, graph.weight, graph.olabel
    cur = {graph.start_state: (np.float32(0.0), ())}
    for t, lab in enumerate(labels):
        nxt: dict = {}
        for s, (sc, ws) in cur.items():
            for a in range(rs[s], rs[s + 1]):
                if il[a] == lab:
                    e = np.float32(sc + np.float32(np.float32(lp[t, lab]) + np.float32(wt[a])))
                    d = int(dst[a])
                    if d not in nxt or e > nxt[d][0]:
                        nxt[d] = (e, ws + ((int(ol[a]),) if ol[a] else ()))
        cur = nxt
    has_final = any(il[a] == FINAL for s in cur for a in range(rs[s], rs[s + 1]))
    best, words = -math.inf, []
    for s, (sc, ws) in cur.items():
        for a in range(rs[s], rs[s + 1]):
            if il[a] == FINAL or (allow_partial and not has_final):
                e = float(np.float32(sc + np.float32(wt[a])))
                if e > best:
                    best, words = e, list(ws) + ([int(ol[a])] if ol[a] else [])
    return best, words


# ---- exhaustive Viterbi (no pruning; handles epsilons) ---------------------------------------------
def viterbi_best(graph: WfstGraph, lp: np.ndarray, length: int, boost: Optional[dict[int, float]] = None) -> float:
    """Exact best path score with FINAL arcs required (-inf if none), epsilon arcs relaxed to convergence."""
    rs, il, dst, wt, ol = graph.row_splits, graph.ilabel, graph.dest, graph.weight, graph.olabel
    boost = boost or {}

    def arc_w(a):
        return float(wt[a]) + boost.get(int(ol[a]), 0.0)

    def closure(cur):
        changed = True
        while changed:
            changed = False
            for s, sc in list(cur.items()):
                for a in range(rs[s], rs[s + 1]):
                    if il[a] == EPSILON:
                        e = sc + arc_w(a)
                        if e > cur.get(int(dst[a]), -math.inf) + 1e-9:
                            cur[int(dst[a])] = e
                            changed = True
        return cur

    cur = closure({graph.start_state: 0.0})
    for t in range(length):
        nxt: dict[int, float] = {}
        for s, sc in cur.items():
            for a in range(rs[s], rs[s + 1]):
                if il[a] >= 0:
                    e = sc + float(lp[t, il[a]]) + arc_w(a)
                    if e > nxt.get(int(dst[a]), -math.inf):
                        nxt[int(dst[a])] = e
        cur = closure(nxt)
    best = -math.inf
    for s, sc in cur.items():
        for a in range(rs[s], rs[s + 1]):
            if il[a] == FINAL:
                best = max(best, sc + arc_w(a))
    return best


# ---- explicit composition with a one-state boost acceptor (kaldifst) --------------------------------
def to_openfst_text(graph: WfstGraph) -> str:
    """Tropical text FST: columns c -> c + 1 (0 is epsilon), costs = -weights, FINAL arcs -> final weights."""
    lines, finals = [], {}
    rs = graph.row_splits
    order = [graph.start_state] + [s for s in range(graph.num_states) if s != graph.start_state]
    for s in order:  # the start state must come first in OpenFst's text format
        for a in range(rs[s], rs[s + 1]):
            il = int(graph.ilabel[a])
            if il == FINAL:
                finals[s] = max(finals.get(s, -math.inf), float(graph.weight[a]))
                continue
            lab = 0 if il == EPSILON else il + 1
            lines.append(f"{s} {int(graph.dest[a])} {lab} {int(graph.olabel[a])} {-float(graph.weight[a]):.9g}")
    if not lines:
        lines.append(f"{graph.start_state} {graph.start_state} 0 0 Infinity")
    for s, w in finals.items():
        lines.append(f"{s} {-w:.9g}")
    return "\n".join(lines) + "\n"


def boost_acceptor_text(num_words: int, boosts: dict[int, float]) -> str:
    """One state, final; a self-loop per word with cost -boost (0 for unboosted words)."""
    lines = [f"0 0 {w} {w} {-boosts.get(w, 0.0):.9g}" for w in range(1, num_words)]
    lines.append("0 0")
    return "\n".join(lines) + "\n"


def from_openfst_text(text: str, num_tokens: int, words=None) -> WfstGraph:
    arcs, finals = [], []
    start = None
    for line in text.strip().splitlines():
        f = line.split()
        if len(f) >= 4:
            if start is None:
                start = int(f[0])
            arcs.append((int(f[0]), int(f[1]), int(f[2]), int(f[3]), -float(f[4]) if len(f) > 4 else 0.0))
        elif f:
            w = -float(f[1]) if len(f) > 1 else 0.0
            if w != -math.inf:  # OpenFst prints "state Infinity" for non-final states it visited
                finals.append((int(f[0]), w))
    states = {s for a in arcs for s in a[:2]} | {s for s, _ in finals}
    n = max(states) + 2
    final = n - 1
    src = [a[0] for a in arcs] + [s for s, _ in finals]
    dst = [a[1] for a in arcs] + [final] * len(finals)
    il = [EPSILON if a[2] == 0 else a[2] - 1 for a in arcs] + [FINAL] * len(finals)
    ol = [a[3] for a in arcs] + [0] * len(finals)
    wt = [a[4] for a in arcs] + [w for _, w in finals]
    return WfstGraph.from_arcs(src, dst, il, ol, wt, num_states=n, start_state=start if start is not None else 0,
                               final_state=final, num_tokens=num_tokens, words=words)


def compose_with_boosts(graph: WfstGraph, boosts: dict[int, float]) -> WfstGraph:
    import kaldifst

    a = kaldifst.compile(to_openfst_text(graph))
    kaldifst.arcsort(a, sort_type="olabel")
    num_words = len(graph.words) if graph.words else int(np.max(graph.olabel)) + 1
    b = kaldifst.compile(boost_acceptor_text(num_words, boosts), acceptor=False)
    kaldifst.arcsort(b, sort_type="ilabel")
    c = kaldifst.compose(a, b, connect=False)  # keep dead ends: the search must see the same states
    return from_openfst_text(c.to_str(), graph.num_tokens, graph.words)


# ---- executable k2 semantics in Python (epsilon-free), with the two k2py deviations as switches ---------
def k2_model_decode(graph: WfstGraph, lp: np.ndarray, length: int, search_beam: float, min_active: float,
                    max_active: float, allow_partial: bool = True, final_logprob_on_real_frames: float = -math.inf,
                    last_frames_rule: bool = True):
    """(score, words, frame_labels) of the best path under k2 `intersect_dense_pruned` pruning, in float32.

    A second, independent statement of the semantics in decoders/csrc/wfst_cpu.cpp (slow, dict-based), with
    two switches that reproduce what the k2py wheel does differently from k2 proper:
    - `final_logprob_on_real_frames`: the score of label -1 (FINAL arcs) on real frames. k2's DenseFsaVec
      pads that column with -inf, so FINAL arcs are only taken on the extra final frame. k2py's bindings
      (AlignSegments and OnlineDenseIntersecter) build their dense matrix with 0 there: FINAL arcs then
      compete for the frame's maximum (tightening the cutoff) and put the dead-end final state into the
      frontier (one more `active` state). Pass 0.0 to model k2py.
    - `last_frames_rule`: k2's "min_active raised to max_active / 2 in the last 5 frames" needs the
      utterance length; the online intersecter does not know it (k2py's OnlineDenseIntersecter, and k2's
      online mode), so the rule is inert there. Pass False to model it.
    Both only matter when pruning binds (tight beams / small max_active); at the default beams the best
    path is the same.
    """
    f32 = np.float32
    rs, il, dst, wt, ol = graph.row_splits, graph.ilabel, graph.dest, graph.weight, graph.olabel
    cur = {graph.start_state: (f32(0.0), (), ())}  # state -> (score, words, labels)
    beam = f32(search_beam)
    final_t = length + 1
    for t in range(length + 1):
        final = t == length
        redirect = final and allow_partial and not any(il[a] == FINAL for s in cur for a in range(rs[s], rs[s + 1]))
        cands = []
        for s, (sc, ws, labs) in cur.items():
            for a in range(rs[s], rs[s + 1]):
                d = int(dst[a])
                if final:
                    if redirect:
                        ac, d = f32(0.0), graph.final_state
                    else:
                        ac = f32(0.0) if il[a] == FINAL else f32(-np.inf)
                    lab = ()
                else:
                    ac = f32(final_logprob_on_real_frames) if il[a] == FINAL else f32(lp[t, il[a]])
                    lab = (int(il[a]),)
                end = f32(sc + f32(ac + f32(wt[a])))
                cands.append((d, end, ws + ((int(ol[a]),) if ol[a] > 0 else ()), labs + lab))
        active = len(cur)
        cur_min = max(min_active, max_active / 2) if (last_frames_rule and t + 5 >= final_t) else min_active
        if active <= max_active:
            if active >= cur_min or active == 0:
                beam = f32(0.8 * float(beam) + 0.2 * search_beam)
            else:
                beam = f32(max(float(beam), search_beam) * 1.25)
        elif not last_frames_rule or t + 5 < final_t:
            beam = f32(min(float(beam), search_beam) * 0.8)
        if t == final_t - 1:
            beam = f32(1e10)
        best = max((c[1] for c in cands), default=f32(-np.inf))
        cutoff = best - beam
        nxt: dict = {}
        for d, end, ws, labs in cands:
            if end > cutoff and (d not in nxt or end > nxt[d][0]):
                nxt[d] = (end, ws, labs)
        cur = nxt
    if graph.final_state not in cur:
        return -math.inf, [], []
    sc, ws, labs = cur[graph.final_state]
    return float(sc), list(ws), list(labs)


def k2py_final_column_emulation(graph: WfstGraph) -> WfstGraph:
    """A graph on which our decoder reproduces k2py's FINAL-arc scoring (see k2_model_decode): every FINAL
    arc s -> F (weight w) gets an emitting twin s -> F' reading a new last column V (fill it with 0 on real
    frames), F' a dead end like k2's final state on a real frame. Decode with log-probs padded by a zero
    column: the twins compete for each frame's maximum and F' counts as an active state, as in k2py."""
    n, V = graph.num_states, graph.num_tokens
    src = graph.src().astype(np.int64)
    il = np.asarray(graph.ilabel, dtype=np.int64)
    splits, words = graph.aux_csr()
    fin = np.nonzero(il == FINAL)[0]
    group = np.where(il >= 0, 0, np.where(il == EPSILON, 2, 3))
    all_src = np.concatenate([src, src[fin]])
    all_group = np.concatenate([group, np.ones(len(fin), dtype=np.int64)])
    old = np.concatenate([np.arange(graph.num_arcs), fin])  # the arc each new arc copies from
    order = np.lexsort((np.arange(len(old)), all_group, all_src))
    twin = np.concatenate([np.zeros(graph.num_arcs, bool), np.ones(len(fin), bool)])[order]
    old = old[order]
    dest = np.where(twin, n, np.asarray(graph.dest)[old]).astype(np.int32)
    ilabel = np.where(twin, V, il[old]).astype(np.int32)
    counts = (splits[old + 1] - splits[old]).astype(np.int64)
    new_splits = np.zeros(len(old) + 1, dtype=np.int32)
    np.cumsum(counts, out=new_splits[1:])
    gather = np.repeat(splits[old], counts) + (np.arange(int(counts.sum())) - np.repeat(new_splits[:-1], counts))
    row_splits = np.zeros(n + 2, dtype=np.int32)
    np.cumsum(np.bincount(all_src, minlength=n + 1), out=row_splits[1:])
    return WfstGraph(num_states=n + 1, start_state=graph.start_state, final_state=graph.final_state,
                     num_tokens=V + 1, row_splits=row_splits, dest=dest, ilabel=ilabel,
                     olabel=np.asarray(graph.olabel)[old].astype(np.int32),
                     weight=np.asarray(graph.weight)[old].astype(np.float32), words=graph.words,
                     info=dict(graph.info), aux_splits=new_splits, aux_words=np.asarray(words)[gather].astype(np.int32))


def dip_case(dip_weight: float = -8.0):
    """A graph and log-probs (1, 3 frames, 4 tokens) where the best token of a step has only a poor arc: after frame 0
    the best token (state 1, score 0) has one arc on frame 1 (end -10), the second token (state 2, score -1) has the
    step's maximum (-1, to state 6) and an arc ending at -1 + `dip_weight` (-9, to state 4). The exact cutoff prunes
    state 4 at beam 4 (and state 3); kept alive, state 4 would win the utterance (-9 against -21 through state 6).
    The bound max (BEAMDEC_WFST_BOUND_MAX) admits state 4 against the best token's arc (-10 - beam) and must leave
    it dead."""
    arcs = [(0, 1, 0, 0.0), (0, 2, 1, 0.0), (1, 3, 2, 0.0), (2, 6, 3, 0.0), (2, 4, 1, dip_weight),
            (3, 8, 0, 0.0), (6, 7, 0, -20.0), (4, 8, 0, 0.0), (7, 5, FINAL, 0.0), (8, 5, FINAL, 0.0)]
    src, dest, ilabel, weight = map(list, zip(*arcs))
    g = WfstGraph.from_arcs(src, dest, ilabel, [0] * len(arcs), weight, num_states=9, start_state=0, final_state=5,
                            num_tokens=4)
    lp = torch.full((1, 3, 4), -30.0)
    lp[0, 0, 0], lp[0, 0, 1] = 0.0, -1.0
    lp[0, 1, 2], lp[0, 1, 3], lp[0, 1, 1] = -10.0, 0.0, 0.0
    lp[0, 2, 0] = 0.0
    return g, lp
