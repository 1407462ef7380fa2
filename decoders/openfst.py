"""The one OpenFst reader/writer of the project (numpy only): binary FSTs and text symbol tables.

`decoders` needs it itself (`WfstGraph.from_openfst` / `write_openfst` read and write the TLG.fst that Riva
and Kaldi decoders load), and `recipes` uses it for graph construction (kaldifst has no bulk arc access
from Python: recipes write a const FST with kaldifst and parse it here, and build FSTs by writing a vector
FST here and reading it with kaldifst). Keeping one implementation means one place knows OpenFst's layout.

- `read_openfst(path_or_bytes) -> FstArrays`: binary vector or const FST, standard (tropical) arcs,
  versions 1 (aligned const) and 2; bounds-checked, one-line ValueError on anything malformed.
- `write_openfst_vector(path, arrays)`: binary vector FST (version 2, no symbol tables); arcs grouped by
  source state keeping their given relative order.
- `read_symbol_table(path)` / `write_symbol_table(path, symbols)`: OpenFst text symbol tables
  ("symbol id" per line; words.txt, tokens.txt).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, Union

import numpy as np

FST_MAGIC = 2125659606
_CONST_STATE = np.dtype([("final", "<f4"), ("pos", "<u4"), ("narcs", "<u4"), ("nieps", "<u4"), ("noeps", "<u4")])
_VECTOR_STATE = np.dtype([("final", "<f4"), ("narcs", "<i8")])
_STD_ARC = np.dtype([("ilabel", "<i4"), ("olabel", "<i4"), ("weight", "<f4"), ("nextstate", "<i4")])


@dataclass
class FstArrays:
    """An FST as flat arrays (tropical costs; `final` is +inf for non-final states). Arcs are grouped by
    source state in the FST's own per-state order."""

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


