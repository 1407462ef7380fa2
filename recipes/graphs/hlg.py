"""The epsilon-free HLG at scale: epsilon removal of LG on arrays, and H made epsilon-free before composing.

icefall's compile_hlg.py is the reference order of operations: LG = det(L o G) (ours also minimized, as Kaldi's
mkgraph), disambiguation symbols -> epsilon AFTER determinization, epsilon removal on LG (k2.remove_epsilon,
whose ragged aux_labels concatenate the words of removed arcs), connect, arc sort, then H o LG. Two changes of
*where* the work happens make the bench scale (200k words, 1.5M n-grams) fit in minutes and a few GB:

- `remove_epsilons`: LG's epsilons (LM back-off arcs, word-end disambiguation symbols, some carrying a word
  that determinization delayed) are removed in numpy, over arrays: the epsilon closure of every state (paths of
  epsilon arcs, at most a few deep: word end -> back-off -> lower order), kept best per (state, reached state,
  word sequence) in the tropical semiring, then every non-epsilon arc of every reached state copied with the
  path's cost added and its words prepended (a word sequence of 2+ words becomes a compound output id, as k2's
  ragged aux_labels). It replaces OpenFst's RmEpsilon (which removes eps:eps arcs only, in a C++ loop over
  states) plus a Python pass that folded the remaining eps:word arcs forward one by one.
- `epsilon_free_topology`: the compact topology's epsilon (token state -> blank state) is removed from H, a
  30-state FST, instead of from H o LG' (20 s of RmEpsilon on 14M arcs at small scale, and 2x the memory):
  since LG' reads a token on every arc, rmepsilon(H) o LG' = rmepsilon(H o LG').

Measured on the 2-core shared CPU machine (nice 19, `/usr/bin/time -v`; char tokens, blank last; the whole
`build_token_set_graphs` for compact + normal: lang stage, both TLGs, both HLGs, every file):
  small: 188 s -> 86 s wall, peak RSS 3.4 -> 3.2 GB (HLG.k2.txt's writer is the peak there); HLG 13.9M arcs.
  bench: previously refused by the guard / stopped past 11 min and 10 GB; now 5:00-5:20 wall, peak RSS 7.7 GB;
         LG 3.7M arcs -> LG' 19.4M arcs (epsilon removal ~10 s), HLG compact 52.6M / normal 51.6M arcs
         (composition + array conversion 31-43 s, to canonical graph 15-22 s, HLG.bin 5 s, HLG.pt 2-5 s each;
         HLG.k2.txt not written above max_k2_text_arcs). The rest is the lang stage (L o G, determinize,
         minimize: ~85 s) and the two TLGs (~20 s each).
Equivalence with the previous builder: tests/test_hlg_equivalence.py (same states, arcs and word sequences on the
toy LM and the tiny workload, same best paths).

Costs are OpenFst's (tropical: lower is better); FstArrays is the array form of an OpenFst graph
(decoders.openfst). Sizes are logged after every step (icefall style) from the arrays, without another FST copy.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional

import kaldifst
import numpy as np

from recipes.graphs.fstutil import FstArrays, arrays_to_fst

log = logging.getLogger(__name__)


def log_arrays(name: str, a: FstArrays) -> dict:
    """Log and return the size of an FST held as arrays (no FST round trip)."""
    size = {"states": int(a.num_states), "arcs": int(a.num_arcs), "epsilon_arcs": int(np.count_nonzero(a.ilabel == 0)),
            "final_states": int(np.count_nonzero(np.isfinite(a.final)))}
    log.info("%-24s states=%-9d arcs=%-10d eps_arcs=%d", name, size["states"], size["arcs"], size["epsilon_arcs"])
    return size


@dataclass
class WordSequences:
    """Output ids of word sequences: 0 = none, 1 .. base-1 = that one word, base + i = compounds[i] (2+ words)."""

    base: int
    compounds: list = field(default_factory=list)
    _index: dict = field(default_factory=dict)

    def words(self, label: int) -> tuple:
        if label == 0:
            return ()
        if label < self.base:
            return (label,)
        return self.compounds[label - self.base]

    def label(self, seq: tuple) -> int:
        if not seq:
            return 0
        if len(seq) == 1:
            return seq[0]
        got = self._index.get(seq)
        if got is None:
            got = self._index[seq] = self.base + len(self.compounds)
            self.compounds.append(seq)
        return got

    def concat(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Elementwise id of words(left) + words(right) (vectorised; the compound table grows as needed)."""
        left = np.asarray(left, np.int64)
        right = np.asarray(right, np.int64)
        out = np.where(left == 0, right, left)
        both = (left != 0) & (right != 0)
        if both.any():
            pairs = np.stack([left[both], right[both]], axis=1)
            uniq, inv = np.unique(pairs, axis=0, return_inverse=True)
            ids = np.fromiter((self.label(self.words(int(a)) + self.words(int(b))) for a, b in uniq.tolist()),
                              dtype=np.int64, count=uniq.shape[0])
            out[both] = ids[inv.reshape(-1)]
        return out


