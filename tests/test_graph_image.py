"""Binary graph image: lossless save/load (memory-mapped) and a validating loader that rejects corrupt or
truncated files with a message naming what is wrong (never a crash or an out-of-bounds read later)."""
import struct
import zlib

import numpy as np
import pytest

from decoders.graph import (
    EPSILON, FINAL, CorruptGraphError, WfstGraph, _HEADER_FMT, _HEADER_SIZE, _section_offsets,
)


def _toy_graph(with_eps=True, multiword=True) -> WfstGraph:
    # canonical arcs: state 0: [0 -blank(0)-> 0, 0 -a(1)-> 1, 0 -FINAL-> 3]; state 1: [1 -b(2)-> 2, 1 -eps-> 2];
    # state 2: [2 -FINAL-> 3]; row_splits [0, 3, 5, 6, 6]
    src = [0, 0, 1, 1, 2, 0]
    dest = [0, 1, 2, 2, 3, 3]
    il = [0, 1, 2, EPSILON if with_eps else 1, FINAL, FINAL]
    ol = [0, 1, 0, 2, 0, 0]
    w = [-0.1, -0.25, -1.5, -0.75, 0.0, -7.0]
    aux = [[], [1, 2] if multiword else [1], [], [2], [], []]
    return WfstGraph.from_arcs(src, dest, il, ol, w, num_states=4, start_state=0, final_state=3, num_tokens=3,
                               words=["<eps>", "hello", "world"], info={"kind": "toy"}, aux=aux).validate()


