"""Thin helpers around kaldifst: FSTs <-> arrays, size logging.

Why these exist: kaldifst has no relabel/project and no fast bulk arc access from Python. Arc arrays are
read by writing a const FST with kaldifst and parsing it with the project's one OpenFst reader
(`decoders.openfst`, orders of magnitude faster than the arc iterator on million-arc graphs); FSTs are
(re)built from arrays by writing a vector FST with its writer and reading it back with kaldifst.
"""
from __future__ import annotations

import logging
import os
import tempfile

import kaldifst
import numpy as np

from decoders.openfst import FstArrays, read_openfst, write_openfst_vector

__all__ = ["FstArrays", "arrays_to_fst", "fst_size", "fst_to_arrays", "log_size", "read_fst_arrays"]

log = logging.getLogger(__name__)


def fst_to_arrays(fst) -> FstArrays:
    """Any kaldifst FST -> arrays (via a const-FST write; arcs in the FST's own per-state order)."""
    const = fst if isinstance(fst, kaldifst.StdConstFst) else kaldifst.StdConstFst(fst)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.fst")
        if not const.write(path):
            raise RuntimeError("fst_to_arrays: kaldifst failed to write a const FST")
        return read_openfst(path)


def read_fst_arrays(path) -> FstArrays:
    """Read a vector or const OpenFst file into arrays (the numpy reader; no kaldifst round trip)."""
    return read_openfst(path)


def arrays_to_fst(a: FstArrays) -> "kaldifst.StdVectorFst":
    """Arrays -> StdVectorFst with the same state ids, start state, arc order per state and bit-identical
    weights: written as an OpenFst binary vector FST with numpy (decoders.openfst.write_openfst_vector) and
    read back by kaldifst (much faster than compiling a text table for million-arc graphs)."""
    if not 0 <= a.start < a.num_states:
        raise ValueError(f"arrays_to_fst: start state {a.start} outside [0, {a.num_states})")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.fst")
        write_openfst_vector(path, a)
        fst = kaldifst.StdVectorFst.read(path)
    if fst is None:
        raise RuntimeError("arrays_to_fst: kaldifst could not read the vector FST written from arrays")
    return fst


def fst_size(fst) -> dict:
    a = fst_to_arrays(fst)
    return {
        "states": a.num_states,
        "arcs": a.num_arcs,
        "epsilon_arcs": int(np.count_nonzero(a.ilabel == 0)),
        "final_states": int(np.count_nonzero(np.isfinite(a.final))),
    }


def log_size(name: str, fst) -> dict:
    """Log and return the size of `fst` (icefall-style: after every FST step)."""
    size = fst_size(fst)
    log.info("%-24s states=%-9d arcs=%-10d eps_arcs=%d", name, size["states"], size["arcs"], size["epsilon_arcs"])
    return size