def _csr(src: np.ndarray, num_states: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, splits): arcs `order[splits[s]:splits[s+1]]` leave state s (stable: original order kept)."""
    order = np.argsort(src, kind="stable")
    splits = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_states), out=splits[1:])
    return order, splits


def _expand(splits: np.ndarray, order: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each entry i of `states`, the arcs leaving states[i]: (entry index per arc, arc index)."""
    deg = splits[states + 1] - splits[states]
    owner = np.repeat(np.arange(states.shape[0], dtype=np.int64), deg)
    first = np.repeat(splits[states] - np.concatenate([[0], np.cumsum(deg)[:-1]]), deg)
    return owner, order[first + np.arange(owner.shape[0], dtype=np.int64)]


def _best(s, t, q, c) -> tuple:
    """Keep the lowest cost per (s, t, q)."""
    key = np.lexsort((c, q, t, s))
    s, t, q, c = s[key], t[key], q[key], c[key]
    first = np.ones(s.shape[0], dtype=bool)
    first[1:] = (s[1:] != s[:-1]) | (t[1:] != t[:-1]) | (q[1:] != q[:-1])
    return s[first], t[first], q[first], c[first]


def remove_epsilons(a: FstArrays, seqs: WordSequences, *, max_depth: int = 64) -> tuple[FstArrays, dict]:
    """Tropical epsilon removal: every arc with input label 0 is removed, whatever its output (a word on a
    removed arc is prepended to the outputs of the arcs its paths continue with: `seqs` compounds).

    Equivalent to the input as a weighted transducer under the tropical semiring (every input sequence keeps its
    best cost for every output sequence). Final weights of states reached by epsilon paths are inherited when the
    path outputs nothing; a word-carrying epsilon path into a final state is refused (no arc would carry its
    words -- make finality an explicit arc first, as `prepare_LG_for_HLG` does). Raises RuntimeError when the
    epsilon arcs have a cycle or chains deeper than `max_depth`."""
    N = a.num_states
    is_eps = a.ilabel == 0
    e_idx = np.nonzero(is_eps)[0]
    e_order, e_splits = _csr(a.src[e_idx], N)
    e_order = e_idx[e_order]
    e_deg = np.diff(e_splits)
    # closure pairs (source s, reached t, word sequence q, cost c): start with (s, s, (), 0)
    s = t = np.arange(N, dtype=np.int64)
    q = np.zeros(N, np.int64)
    c = np.zeros(N, np.float32)
    parts = [(s, t, q, c)]
    depth = 0
    while True:
        live = e_deg[t] > 0
        if not live.any():
            break
        depth += 1
        if depth > max_depth:
            raise RuntimeError(f"remove_epsilons: epsilon paths longer than {max_depth} arcs (an epsilon cycle?)")
        owner, arc = _expand(e_splits, e_order, t[live])
        s_l, q_l, c_l = s[live][owner], q[live][owner], c[live][owner]
        s, t, q, c = _best(s_l, a.dest[arc].astype(np.int64), seqs.concat(q_l, a.olabel[arc]),
                           (c_l + a.cost[arc]).astype(np.float32))
        parts.append((s, t, q, c))
    s, t, q, c = _best(*(np.concatenate([p[i] for p in parts]) for i in range(4)))
    # finals through epsilon paths that output nothing
    final = a.final.astype(np.float32).copy()
    fin_t = np.isfinite(a.final[t])
    if np.any(fin_t & (q != 0)):
        raise ValueError("remove_epsilons: an epsilon path with words reaches a final state; make finality an "
                         "explicit arc first")
    np.minimum.at(final, s[fin_t], (c + a.final[t])[fin_t].astype(np.float32))
    # every non-epsilon arc of every reached state, with the path's cost and words in front
    r_idx = np.nonzero(~is_eps)[0]
    r_order, r_splits = _csr(a.src[r_idx], N)
    owner, arc = _expand(r_splits, r_idx[r_order], t)
    out = merge_parallel_arcs(FstArrays(
        start=a.start, num_states=N,
        src=s[owner].astype(np.int32), dest=a.dest[arc].astype(np.int32), ilabel=a.ilabel[arc].astype(np.int32),
        olabel=seqs.concat(q[owner], a.olabel[arc]).astype(np.int32),
        cost=(c[owner] + a.cost[arc]).astype(np.float32), final=final,
    ))
    stats = {"epsilon_arcs_removed": int(e_idx.shape[0]), "closure_pairs": int(s.shape[0]), "max_depth": depth,
             "word_epsilon_arcs": int(np.count_nonzero(is_eps & (a.olabel != 0))),
             "parallel_arcs_merged": int(owner.shape[0] - out.num_arcs)}
    return out, stats