def _same(a: WfstGraph, b: WfstGraph):
    for f in ("num_states", "start_state", "final_state", "num_tokens"):
        assert getattr(a, f) == getattr(b, f), f
    for f in ("row_splits", "dest", "ilabel", "olabel"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert np.array_equal(np.asarray(a.weight, np.float32).view(np.int32), np.asarray(b.weight, np.float32).view(np.int32))
    for x, y in zip(a.aux_csr(), b.aux_csr()):
        assert np.array_equal(x, y)
    assert a.words == b.words


@pytest.mark.parametrize("mmap", [True, False])
def test_roundtrip(tmp_path, mmap):
    g = _toy_graph()
    g.save(tmp_path / "g.bin")
    h = WfstGraph.load(tmp_path / "g.bin", mmap=mmap)
    _same(g, h)
    assert h.info == {"kind": "toy"} and h.num_multiword_arcs == 1 and h.arc_words(1) == [1, 2]
    if mmap:
        assert isinstance(h.dest.base, np.memmap) or isinstance(h.dest, np.memmap) or h.dest.base is not None


def _sections(path):
    raw = bytearray(path.read_bytes())
    (magic, version, flags, N, A, start, final, V, W, X, WB, IB, crc) = struct.unpack_from(_HEADER_FMT, raw)
    layout, _ = _section_offsets(N, A, X, WB, IB)
    return raw, {name: (dt, off, n) for name, dt, off, n in layout}


def _fix_crc(raw):
    fields = list(struct.unpack_from(_HEADER_FMT, raw))
    fields[-1] = zlib.crc32(bytes(raw[_HEADER_SIZE:])) & 0xFFFFFFFF
    raw[: struct.calcsize(_HEADER_FMT)] = struct.pack(_HEADER_FMT, *fields)
    return raw


def _set(raw, secs, name, index, value):
    dt, off, n = secs[name]
    arr = np.frombuffer(raw, dtype=dt, count=n, offset=off).copy()
    arr[index] = value
    raw[off : off + arr.nbytes] = arr.tobytes()
    return _fix_crc(raw)


def _header(raw, field, value):
    names = ["magic", "version", "flags", "N", "A", "start", "final", "V", "W", "X", "WB", "IB", "crc"]
    fields = list(struct.unpack_from(_HEADER_FMT, raw))
    fields[names.index(field)] = value
    raw[: struct.calcsize(_HEADER_FMT)] = struct.pack(_HEADER_FMT, *fields)
    return raw


CORRUPTIONS = {
    # name: (mutation(raw, secs) -> bytes, expected message fragment)
    "truncated_header": (lambda r, s: r[:100], "truncated header"),
    "truncated_section": (lambda r, s: r[: s["weight"][1] + 4], "truncated: section weight"),
    "empty_file": (lambda r, s: b"", "truncated header"),
    "bad_magic": (lambda r, s: b"NOTAGRPH" + r[8:], "bad magic"),
    "bad_version": (lambda r, s: _header(r, "version", 99), "unsupported version"),
    "negative_count": (lambda r, s: _header(r, "A", -5), "num_arcs=-5"),
    "unknown_flags": (lambda r, s: _header(r, "flags", 0x80), "unknown header flags"),
    "checksum": (lambda r, s: (r.__setitem__(s["weight"][1], r[s["weight"][1]] ^ 0x40), r)[1], "checksum mismatch"),
    "start_out_of_range": (lambda r, s: _fix_crc(_header(r, "start", 17)), "start_state 17"),
    "final_out_of_range": (lambda r, s: _fix_crc(_header(r, "final", -1)), "final_state -1"),
    "dest_out_of_range": (lambda r, s: _set(r, s, "dest", 1, 99), "destination 99"),
    "negative_dest": (lambda r, s: _set(r, s, "dest", 0, -3), "destination -3"),
    "label_out_of_range": (lambda r, s: _set(r, s, "ilabel", 1, 7), "label 7 outside the vocabulary"),
    "bad_negative_label": (lambda r, s: _set(r, s, "ilabel", 1, -9), "label -9"),
    "row_splits_not_monotone": (lambda r, s: _set(r, s, "row_splits", 2, 2), "not monotone"),
    "row_splits_bad_end": (lambda r, s: _set(r, s, "row_splits", 4, 3), "row_splits must start at 0"),
    "final_arc_wrong_dest": (lambda r, s: _set(r, s, "dest", 5, 1), "FINAL arcs must enter"),
    "final_count": (lambda r, s: _set(r, s, "final_count", 0, 2), "final arc count"),
    "eps_count": (lambda r, s: _set(r, s, "eps_count", 1, 0), "epsilon arc count"),
    "word_out_of_range": (lambda r, s: _set(r, s, "olabel", 3, 50), "word label 50"),
    "aux_csr": (lambda r, s: _set(r, s, "aux_splits", 2, 9), "aux CSR malformed"),
    "aux_word": (lambda r, s: _set(r, s, "aux_words", 0, 70), "aux word id"),
    "nan_weight": (lambda r, s: _set(r, s, "weight", 2, np.nan), "NaN"),
    "canonical_order": (lambda r, s: _set(_set(r, s, "ilabel", 3, EPSILON), s, "ilabel", 4, 2), "canonical order"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_corruption_rejected(tmp_path, name):
    g = _toy_graph()
    path = tmp_path / "g.bin"
    g.save(path)
    raw, secs = _sections(path)
    mutate, fragment = CORRUPTIONS[name]
    path.write_bytes(bytes(mutate(raw, secs)))
    with pytest.raises(CorruptGraphError) as e:
        WfstGraph.load(path)
    msg = str(e.value)
    assert f"corrupt graph image {path}" in msg
    assert fragment in msg, msg


def test_at_least_ten_kinds():
    assert len(CORRUPTIONS) >= 10


def test_validate_in_memory():
    g = _toy_graph()
    g.dest = g.dest.copy()
    g.dest[0] = 12
    with pytest.raises(CorruptGraphError, match="destination 12"):
        g.validate()
    with pytest.raises(FileNotFoundError):
        WfstGraph.load("/nonexistent/graph.bin")


def test_save_refuses_invalid(tmp_path):
    g = _toy_graph()
    g.ilabel = g.ilabel.copy()
    g.ilabel[1] = 42
    with pytest.raises(CorruptGraphError):
        g.save(tmp_path / "x.bin")
    assert not (tmp_path / "x.bin").exists()
