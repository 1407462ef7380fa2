"""Thin helpers around kaldifst: arrays <-> FSTs, fast arc extraction, size logging.

Why these exist: kaldifst has no relabel/project and no fast bulk arc access from Python. Arc arrays are
read by writing a const FST and parsing its binary layout with numpy (orders of magnitude faster than the
arc iterator on million-arc graphs); FSTs are (re)built from arrays through `kaldifst.compile` on a text
table, which is how we relabel (e.g. `#k` -> epsilon) without hand-writing any FST algorithm.
"""
from __future__ import annotations

import logging
import os
import struct
import tempfile
from dataclasses import dataclass

import kaldifst
import numpy as np

log = logging.getLogger(__name__)

_FST_MAGIC = 2125659606
_STATE_DTYPE = np.dtype([("final", "<f4"), ("pos", "<u4"), ("narcs", "<u4"), ("nieps", "<u4"), ("noeps", "<u4")])
_ARC_DTYPE = np.dtype([("ilabel", "<i4"), ("olabel", "<i4"), ("weight", "<f4"), ("nextstate", "<i4")])


@dataclass
class FstArrays:
    """An FST as flat arrays (tropical costs; `final` is +inf for non-final states)."""

    start: int
    num_states: int
    src: np.ndarray  # int32 (A,)
    dest: np.ndarray  # int32 (A,)
    ilabel: np.ndarray  # int32 (A,)
    olabel: np.ndarray  # int32 (A,)
    cost: np.ndarray  # float32 (A,)
    final: np.ndarray  # float32 (S,)

    @property
    def num_arcs(self) -> int:
        return int(self.src.shape[0])


def _read_str(buf: bytes, off: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<i", buf, off)
    return buf[off + 4 : off + 4 + n].decode(), off + 4 + n


def parse_const_fst(buf: bytes) -> FstArrays:
    """Parse OpenFst's binary const FST (standard arcs) into arrays."""
    (magic,) = struct.unpack_from("<i", buf, 0)
    if magic != _FST_MAGIC:
        raise ValueError("parse_const_fst: not an OpenFst binary file (bad magic)")
    fst_type, off = _read_str(buf, 4)
    arc_type, off = _read_str(buf, off)
    if fst_type != "const" or arc_type != "standard":
        raise ValueError(f"parse_const_fst: expected const/standard, got {fst_type}/{arc_type}")
    version, flags, _props, start, nstates, narcs = struct.unpack_from("<iiQqqq", buf, off)
    off += 4 + 4 + 8 + 8 + 8 + 8
    if flags & 0x3:
        raise ValueError("parse_const_fst: FSTs with embedded symbol tables are not supported here")
    if version == 1:  # aligned layout
        off = (off + 15) // 16 * 16
    states = np.frombuffer(buf, dtype=_STATE_DTYPE, count=nstates, offset=off)
    off += nstates * _STATE_DTYPE.itemsize
    if version == 1:
        off = (off + 15) // 16 * 16
    arcs = np.frombuffer(buf, dtype=_ARC_DTYPE, count=narcs, offset=off)
    src = np.repeat(np.arange(nstates, dtype=np.int32), states["narcs"].astype(np.int64))
    return FstArrays(
        start=int(start),
        num_states=int(nstates),
        src=src,
        dest=arcs["nextstate"].astype(np.int32),
        ilabel=arcs["ilabel"].astype(np.int32),
        olabel=arcs["olabel"].astype(np.int32),
        cost=arcs["weight"].astype(np.float32),
        final=states["final"].astype(np.float32),
    )


def fst_to_arrays(fst) -> FstArrays:
    """Any kaldifst FST -> arrays (via a const-FST write; arcs in the FST's own per-state order)."""
    const = fst if isinstance(fst, kaldifst.StdConstFst) else kaldifst.StdConstFst(fst)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.fst")
        if not const.write(path):
            raise RuntimeError("fst_to_arrays: kaldifst failed to write a const FST")
        with open(path, "rb") as f:
            buf = f.read()
    return parse_const_fst(buf)


def read_fst_arrays(path) -> FstArrays:
    """Read a vector or const OpenFst file into arrays (kaldifst's vector reader returns None on const)."""
    fst = kaldifst.StdVectorFst.read(str(path))
    if fst is None:
        fst = kaldifst.StdConstFst.read(str(path))
    if fst is None:
        raise ValueError(f"read_fst_arrays: {path} is not a readable OpenFst vector/const FST (standard arcs)")
    return fst_to_arrays(fst)


def arrays_to_fst(a: FstArrays) -> "kaldifst.StdVectorFst":
    """Arrays -> StdVectorFst with the same state ids, start state, arc order per state and bit-identical
    weights: written as an OpenFst binary vector FST with numpy (decoders.graph.write_openfst_vector) and
    read back by kaldifst (much faster than compiling a text table for million-arc graphs)."""
    from decoders.graph import write_openfst_vector

    if not 0 <= a.start < a.num_states:
        raise ValueError(f"arrays_to_fst: start state {a.start} outside [0, {a.num_states})")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.fst")
        write_openfst_vector(path, start=a.start, final=np.asarray(a.final, np.float32),
                             src=np.asarray(a.src, np.int64), dest=np.asarray(a.dest, np.int32),
                             ilabel=np.asarray(a.ilabel, np.int32), olabel=np.asarray(a.olabel, np.int32),
                             cost=np.asarray(a.cost, np.float32))
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
