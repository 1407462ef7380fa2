"""Binary graph image: lossless save/load (a private in-memory copy) and a validating loader that rejects
corrupt or truncated files with a message naming what is wrong (never a crash or an out-of-bounds read later)."""
import os
import pickle
import struct
import zlib

import numpy as np
import pytest

from decoders.graph import (
    EPSILON, FINAL, IMAGE_VERSION, CorruptGraphError, WfstGraph, _HEADER_FMT, _HEADER_SIZE, _header_crc,
    _section_offsets, image_version,
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


def test_roundtrip(tmp_path):
    g = _toy_graph()
    g.save(tmp_path / "g.bin")
    h = WfstGraph.load(tmp_path / "g.bin")
    _same(g, h)
    assert h.info == {"kind": "toy"} and h.num_multiword_arcs == 1 and h.arc_words(1) == [1, 2]
    assert image_version(tmp_path / "g.bin") == IMAGE_VERSION


_NAMES = ["magic", "version", "flags", "N", "A", "start", "final", "V", "W", "X", "WB", "IB", "crc", "head_crc"]


def _sections(path):
    raw = bytearray(path.read_bytes())
    f = dict(zip(_NAMES, struct.unpack_from(_HEADER_FMT, raw)))
    layout, _ = _section_offsets(f["N"], f["A"], f["X"], f["WB"], f["IB"])
    return raw, {name: (dt, off, n) for name, dt, off, n in layout}


def _fix_crc(raw):
    """Recompute both CRCs (what a deliberate forger would do: the loader must still catch the lie)."""
    fields = list(struct.unpack_from(_HEADER_FMT, raw))
    fields[-2] = zlib.crc32(bytes(raw[_HEADER_SIZE:])) & 0xFFFFFFFF
    raw[: struct.calcsize(_HEADER_FMT)] = struct.pack(_HEADER_FMT, *fields)
    struct.pack_into("<I", raw, struct.calcsize(_HEADER_FMT) - 4, _header_crc(bytes(raw[:_HEADER_SIZE])))
    return raw


def _set(raw, secs, name, index, value):
    dt, off, n = secs[name]
    arr = np.frombuffer(raw, dtype=dt, count=n, offset=off).copy()
    arr[index] = value
    raw[off : off + arr.nbytes] = arr.tobytes()
    return _fix_crc(raw)


def _header(raw, field, value, fix=True):
    """Edit one header field; fix: recompute the CRCs (so the semantic check behind them is what is tested)."""
    fields = list(struct.unpack_from(_HEADER_FMT, raw))
    fields[_NAMES.index(field)] = value
    raw[: struct.calcsize(_HEADER_FMT)] = struct.pack(_HEADER_FMT, *fields)
    return _fix_crc(raw) if fix else raw


CORRUPTIONS = {
    # name: (mutation(raw, secs) -> bytes, expected message fragment)
    "truncated_header": (lambda r, s: r[:100], "truncated header"),
    "truncated_section": (lambda r, s: r[: s["weight"][1] + 4], "truncated: section weight"),
    "empty_file": (lambda r, s: b"", "truncated header"),
    "bad_magic": (lambda r, s: b"NOTAGRPH" + r[8:], "bad magic"),
    "bad_version": (lambda r, s: _header(r, "version", 99), "unsupported version"),
    "aux_without_flag": (lambda r, s: _header(r, "flags", 1), "has-aux flag is clear"),
    "negative_count": (lambda r, s: _header(r, "A", -5), "num_arcs=-5"),
    "unknown_flags": (lambda r, s: _header(r, "flags", 0x80), "unknown header flags"),
    "checksum": (lambda r, s: (r.__setitem__(s["weight"][1], r[s["weight"][1]] ^ 0x40), r)[1], "checksum mismatch"),
    "header_checksum": (lambda r, s: _header(r, "start", 1, fix=False), "header checksum mismatch"),
    "header_padding": (lambda r, s: _fix_crc((r.__setitem__(200, 7), r)[1]), "header padding"),
    "appended_junk": (lambda r, s: r + b"junk", "unexpected bytes after the last section"),
    "start_out_of_range": (lambda r, s: _header(r, "start", 17), "start_state 17"),
    "final_out_of_range": (lambda r, s: _header(r, "final", -1), "final_state -1"),
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


@pytest.mark.parametrize("field,delta,what", [("start", 1, "start_state"), ("V", 1, "num_tokens"),
                                              ("WB", -1, "words_bytes")])
def test_header_edit_is_caught(tmp_path, field, delta, what):
    """Regression (issue 11): the header was outside the CRC, so start_state + 1, num_tokens + 1 and
    words_bytes - 1 (which turned '</s>' into '</s') were accepted. The header now has its own CRC."""
    g = _toy_graph()
    g.words = ["<eps>", "hello", "</s>"]
    path = tmp_path / "g.bin"
    g.save(path)
    raw = bytearray(path.read_bytes())
    value = dict(zip(_NAMES, struct.unpack_from(_HEADER_FMT, raw)))[field]
    path.write_bytes(bytes(_header(raw, field, value + delta, fix=False)))
    with pytest.raises(CorruptGraphError, match="header checksum mismatch"):
        WfstGraph.load(path)


def test_old_version_names_the_rebuild_command(tmp_path):
    """Images of format version 1 (header outside the CRC) are refused with one line saying how to rebuild."""
    path = tmp_path / "g.bin"
    _toy_graph().save(path)
    raw = bytearray(path.read_bytes())
    struct.pack_into("<I", raw, 8, 1)
    path.write_bytes(bytes(raw))
    assert image_version(path) == 1
    with pytest.raises(CorruptGraphError) as e:
        WfstGraph.load(path)
    msg = str(e.value)
    assert "version 1" in msg and "python -m recipes.build_graphs" in msg and "\n" not in msg


def test_load_is_a_private_copy(tmp_path):
    """Regression (issue 11): load memory-mapped the file, so rewriting it afterwards (save() wrote in place,
    a rebuild does) gave SIGBUS or silently changed weights under the decoder. The loaded graph must not
    change whatever happens to the file."""
    path = tmp_path / "g.bin"
    g = _toy_graph()
    g.save(path)
    h = WfstGraph.load(path)
    weights = h.weight.copy()
    assert not isinstance(h.weight, np.memmap) and not isinstance(h.weight.base, np.memmap)
    # rewrite in place with other weights, then truncate in place (what SIGBUSed a mapping)
    g2 = _toy_graph()
    g2.weight = g2.weight + np.float32(3.0)
    with open(path, "r+b") as f:
        other = tmp_path / "other.bin"
        g2.save(other)
        f.write(other.read_bytes())
        f.flush()
        f.truncate(10)
    assert np.array_equal(h.weight, weights)
    _same(g, h)


def test_save_replaces_the_file_atomically(tmp_path):
    """Regression (issue 11): save() wrote in place; it now writes a temporary file in the same directory and
    renames it, so an old inode (e.g. held by a reader) is never modified and no temporary is left behind."""
    path = tmp_path / "g.bin"
    g = _toy_graph()
    g.save(path)
    with open(path, "rb") as held:  # a reader that opened the old file
        before = os.fstat(held.fileno()).st_ino
        old_bytes = path.read_bytes()
        g2 = _toy_graph()
        g2.weight = g2.weight - np.float32(1.0)
        g2.save(path)
        assert held.read() == old_bytes  # the old inode is untouched
    assert os.stat(path).st_ino != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.bin"]
    _same(g2, WfstGraph.load(path))
    bad = _toy_graph()
    bad.ilabel = bad.ilabel.copy()
    bad.ilabel[1] = 42
    with pytest.raises(CorruptGraphError):
        bad.save(path)
    _same(g2, WfstGraph.load(path))  # a refused save leaves the previous image in place


class _Payload:
    """Unpickling this runs `open(marker, 'w')` (what a crafted HLG.pt would do with a worse command)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_from_k2_refuses_a_malicious_pickle(tmp_path):
    """Regression (issue 11): from_k2 read user files with torch.load(weights_only=False), so a crafted
    HLG.pt ran its payload. It now loads with weights_only=True: the file is refused and nothing runs."""
    marker = tmp_path / "pwned"
    path = tmp_path / "HLG.pt"
    with open(path, "wb") as f:
        pickle.dump({"arcs": _Payload(str(marker))}, f)
    with pytest.raises(ValueError, match="weights_only=True") as e:
        WfstGraph.from_k2(path, num_tokens=3)
    assert "\n" not in str(e.value)
    assert not marker.exists()
    # a legitimate file still reads
    g = WfstGraph.from_k2({"arcs": _toy_k2_arcs()}, num_tokens=3)
    import torch
    torch.save({"arcs": torch.from_numpy(_toy_k2_arcs())}, tmp_path / "ok.pt")
    _same(g, WfstGraph.from_k2(tmp_path / "ok.pt", num_tokens=3))


def _toy_k2_arcs():
    arcs = np.array([[0, 1, 2, 0], [1, 1, 0, 0], [1, 2, -1, 0]], dtype=np.int32)
    arcs[:, 3] = np.array([-0.5, -1.25, 0.0], dtype=np.float32).view(np.int32)
    return arcs
