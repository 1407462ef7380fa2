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
    g = WfstGraph.from_arcs(src, dest, ilabel, olabel, weight, num_states=N + 1, start_state=a.start,
                            final_state=N, num_tokens=table.vocab_size, words=words, info=info)
    return _renumber_start_first(g).validate()


def hlg_to_graph(fst_or_arrays, table: TokenTable, words: list[str], compounds: list[tuple],
                 info: Optional[dict] = None) -> WfstGraph:
    """HLG (explicit final-label arcs into one final state, compound word ids) -> WfstGraph."""
    a: FstArrays = fst_or_arrays if isinstance(fst_or_arrays, FstArrays) else fst_to_arrays(fst_or_arrays)
    final_label = table.first_disambig_label
    if np.any(a.ilabel == 0):
        raise ValueError("hlg_to_graph: HLG still has epsilon arcs")
    fin_arcs = a.ilabel == final_label
    finals = np.unique(a.dest[fin_arcs])
    if finals.size != 1:
        raise ValueError(f"hlg_to_graph: final-label arcs enter {finals.size} states, expected one")
    if np.any(np.isfinite(a.final) & (np.arange(a.num_states) != finals[0])):
        raise ValueError("hlg_to_graph: states other than the super-final one are final")
    ilabel = np.where(fin_arcs, FINAL, a.ilabel - 1).astype(np.int32)
    base = len(words)
    aux = None
    olabel = a.olabel.astype(np.int32)
    if np.any(olabel >= base):
        r = expand_compounds(olabel, base, compounds)
        aux = (r["row_splits"], r["values"])
    weight = (-a.cost).astype(np.float32)
    g = WfstGraph.from_arcs(a.src, a.dest, ilabel, np.where(olabel >= base, 0, olabel), weight,
                            num_states=a.num_states, start_state=a.start, final_state=int(finals[0]),
                            num_tokens=table.vocab_size, words=words, info=info, aux=aux)
    return _renumber_start_first(g).validate()


def _renumber_start_first(g: WfstGraph) -> WfstGraph:
    """Renumber states so start = 0 and final = last (k2's layout; keeps arcs and weights)."""
    N = g.num_states
    if g.start_state == 0 and g.final_state == N - 1:
        return g
    others = [s for s in range(N) if s not in (g.start_state, g.final_state)]
    perm = np.asarray([g.start_state] + others + [g.final_state], dtype=np.int64)  # new -> old
    new_of_old = np.empty(N, dtype=np.int64)
    new_of_old[perm] = np.arange(N)
    src = new_of_old[g.src()]
    aux = None
    if g.aux_splits is not None:
        aux = (np.asarray(g.aux_splits, dtype=np.int64), np.asarray(g.aux_words, dtype=np.int32))
    return WfstGraph.from_arcs(src, new_of_old[g.dest], g.ilabel, g.olabel, g.weight, num_states=N,
                               start_state=0, final_state=N - 1, num_tokens=g.num_tokens, words=g.words,
                               info=g.info, aux=aux)