def read_openfst(source: Union[str, os.PathLike, bytes, bytearray, memoryview]) -> FstArrays:
    """Parse an OpenFst binary vector or const FST (standard arcs) from a path or its bytes."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        buf, name = bytes(source), "<bytes>"
    else:
        name = str(source)
        try:
            buf = Path(source).read_bytes()
        except OSError as e:
            raise ValueError(f"read_openfst: cannot read {name}: {e.strerror or e}") from None
    where = f"read_openfst: {name}"

    def need(off: int, n: int, what: str) -> None:
        if n < 0 or off + n > len(buf):
            raise ValueError(f"{where}: truncated ({what} needs bytes [{off}, {off + n}), the file has {len(buf)})")

    def read_str(off: int, what: str) -> tuple[str, int]:
        need(off, 4, what)
        (n,) = struct.unpack_from("<i", buf, off)
        if not 0 <= n <= 256:
            raise ValueError(f"{where}: {what} has length {n} (not an OpenFst header)")
        need(off + 4, n, what)
        try:
            return buf[off + 4 : off + 4 + n].decode("ascii"), off + 4 + n
        except UnicodeDecodeError:
            raise ValueError(f"{where}: {what} is not ASCII (not an OpenFst header)") from None

    if len(buf) < 4 or struct.unpack_from("<i", buf, 0)[0] != FST_MAGIC:
        raise ValueError(f"{where} is not an OpenFst binary FST (bad magic)")
    fst_type, off = read_str(4, "fst type")
    arc_type, off = read_str(off, "arc type")
    if arc_type != "standard":
        raise ValueError(f"{where}: arc type {arc_type!r}, expected 'standard' (tropical)")
    need(off, 40, "header")
    version, flags, _props, start, nstates, narcs = struct.unpack_from("<iiQqqq", buf, off)
    off += 40
    if flags & 0x3:
        raise ValueError(f"{where}: embedded symbol tables are not supported")
    if nstates < 0 or narcs < 0 or nstates > 2**31 - 1 or narcs > 2**31 - 1:
        raise ValueError(f"{where}: header says {nstates} states and {narcs} arcs (out of range)")
    if fst_type == "const":
        if version == 1:  # aligned layout
            off = (off + 15) // 16 * 16
        need(off, nstates * _CONST_STATE.itemsize, "states")
        states = np.frombuffer(buf, dtype=_CONST_STATE, count=nstates, offset=off)
        off += nstates * _CONST_STATE.itemsize
        if version == 1:
            off = (off + 15) // 16 * 16
        need(off, narcs * _STD_ARC.itemsize, "arcs")
        arcs = np.frombuffer(buf, dtype=_STD_ARC, count=narcs, offset=off)
        narcs_per = states["narcs"].astype(np.int64)
        if int(narcs_per.sum()) != narcs:
            raise ValueError(f"{where}: per-state arc counts sum to {int(narcs_per.sum())}, header says {narcs}")
        final = states["final"].astype(np.float32)
    elif fst_type == "vector":
        final = np.empty(nstates, dtype=np.float32)
        narcs_per = np.empty(nstates, dtype=np.int64)
        chunks = []
        for s in range(nstates):
            need(off, 12, f"state {s}")
            w, n = struct.unpack_from("<fq", buf, off)
            off += 12
            need(off, 16 * n, f"arcs of state {s}")
            final[s] = w
            narcs_per[s] = n
            chunks.append((off, n))
            off += 16 * n
        arcs = np.concatenate([np.frombuffer(buf, dtype=_STD_ARC, count=n, offset=o) for o, n in chunks]) \
            if chunks else np.zeros(0, dtype=_STD_ARC)
    else:
        raise ValueError(f"{where}: fst type {fst_type!r} is not vector/const")
    dest = arcs["nextstate"].astype(np.int32)
    if dest.size and (dest.min() < 0 or dest.max() >= nstates):
        raise ValueError(f"{where}: an arc enters a state outside [0, {nstates})")
    if nstates and not 0 <= start < nstates:
        raise ValueError(f"{where}: start state {start} outside [0, {nstates})")
    return FstArrays(
        start=int(start), num_states=int(nstates), src=np.repeat(np.arange(nstates, dtype=np.int32), narcs_per),
        dest=dest, ilabel=arcs["ilabel"].astype(np.int32), olabel=arcs["olabel"].astype(np.int32),
        cost=arcs["weight"].astype(np.float32), final=final,
    )


def write_openfst_vector(path: Union[str, os.PathLike], fst: FstArrays) -> None:
    """Write an OpenFst binary vector FST (standard arcs, version 2, no symbol tables); arcs grouped by
    source state keeping their given relative order."""
    N = int(fst.num_states)
    src = np.asarray(fst.src, dtype=np.int64)
    final = np.asarray(fst.final, dtype=np.float32)
    if final.shape != (N,):
        raise ValueError(f"write_openfst_vector: final has shape {final.shape}, expected ({N},)")
    if src.size and (src.min() < 0 or src.max() >= N):
        raise ValueError(f"write_openfst_vector: a source state is outside [0, {N})")
    order = np.argsort(src, kind="stable")
    counts = np.bincount(src, minlength=N)
    arcs = np.zeros(src.shape[0], dtype=_STD_ARC)
    arcs["ilabel"] = np.asarray(fst.ilabel, np.int32)[order]
    arcs["olabel"] = np.asarray(fst.olabel, np.int32)[order]
    arcs["weight"] = np.asarray(fst.cost, np.float32)[order]
    arcs["nextstate"] = np.asarray(fst.dest, np.int32)[order]
    header = struct.pack("<i", FST_MAGIC)
    for s in ("vector", "standard"):
        header += struct.pack("<i", len(s)) + s.encode()
    # version 2, flags 0, properties 0 (unknown: readers recompute), start, numstates, numarcs
    header += struct.pack("<iiQqqq", 2, 0, 0, int(fst.start), N, int(src.shape[0]))
    state_head = np.zeros(N, dtype=_VECTOR_STATE)
    state_head["final"], state_head["narcs"] = final, counts
    parts = [header]
    raw_arcs = arcs.tobytes()
    pos = 0
    for s in range(N):
        parts.append(state_head[s : s + 1].tobytes())
        n = int(counts[s]) * _STD_ARC.itemsize
        parts.append(raw_arcs[pos : pos + n])
        pos += n
    with open(path, "wb") as f:
        f.write(b"".join(parts))


def read_symbol_table(path: Union[str, os.PathLike], *, allow_gaps: bool = False) -> list[str]:
    """OpenFst text symbol table ("symbol id" lines) -> list indexed by id.

    allow_gaps: ids need not be dense; a missing id i reads as "<unused{i}>" (foreign tables). Without it a
    gap is an error (every table this project writes is dense)."""
    table: dict[int, str] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2 or not fields[1].isdigit():
                raise ValueError(f"read_symbol_table: {path}:{lineno}: expected 'symbol id', got {line.strip()!r}")
            i = int(fields[1])
            if i in table:
                raise ValueError(f"read_symbol_table: {path}:{lineno}: id {i} appears twice")
            table[i] = fields[0]
    n = max(table) + 1 if table else 0
    if not allow_gaps and len(table) != n:
        raise ValueError(f"read_symbol_table: {path}: ids are not dense 0..{n - 1}")
    return [table.get(i, f"<unused{i}>") for i in range(n)]


def write_symbol_table(path: Union[str, os.PathLike], symbols: Sequence[str]) -> None:
    """Write "symbol id" lines (id = position in `symbols`)."""
    for s in symbols:
        if not s or any(c.isspace() for c in s):
            raise ValueError(f"write_symbol_table: symbol {s!r} is empty or contains whitespace")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{s} {i}\n" for i, s in enumerate(symbols))