def merge_parallel_arcs(a: FstArrays, renumber: Optional[np.ndarray] = None) -> FstArrays:
    """Arcs with the same (source, input, destination, output) merged into one with the lowest cost (what
    OpenFst's RmEpsilon does: the tropical Plus of identical arcs), the result sorted by (source, ilabel,
    destination, olabel): input-label sorted (composition), and our graphs' canonical order when finality is the
    largest label. `renumber` (old state id -> new id) renumbers the states on the way, without a copy of the
    arcs. Memory: two int64 keys and the sort's permutation besides the input and output (~100 bytes per arc at
    the peak), not a copy per key."""
    if a.num_arcs and (int(a.ilabel.min()) < 0 or int(a.ilabel.max()) >= 1 << 24 or int(a.olabel.min()) < 0):
        raise ValueError("merge_parallel_arcs: labels must be in [0, 2^24) (inputs) and >= 0 (outputs)")
    ren = (lambda x: x.astype(np.int64)) if renumber is None else (lambda x: renumber[x].astype(np.int64))
    hi = ren(a.src)
    hi <<= 24
    hi |= a.ilabel
    lo = ren(a.dest)
    lo <<= 31
    lo |= a.olabel
    order = np.lexsort((lo, hi))
    first = np.ones(order.shape[0], dtype=bool)
    hs = hi[order]  # one sorted key copy at a time
    del hi
    diff = hs[1:] != hs[:-1]
    del hs
    ls = lo[order]
    del lo
    diff |= ls[1:] != ls[:-1]
    del ls
    first[1:] = diff
    del diff
    seg = np.nonzero(first)[0]
    del first
    cost = np.minimum.reduceat(a.cost[order], seg) if seg.shape[0] else a.cost[:0]
    keep = order[seg]
    del order, seg
    src, dest = (a.src[keep], a.dest[keep]) if renumber is None else (
        renumber[a.src[keep]].astype(np.int32), renumber[a.dest[keep]].astype(np.int32))
    return FstArrays(start=a.start if renumber is None else int(renumber[a.start]), num_states=a.num_states,
                     src=src, dest=dest, ilabel=a.ilabel[keep], olabel=a.olabel[keep], cost=cost.astype(np.float32),
                     final=a.final if renumber is None else _permute_final(a.final, renumber))


def _permute_final(final: np.ndarray, renumber: np.ndarray) -> np.ndarray:
    out = np.empty_like(final)
    out[renumber] = final
    return out


def connect_arrays(a: FstArrays) -> FstArrays:
    """Trim: keep the states on some path from the start to a final state (OpenFst Connect), renumbered in
    their original order; arcs keep their order."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order

    N = a.num_states
    ones = np.ones(a.num_arcs, dtype=np.int8)
    fwd = csr_matrix((ones, (a.src, a.dest)), shape=(N, N))
    acc = np.zeros(N, dtype=bool)
    acc[breadth_first_order(fwd, a.start, directed=True, return_predecessors=False)] = True
    # co-accessible: reachable from a final state in the reversed graph (one extra node feeding every final)
    fin = np.nonzero(np.isfinite(a.final))[0]
    rev = csr_matrix((np.ones(a.num_arcs + fin.shape[0], dtype=np.int8),
                      (np.concatenate([a.dest, np.full(fin.shape, N)]), np.concatenate([a.src, fin]))),
                     shape=(N + 1, N + 1))
    coacc = np.zeros(N + 1, dtype=bool)
    coacc[breadth_first_order(rev, N, directed=True, return_predecessors=False)] = True
    keep = acc & coacc[:N]
    if keep.all():
        return a
    if not keep[a.start]:
        raise ValueError("connect_arrays: no path from the start state to a final state")
    new_id = np.cumsum(keep) - 1
    arcs = keep[a.src] & keep[a.dest]
    return FstArrays(start=int(new_id[a.start]), num_states=int(keep.sum()),
                     src=new_id[a.src[arcs]].astype(np.int32), dest=new_id[a.dest[arcs]].astype(np.int32),
                     ilabel=a.ilabel[arcs], olabel=a.olabel[arcs], cost=a.cost[arcs], final=a.final[keep])


def epsilon_free_topology(H: FstArrays) -> "kaldifst.StdVectorFst":
    """rmepsilon(H) (OpenFst, on the 30-state topology), output-label sorted for composition."""
    fst = arrays_to_fst(H)
    kaldifst.rmepsilon(fst)
    kaldifst.arcsort(fst, sort_type="olabel")
    return fst
