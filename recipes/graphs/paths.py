"""Path utilities over a `WfstGraph` (numpy/Python; for checks, tests and baseline adapters, not speed).

- `forced_best_path(graph, labels, log_probs)`: the best path that reads exactly the given per-frame column
  sequence (epsilon arcs allowed between frames, TLG-style), ending with a FINAL arc. Used to recover the
  total score (graph + acoustic) of a decoder's best path when the decoder only reports per-frame labels
  (k2py), and to compare TLG with HLG.
- `sample_label_sequence(graph, rng)`: a random accepted frame-label sequence (random walk to FINAL).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from decoders.graph import EPSILON, WfstGraph


@dataclass
class ForcedPath:
    score: float  # graph score (+ acoustic score when log_probs was given), natural log
    graph_score: float
    words: list  # word ids along the path (aux CSR order)
    arcs: list  # arc ids along the path (epsilon and final arcs included)
    reached_final: bool  # False: no path with these labels ends in a FINAL arc (best partial path returned)


class ArcIndex:
    """Per-state arc ranges of a graph (canonical order: emitting arcs sorted by ilabel, then epsilon, then
    final). Build once per graph and pass as `index=` to `forced_best_path` when calling it many times."""

    def __init__(self, g: WfstGraph):
        self.g = g
        self.rs = np.asarray(g.row_splits, dtype=np.int64)
        self.il = np.asarray(g.ilabel)
        self.dest = np.asarray(g.dest)
        self.w = np.asarray(g.weight, dtype=np.float64)
        n_emit = np.bincount(g.src()[self.il >= 0], minlength=g.num_states) if g.num_arcs else np.zeros(g.num_states, int)
        self.emit_end = self.rs[:-1] + n_emit
        n_eps = np.bincount(g.src()[self.il == EPSILON], minlength=g.num_states) if g.num_arcs else n_emit * 0
        self.eps_end = self.emit_end + n_eps

    def emitting(self, s: int, label: int) -> range:
        lo, hi = int(self.rs[s]), int(self.emit_end[s])
        seg = self.il[lo:hi]
        a = lo + int(np.searchsorted(seg, label, "left"))
        b = lo + int(np.searchsorted(seg, label, "right"))
        return range(a, b)

    def epsilons(self, s: int) -> range:
        return range(int(self.emit_end[s]), int(self.eps_end[s]))

    def finals(self, s: int) -> range:
        return range(int(self.eps_end[s]), int(self.rs[s + 1]))


def _closure(idx: ArcIndex, active: dict, trace: list) -> dict:
    """Viterbi epsilon closure (the epsilon subgraph of our graphs is acyclic; relaxation terminates)."""
    stack = list(active)
    while stack:
        s = stack.pop()
        score, ptr = active[s]
        for a in idx.epsilons(s):
            d = int(idx.dest[a])
            ns = score + idx.w[a]
            if d not in active or ns > active[d][0]:
                trace.append((ptr, a))
                active[d] = (ns, len(trace) - 1)
                stack.append(d)
    return active


def forced_best_path(graph: WfstGraph, labels: Sequence[int], log_probs: Optional[np.ndarray] = None,
                     *, index: Optional[ArcIndex] = None, _index: Optional[ArcIndex] = None) -> ForcedPath:
    """Best path reading `labels` (one column per frame). log_probs: optional (T, V) added per frame.
    index: a prebuilt `ArcIndex(graph)` (`_index` is the old spelling, kept until eval/ stops using it)."""
    idx = index or _index or ArcIndex(graph)
    trace: list = []  # (prev trace id or -1, arc)
    active = {graph.start_state: (0.0, -1)}
    _closure(idx, active, trace)
    ac = 0.0
    for t, lab in enumerate(labels):
        lab = int(lab)
        if log_probs is not None:
            ac += float(log_probs[t, lab])
        nxt: dict = {}
        for s, (score, ptr) in active.items():
            for a in idx.emitting(s, lab):
                d = int(idx.dest[a])
                ns = score + idx.w[a]
                if d not in nxt or ns > nxt[d][0]:
                    trace.append((ptr, a))
                    nxt[d] = (ns, len(trace) - 1)
        if not nxt:
            break
        active = _closure(idx, nxt, trace)
    best = None
    for s, (score, ptr) in active.items():
        for a in idx.finals(s):
            ns = score + idx.w[a]
            if best is None or ns > best[0]:
                best = (ns, ptr, a)
    reached = best is not None
    if best is None:  # partial: best active state
        s, (score, ptr) = max(active.items(), key=lambda kv: kv[1][0])
        best = (score, ptr, None)
    score, ptr, last = best
    arcs = [] if last is None else [last]
    while ptr >= 0:
        ptr, a = trace[ptr]
        arcs.append(a)
    arcs.reverse()
    words = [w for a in arcs for w in graph.arc_words(a)]
    return ForcedPath(score=float(score + ac), graph_score=float(score), words=words, arcs=arcs, reached_final=reached)


def sample_label_sequence(graph: WfstGraph, rng: np.random.Generator, max_frames: int = 60,
                          p_stop: float = 0.15) -> Optional[list]:
    """Random walk from the start state; returns the per-frame labels of a path ending with a FINAL arc
    (None if the walk got stuck or ran past max_frames)."""
    idx = ArcIndex(graph)
    s = graph.start_state
    labels = []
    for _ in range(4 * max_frames + 10):
        fin = idx.finals(s)
        if len(fin) and (rng.random() < p_stop or int(idx.rs[s + 1]) == fin.start):
            return labels
        lo, hi = int(idx.rs[s]), int(idx.eps_end[s])
        if hi == lo:
            return labels if len(fin) else None
        a = int(rng.integers(lo, hi))
        if idx.il[a] >= 0:
            labels.append(int(idx.il[a]))
            if len(labels) > max_frames:
                return None
        s = int(idx.dest[a])
    return None

