"""kaldifst graphs (Kaldi numbering) -> `WfstGraph` (column numbering, explicit FINAL arcs)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from decoders.graph import EPSILON, FINAL, WfstGraph, expand_compounds
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
    new_of_old = _start_first_final_last(N, a.start, int(finals[0]))
    a = merge_parallel_arcs(FstArrays(start=0, num_states=N, src=new_of_old[a.src].astype(np.int32),
                                      dest=new_of_old[a.dest].astype(np.int32), ilabel=a.ilabel, olabel=a.olabel,
                                      cost=a.cost, final=a.final))
    row_splits = np.zeros(N + 1, dtype=np.int64)
    np.cumsum(np.bincount(a.src, minlength=N), out=row_splits[1:])
    base = len(words)
    olabel = a.olabel.astype(np.int32)
    aux_splits = aux_words = None
    if np.any(olabel >= base):
        r = expand_compounds(olabel, base, compounds)
        lens = np.diff(r["row_splits"])
        olabel = np.zeros(olabel.shape[0], np.int32)
        olabel[lens > 0] = r["values"][r["row_splits"][:-1][lens > 0]]  # the first word of each arc
        if lens.max() > 1:
            aux_splits, aux_words = r["row_splits"].astype(np.int32), r["values"].astype(np.int32)
    return WfstGraph(num_states=N, start_state=0, final_state=N - 1, num_tokens=table.vocab_size,
                     row_splits=row_splits.astype(np.int32), dest=a.dest.astype(np.int32),
                     ilabel=np.where(a.ilabel == final_label, FINAL, a.ilabel - 1).astype(np.int32), olabel=olabel,
                     weight=(-a.cost).astype(np.float32), words=words, info=dict(info or {}),
                     aux_splits=aux_splits, aux_words=aux_words).validate()


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
