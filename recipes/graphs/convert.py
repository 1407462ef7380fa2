"""kaldifst graphs (Kaldi numbering) -> `WfstGraph` (column numbering, explicit FINAL arcs)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from decoders.graph import EPSILON, FINAL, WfstGraph
from recipes.graphs.fstutil import FstArrays, fst_to_arrays
from recipes.graphs.symbols import TokenTable, column_of_kaldi_token


def _ilabel_to_columns(il: np.ndarray, table: TokenTable) -> np.ndarray:
    """Kaldi token labels -> columns; 0 and #k -> EPSILON (vectorised `column_of_kaldi_token`)."""
    V = table.vocab_size
    out = np.where((il == 0) | (il > V), EPSILON, il - 1).astype(np.int32)
    # spot-check the vectorised mapping against the one scalar definition
    for lab in il[(il > 0) & (il <= V)][:4].tolist():
        assert column_of_kaldi_token(lab) == lab - 1
    return out


def tlg_to_graph(fst_or_arrays, table: TokenTable, words: list[str], info: Optional[dict] = None) -> WfstGraph:
    """TLG (epsilons kept) -> WfstGraph: final weights become FINAL arcs into a new last state."""
    a: FstArrays = fst_or_arrays if isinstance(fst_or_arrays, FstArrays) else fst_to_arrays(fst_or_arrays)
    N = a.num_states
    fin = np.nonzero(np.isfinite(a.final))[0]
    src = np.concatenate([a.src, fin]).astype(np.int64)
    dest = np.concatenate([a.dest, np.full(fin.shape, N, np.int32)])
    ilabel = np.concatenate([_ilabel_to_columns(a.ilabel, table), np.full(fin.shape, FINAL, np.int32)])
    olabel = np.concatenate([a.olabel, np.zeros(fin.shape, np.int32)])
    weight = np.concatenate([-a.cost, -a.final[fin]]).astype(np.float32)
    new_of_old = _start_first_final_last(N + 1, a.start, N)
    return WfstGraph.from_arcs(new_of_old[src], new_of_old[dest], ilabel, olabel, weight, num_states=N + 1,
                               start_state=0, final_state=N, num_tokens=table.vocab_size, words=words,
                               info=info).validate()


def hlg_to_graph(fst_or_arrays, table: TokenTable, words: list[str], compounds: list[tuple],
                 info: Optional[dict] = None) -> WfstGraph:
    """HLG (explicit final-label arcs into one final state, compound word ids) -> WfstGraph.

    States renumbered start first, final last (k2's layout); identical parallel arcs merged (lowest cost, as
    OpenFst's RmEpsilon merges them), which also sorts the arcs into the graph's canonical order (per state by
    ilabel, then destination; the final label sorts after every token), so the graph is assembled without
    another sort of its (up to ~10^8) arcs."""
    from recipes.graphs.hlg import merge_parallel_arcs

    a: FstArrays = fst_or_arrays if isinstance(fst_or_arrays, FstArrays) else fst_to_arrays(fst_or_arrays)
    del fst_or_arrays  # called as hlg_to_graph(compile_HLG(...)), the composition's arrays are freed below
    final_label = table.first_disambig_label
    if np.any(a.ilabel == 0):
        raise ValueError("hlg_to_graph: HLG still has epsilon arcs")
    if np.any(a.ilabel > final_label):
        raise ValueError("hlg_to_graph: HLG has disambiguation labels")
    fin_arcs = a.ilabel == final_label
    finals = np.unique(a.dest[fin_arcs])
    if finals.size != 1:
        raise ValueError(f"hlg_to_graph: final-label arcs enter {finals.size} states, expected one")
    if np.any(np.isfinite(a.final) & (np.arange(a.num_states) != finals[0])):
        raise ValueError("hlg_to_graph: states other than the super-final one are final")
    N = a.num_states
    a = merge_parallel_arcs(a, renumber=_start_first_final_last(N, a.start, int(finals[0])))
    row_splits = np.zeros(N + 1, dtype=np.int64)
    np.cumsum(np.bincount(a.src, minlength=N), out=row_splits[1:])
    src = a.src
    a.src = None  # the graph keeps row_splits only
    del src
    olabel, aux_splits, aux_words = _words_csr(a.olabel, len(words), compounds)
    return WfstGraph(num_states=N, start_state=0, final_state=N - 1, num_tokens=table.vocab_size,
                     row_splits=row_splits.astype(np.int32), dest=a.dest.astype(np.int32),
                     ilabel=np.where(a.ilabel == final_label, FINAL, a.ilabel - 1).astype(np.int32), olabel=olabel,
                     weight=(-a.cost).astype(np.float32), words=words, info=dict(info or {}),
                     aux_splits=aux_splits, aux_words=aux_words).validate()


def _words_csr(olabel: np.ndarray, base: int, compounds: list[tuple]):
    """(first word per arc, aux_splits, aux_words) for output ids where id >= base is compounds[id - base];
    aux is None when no arc has 2+ words. int32 throughout (decoders.graph.expand_compounds works in int64 over
    every arc, ~5x the memory on a 50M-arc HLG)."""
    olabel = np.asarray(olabel, dtype=np.int32)
    comp = np.nonzero(olabel >= base)[0]
    if comp.size == 0:
        return olabel, None, None
    cid = olabel[comp] - base
    clens = np.fromiter((len(c) for c in compounds), dtype=np.int32, count=len(compounds))
    cstart = np.zeros(len(compounds) + 1, dtype=np.int64)
    np.cumsum(clens, out=cstart[1:])
    cvals = np.fromiter((w for c in compounds for w in c), dtype=np.int32, count=int(cstart[-1]))
    lens = (olabel > 0).astype(np.int32)
    lens[comp] = clens[cid]
    splits = np.zeros(olabel.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=splits[1:])
    del lens
    if splits[-1] >= 2**31:
        raise ValueError("hlg_to_graph: more than 2^31 output words")
    splits = splits.astype(np.int32)
    words = np.zeros(int(splits[-1]), dtype=np.int32)
    single = (olabel > 0) & (olabel < base)
    words[splits[:-1][single]] = olabel[single]
    del single
    n = clens[cid].astype(np.int64)
    within = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    words[np.repeat(splits[comp].astype(np.int64), n) + within] = cvals[np.repeat(cstart[cid], n) + within]
    first = olabel.copy()
    first[comp] = cvals[cstart[cid]]
    return first, splits, words


def _start_first_final_last(N: int, start: int, final: int) -> np.ndarray:
    """State renumbering (old id -> new id) that puts the start first and the final state last (k2's layout),
    the other states keeping their relative order; arcs are then put in canonical order by one from_arcs."""
    if start == final:
        raise ValueError("the start state is the final state")
    keep = np.ones(N, dtype=bool)
    keep[[start, final]] = False
    new_of_old = np.cumsum(keep).astype(np.int64)  # others: 1, 2, ... in their order
    new_of_old[start] = 0
    new_of_old[final] = N - 1
    return new_of_old
