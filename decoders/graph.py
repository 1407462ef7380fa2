"""`WfstGraph`: the decoding graph as the WFST decoder sees it (in memory and as a binary image).

Conventions (fixed; every importer/exporter maps into them):
- Scores are log-domain, higher is better (k2's convention). OpenFst tropical costs are negated on import.
- `ilabel[a]` is the log-prob COLUMN the arc reads (0 <= ilabel < num_tokens), or
  `EPSILON` (-2) for an arc that consumes no frame (TLG epsilons), or `FINAL` (-1) for an arc into the
  single final state (k2: "label -1 enters the final state"; it carries the state's final weight).
- `olabel[a]` is the word id output by the arc, 0 meaning no word (epsilon). `words[i]` is its string.
- Arcs are stored CSR by source state in a canonical order: per state, emitting arcs (sorted by ilabel,
  then dest), then epsilon arcs, then final arcs. `row_splits` has num_states + 1 entries.
- `final_state` has no out-arcs; it is the only state FINAL arcs enter, and only FINAL arcs enter it.
- Aux CSR (k2's ragged aux_labels): an arc may output several words (epsilon-free HLGs fold the word of a
  removed epsilon arc into the next arc, as k2.remove_epsilon does). `aux_splits`/`aux_words` hold them;
  when None, arc a outputs [olabel[a]] if olabel[a] != 0 else []. Invariant: olabel[a] is the first word
  of arc a (0 when it has none), so code that only follows `olabel` sees every single-word arc exactly.

Formats (all lossless: same arcs, bit-identical weights, same word labels):
- binary image (`save`/`load`): see `IMAGE_LAYOUT`; read into memory (a private copy), header and sections
  CRC-checked and every index validated on load; `save` replaces the file atomically.
- k2 dict (`from_k2`/`to_k2_dict`): arcs [A, 4] int32 (src, dest, label, score bits), aux_labels [A].
- OpenFst (`from_openfst`/`write_openfst`): Kaldi numbering (<eps> = 0, token = column + 1, #k
  disambiguation ilabels -> EPSILON on import), tropical costs = -scores, finals as final weights.
- k2 text (`write_k2_text`/`from_k2_text`): "src dest label aux score" lines, what k2py reads.
"""
from __future__ import annotations

import json
import os
import struct
import threading
import weakref
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from decoders.openfst import FstArrays, read_openfst, read_symbol_table, write_openfst_vector, write_symbol_table

FINAL = -1
EPSILON = -2

# ---------------------------------------------------------------------------------------------------------
# Binary image layout (little endian). Header: 256 bytes; then sections, each 64-byte aligned, in order.
IMAGE_MAGIC = b"WFSTIMG1"
# Version 2: the header is covered by its own CRC (version 1 checked only the sections, so an edited
# start_state / num_tokens / words_bytes was accepted) and no byte may follow the last section.
IMAGE_VERSION = 2
REBUILD_COMMAND = "python -m recipes.build_graphs ..."  # the build rebuilds stale-version images by itself
_HEADER_SIZE = 256
_ALIGN = 64
# magic, version, flags, num_states, num_arcs, start, final, num_tokens, num_words, aux_size,
# words_bytes, info_bytes, sections_crc32, header_crc32; the rest of the 256 bytes is zero
_HEADER_FMT = "<8sIIqqqqqqqqqII"
_HEADER_CRC_OFFSET = struct.calcsize(_HEADER_FMT) - 4
_FLAG_HAS_EPS = 1
_FLAG_HAS_AUX = 2
_SECTIONS = (
    # name, dtype, length expression in terms of (N, A, X, WB, IB)
    ("row_splits", "<i4", lambda N, A, X, WB, IB: N + 1),
    ("final_count", "<i4", lambda N, A, X, WB, IB: N),
    ("eps_count", "<i4", lambda N, A, X, WB, IB: N),
    ("dest", "<i4", lambda N, A, X, WB, IB: A),
    ("ilabel", "<i4", lambda N, A, X, WB, IB: A),
    ("olabel", "<i4", lambda N, A, X, WB, IB: A),
    ("weight", "<f4", lambda N, A, X, WB, IB: A),
    ("aux_splits", "<i4", lambda N, A, X, WB, IB: A + 1),
    ("aux_words", "<i4", lambda N, A, X, WB, IB: X),
    ("words", "u1", lambda N, A, X, WB, IB: WB),
    ("info", "u1", lambda N, A, X, WB, IB: IB),
)
IMAGE_LAYOUT = (
    "header[256]: magic 'WFSTIMG1', u32 version (2), u32 flags (1 has-eps, 2 has-aux), i64 num_states, "
    "num_arcs, start_state, final_state, num_tokens, num_words, aux_size, words_bytes, info_bytes, "
    "u32 crc32(sections), u32 crc32(the 256 header bytes with this field zeroed), zero padding; then "
    "64-byte aligned sections: row_splits i32[N+1], final_count i32[N], "
    "eps_count i32[N], dest i32[A], ilabel i32[A], olabel i32[A], weight f32[A], aux_splits i32[A+1], "
    "aux_words i32[X], words utf-8 ('\\n'-joined), info utf-8 JSON; the file ends with the last section"
)


def _header_crc(header: bytes) -> int:
    """CRC32 of the 256 header bytes with the header-CRC field itself zeroed."""
    h = bytearray(header[:_HEADER_SIZE])
    h[_HEADER_CRC_OFFSET : _HEADER_CRC_OFFSET + 4] = b"\0\0\0\0"
    return zlib.crc32(bytes(h)) & 0xFFFFFFFF


def image_version(path: Union[str, Path]) -> Optional[int]:
    """Format version of the graph image at `path` (None: missing, or not a graph image). Lets a build
    stage rebuild images written by an older version instead of skipping them."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return None
    if len(head) < 12 or head[:8] != IMAGE_MAGIC:
        return None
    return struct.unpack_from("<I", head, 8)[0]


def _write_atomically(path: Union[str, Path], chunks: Sequence[bytes]) -> None:
    """Write `chunks` to a temporary file next to `path` and rename it over `path`: a reader never sees a
    half-written file, and a process that loaded the old file keeps its own copy (loads are private)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    # os.open with 0o666 lets the umask decide the mode, as a plain open() would
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class CorruptGraphError(ValueError):
    """A graph image (or in-memory graph) violates an invariant the decoder relies on."""


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _section_offsets(N: int, A: int, X: int, WB: int, IB: int) -> tuple[list[tuple[str, np.dtype, int, int]], int]:
    out = []
    off = _HEADER_SIZE
    for name, dt, length in _SECTIONS:
        dt = np.dtype(dt)
        n = int(length(N, A, X, WB, IB))
        out.append((name, dt, off, n))
        off = _align(off + n * dt.itemsize)
    return out, off


# aux_csr() of graphs without multi-word arcs, derived from olabel once per graph (kept out of the graph object; an
# entry leaves with its graph)
_aux_csr_cache: dict[int, tuple] = {}
_aux_csr_lock = threading.Lock()


@dataclass
class WfstGraph:
    num_states: int
    start_state: int
    final_state: int
    num_tokens: int  # V: number of log-prob columns the graph reads
    row_splits: np.ndarray  # int32 (num_states + 1,)
    dest: np.ndarray  # int32 (num_arcs,)
    ilabel: np.ndarray  # int32 (num_arcs,): column, EPSILON or FINAL
    olabel: np.ndarray  # int32 (num_arcs,): word id, 0 = none
    weight: np.ndarray  # float32 (num_arcs,): log-domain score
    words: Optional[list[str]] = None  # word id -> string (id 0 = "<eps>")
    info: dict = field(default_factory=dict)  # provenance (topology, kind, build info)
    aux_splits: Optional[np.ndarray] = None  # int32 (num_arcs + 1,): ragged words per arc (None: olabel)
    aux_words: Optional[np.ndarray] = None  # int32 (aux_size,)

    @property
    def num_arcs(self) -> int:
        return int(self.dest.shape[0])

    @property
    def num_epsilon_arcs(self) -> int:
        return int(np.count_nonzero(self.ilabel == EPSILON))

    @property
    def num_final_arcs(self) -> int:
        return int(np.count_nonzero(self.ilabel == FINAL))

    @property
    def num_words(self) -> int:
        """Size of the word-id space (len(words), else 1 + largest id seen)."""
        if self.words is not None:
            return len(self.words)
        top = int(self.olabel.max()) if self.num_arcs else 0
        if self.aux_words is not None and self.aux_words.size:
            top = max(top, int(self.aux_words.max()))
        return top + 1

    # ---- aux CSR -------------------------------------------------------------------------------------
    def aux_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(aux_splits (A+1,), aux_words) -- derived from olabel when the graph has no multi-word arcs (computed once
        per olabel array: the lattice code asks for it per utterance)."""
        if self.aux_splits is not None:
            return self.aux_splits, self.aux_words
        key = id(self)
        with _aux_csr_lock:
            hit = _aux_csr_cache.get(key)
        if hit is not None and hit[0] is self.olabel:
            return hit[1], hit[2]
        has = (self.olabel != 0).astype(np.int64)
        splits = np.zeros(self.num_arcs + 1, dtype=np.int32)
        np.cumsum(has, out=splits[1:])
        words = self.olabel[self.olabel != 0].astype(np.int32)
        with _aux_csr_lock:
            if key not in _aux_csr_cache:
                weakref.finalize(self, _aux_csr_cache.pop, key, None)
            _aux_csr_cache[key] = (self.olabel, splits, words)
        return splits, words

    def arc_words(self, arc: int) -> list[int]:
        """Word ids output by `arc`, in order."""
        if self.aux_splits is None:
            w = int(self.olabel[arc])
            return [w] if w else []
        return [int(x) for x in self.aux_words[self.aux_splits[arc] : self.aux_splits[arc + 1]]]

    @property
    def num_multiword_arcs(self) -> int:
        if self.aux_splits is None:
            return 0
        return int(np.count_nonzero(np.diff(self.aux_splits) > 1))

    def src(self) -> np.ndarray:
        """Source state of every arc (int32 (A,))."""
        return np.repeat(np.arange(self.num_states, dtype=np.int32), np.diff(self.row_splits).astype(np.int64))

    # ---- construction ------------------------------------------------------------------------------------
    @classmethod
    def from_arcs(
        cls,
        src,
        dest,
        ilabel,
        olabel,
        weight,
        *,
        num_states: int,
        start_state: int,
        final_state: int,
        num_tokens: int,
        words: Optional[list[str]] = None,
        info: Optional[dict] = None,
        aux: Optional[Sequence[Sequence[int]]] = None,
    ) -> "WfstGraph":
        """Build from an unordered arc list, putting arcs into the canonical CSR order.

        aux: optional per-arc word lists (ragged aux labels); when given, olabel is recomputed as the first
        word of each arc, and the aux CSR is kept only if some arc has more than one word.
        """
        src = np.asarray(src, dtype=np.int64)
        dest = np.asarray(dest, dtype=np.int32)
        ilabel = np.asarray(ilabel, dtype=np.int32)
        olabel = np.asarray(olabel, dtype=np.int32)
        weight = np.asarray(weight, dtype=np.float32)
        n = src.shape[0]
        if not (dest.shape[0] == ilabel.shape[0] == olabel.shape[0] == weight.shape[0] == n):
            raise ValueError("from_arcs: src, dest, ilabel, olabel and weight must have the same length")
        if n and (src.min() < 0 or src.max() >= num_states):
            raise ValueError(f"from_arcs: source state out of range [0, {num_states})")
        # group: 0 emitting, 1 epsilon, 2 final
        group = np.where(ilabel >= 0, 0, np.where(ilabel == EPSILON, 1, 2))
        order = np.lexsort((dest, ilabel, group, src))
        counts = np.bincount(src, minlength=num_states)
        row_splits = np.zeros(num_states + 1, dtype=np.int64)
        np.cumsum(counts, out=row_splits[1:])
        aux_splits = aux_words = None
        olabel = olabel[order]
        if aux is not None:
            if isinstance(aux, tuple) and len(aux) == 2 and hasattr(aux[0], "shape"):
                splits, vals = np.asarray(aux[0], dtype=np.int64), np.asarray(aux[1], dtype=np.int32)
            else:
                if len(aux) != n:
                    raise ValueError(f"from_arcs: aux has {len(aux)} entries, expected one per arc ({n})")
                lens0 = np.fromiter((len(x) for x in aux), dtype=np.int64, count=n)
                splits = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(lens0, out=splits[1:])
                vals = np.fromiter((w for x in aux for w in x), dtype=np.int32, count=int(splits[-1]))
            if splits.shape[0] != n + 1 or splits[0] != 0 or splits[-1] != vals.shape[0]:
                raise ValueError("from_arcs: aux CSR must have num_arcs + 1 splits covering the values")
            new_splits, new_vals = _permute_csr(splits, vals, order)
            lens = np.diff(new_splits)
            olabel = np.zeros(n, dtype=np.int32)
            nz = lens > 0
            olabel[nz] = new_vals[new_splits[:-1][nz]]
            if n and lens.max() > 1:
                aux_splits, aux_words = new_splits.astype(np.int32), new_vals
        graph = cls(
            num_states=int(num_states),
            start_state=int(start_state),
            final_state=int(final_state),
            num_tokens=int(num_tokens),
            row_splits=row_splits.astype(np.int32),
            dest=dest[order],
            ilabel=ilabel[order],
            olabel=olabel,
            weight=weight[order],
            words=words,
            info=dict(info or {}),
            aux_splits=aux_splits,
            aux_words=aux_words,
        )
        return graph

    # ---- validation ---------------------------------------------------------------------------------
    def validate(self) -> "WfstGraph":
        """Check every invariant the decoder follows without a check; raise CorruptGraphError naming it."""
        aux_splits, aux_words = (self.aux_splits, self.aux_words) if self.aux_splits is not None else (None, None)
        _validate_arrays(
            num_states=self.num_states,
            start_state=self.start_state,
            final_state=self.final_state,
            num_tokens=self.num_tokens,
            num_words=self.num_words,
            row_splits=self.row_splits,
            dest=self.dest,
            ilabel=self.ilabel,
            olabel=self.olabel,
            weight=self.weight,
            aux_splits=aux_splits,
            aux_words=aux_words,
            final_count=None,
            eps_count=None,
        )
        if self.words is not None and (not self.words or self.words[0] != "<eps>"):
            raise CorruptGraphError("corrupt graph: words[0] must be '<eps>'")
        return self

    # ---- binary image ----------------------------------------------------------------------------------
    def save(self, path: Union[str, Path]) -> None:
        """Write the binary image (layout: IMAGE_LAYOUT). The graph is validated first. The file is written
        under a temporary name in the same directory and renamed over `path`, so rewriting an image that
        some process has loaded (or is loading) never changes what that process holds."""
        self.validate()
        N, A = self.num_states, self.num_arcs
        src = self.src()
        final_count = np.bincount(src[self.ilabel == FINAL], minlength=N).astype(np.int32)
        eps_count = np.bincount(src[self.ilabel == EPSILON], minlength=N).astype(np.int32)
        aux_splits, aux_words = self.aux_csr()
        words = self.words if self.words is not None else ["<eps>"] + [str(i) for i in range(1, self.num_words)]
        for w in words:
            if "\n" in w:
                raise ValueError(f"save: word {w!r} contains a newline")
        words_blob = "\n".join(words).encode("utf-8")
        info_blob = json.dumps(self.info, sort_keys=True, default=str).encode("utf-8")
        X, WB, IB = int(aux_words.shape[0]), len(words_blob), len(info_blob)
        layout, total = _section_offsets(N, A, X, WB, IB)
        data = {
            "row_splits": self.row_splits,
            "final_count": final_count,
            "eps_count": eps_count,
            "dest": self.dest,
            "ilabel": self.ilabel,
            "olabel": self.olabel,
            "weight": self.weight,
            "aux_splits": aux_splits,
            "aux_words": aux_words,
            "words": np.frombuffer(words_blob, dtype=np.uint8),
            "info": np.frombuffer(info_blob, dtype=np.uint8),
        }
        body = bytearray(total - _HEADER_SIZE)
        for name, dt, off, n in layout:
            arr = np.ascontiguousarray(data[name], dtype=dt)
            if arr.shape[0] != n:
                raise AssertionError(f"save: section {name} has {arr.shape[0]} entries, expected {n}")
            raw = arr.tobytes()
            body[off - _HEADER_SIZE : off - _HEADER_SIZE + len(raw)] = raw
        crc = zlib.crc32(bytes(body)) & 0xFFFFFFFF
        flags = (_FLAG_HAS_EPS if self.num_epsilon_arcs else 0) | (_FLAG_HAS_AUX if self.aux_splits is not None else 0)
        header = struct.pack(
            _HEADER_FMT, IMAGE_MAGIC, IMAGE_VERSION, flags, N, A, self.start_state, self.final_state,
            self.num_tokens, len(words), X, WB, IB, crc, 0,
        )
        header = bytearray(header + b"\0" * (_HEADER_SIZE - len(header)))
        struct.pack_into("<I", header, _HEADER_CRC_OFFSET, _header_crc(bytes(header)))
        _write_atomically(path, [bytes(header), bytes(body)])

    @classmethod
    def load(cls, path: Union[str, Path], *, verify_checksum: bool = True) -> "WfstGraph":
        """Read a binary image into memory (a private copy: rewriting or replacing the file afterwards does not
        affect the loaded graph), validating the header, its CRC and every index the decoder will follow.

        Raises CorruptGraphError ("corrupt graph image <path>: <what>") on any truncation/inconsistency, and
        for an image of an older format version a one-line error naming the command that rebuilds it.
        verify_checksum: also check the CRC32 of all sections (catches flipped weights). The header CRC is
        always checked.
        """
        path = Path(path)
        where = f"corrupt graph image {path}"
        try:
            # one read: the checks below and the arrays see the same bytes, whatever happens to the file
            raw = np.fromfile(path, dtype=np.uint8)
        except OSError as e:
            raise FileNotFoundError(f"WfstGraph.load: cannot read {path}: {e.strerror or e}") from None
        size = int(raw.shape[0])
        if size < 12:
            raise CorruptGraphError(f"{where}: truncated header ({size} bytes < {_HEADER_SIZE})")
        if bytes(raw[:8]) != IMAGE_MAGIC:
            raise CorruptGraphError(f"{where}: bad magic {bytes(raw[:8])!r} (expected {IMAGE_MAGIC!r}; not a graph image)")
        (version,) = struct.unpack_from("<I", raw, 8)
        if version != IMAGE_VERSION:
            if 1 <= version < IMAGE_VERSION:
                raise CorruptGraphError(
                    f"graph image {path} has format version {version}, this reader needs {IMAGE_VERSION}: rebuild it "
                    f"with `{REBUILD_COMMAND}`")
            raise CorruptGraphError(f"{where}: unsupported version {version} (this reader knows {IMAGE_VERSION})")
        if size < _HEADER_SIZE:
            raise CorruptGraphError(f"{where}: truncated header ({size} bytes < {_HEADER_SIZE})")
        head = bytes(raw[:_HEADER_SIZE])
        _, _, flags, N, A, start, final, V, W, X, WB, IB, crc, head_crc = struct.unpack_from(_HEADER_FMT, head)
        if _header_crc(head) != head_crc:
            raise CorruptGraphError(f"{where}: header checksum mismatch (the header was modified or damaged)")
        if any(head[struct.calcsize(_HEADER_FMT):]):
            raise CorruptGraphError(f"{where}: nonzero bytes in the header padding")
        for name, v in (("num_states", N), ("num_arcs", A), ("num_tokens", V), ("num_words", W),
                        ("aux_size", X), ("words_bytes", WB), ("info_bytes", IB)):
            if v < 0 or v > 2**31 - 1:
                raise CorruptGraphError(f"{where}: header field {name}={v} out of range [0, 2^31)")
        if N < 1:
            raise CorruptGraphError(f"{where}: num_states={N}, need at least the final state")
        if flags & ~(_FLAG_HAS_EPS | _FLAG_HAS_AUX):
            raise CorruptGraphError(f"{where}: unknown header flags 0x{flags:x}")
        layout, total = _section_offsets(N, A, X, WB, IB)
        for name, dt, off, n in layout:
            end = off + n * dt.itemsize
            if end > size:
                raise CorruptGraphError(
                    f"{where}: truncated: section {name} needs bytes [{off}, {end}) but the file has {size}"
                )
        if size != total:
            raise CorruptGraphError(f"{where}: {size - total} unexpected bytes after the last section")
        if verify_checksum and (zlib.crc32(raw[_HEADER_SIZE:total]) & 0xFFFFFFFF) != crc:
            raise CorruptGraphError(f"{where}: checksum mismatch (sections were modified or damaged)")
        arrays = {name: raw[off : off + n * dt.itemsize].view(dt) for name, dt, off, n in layout}
        try:
            words = bytes(arrays["words"]).decode("utf-8").split("\n") if WB else [""]
            info = json.loads(bytes(arrays["info"]).decode("utf-8")) if IB else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CorruptGraphError(f"{where}: unreadable words/info section ({e})") from None
        if not isinstance(info, dict):
            raise CorruptGraphError(f"{where}: info section is not a JSON object")
        if len(words) != W:
            raise CorruptGraphError(f"{where}: words section holds {len(words)} words, header says {W}")
        if words[0] != "<eps>":
            raise CorruptGraphError(f"{where}: words[0] must be '<eps>'")
        has_aux = bool(flags & _FLAG_HAS_AUX)
        try:
            _validate_arrays(
                num_states=N, start_state=start, final_state=final, num_tokens=V, num_words=W,
                row_splits=arrays["row_splits"], dest=arrays["dest"], ilabel=arrays["ilabel"],
                olabel=arrays["olabel"], weight=arrays["weight"], aux_splits=arrays["aux_splits"],
                aux_words=arrays["aux_words"], final_count=arrays["final_count"], eps_count=arrays["eps_count"],
            )
        except CorruptGraphError as e:
            raise CorruptGraphError(f"{where}: {str(e).removeprefix('corrupt graph: ')}") from None
        if bool(flags & _FLAG_HAS_EPS) != bool(np.any(arrays["eps_count"])):
            raise CorruptGraphError(f"{where}: has-eps flag disagrees with the epsilon counts")
        if not has_aux and np.any(np.diff(arrays["aux_splits"]) > 1):
            raise CorruptGraphError(f"{where}: multi-word arcs present but the has-aux flag is clear")
        if not has_aux:  # without the flag the aux section must be exactly what olabel implies
            implied_splits = np.zeros(A + 1, dtype=np.int64)
            np.cumsum(arrays["olabel"] != 0, out=implied_splits[1:])
            if X != int(implied_splits[-1]) or np.any(arrays["aux_splits"] != implied_splits):
                raise CorruptGraphError(f"{where}: aux section disagrees with the arc word labels")
        return cls(
            num_states=int(N), start_state=int(start), final_state=int(final), num_tokens=int(V),
            row_splits=arrays["row_splits"], dest=arrays["dest"], ilabel=arrays["ilabel"],
            olabel=arrays["olabel"], weight=arrays["weight"], words=words, info=info,
            aux_splits=arrays["aux_splits"] if has_aux else None,
            aux_words=arrays["aux_words"] if has_aux else None,
        )

    # ---- k2 ------------------------------------------------------------------------------------------
    @classmethod
    def from_k2(
        cls,
        path_or_dict,
        *,
        num_tokens: Optional[int] = None,
        words: Optional[Union[list[str], str, Path]] = None,
    ) -> "WfstGraph":
        """Import a k2 Fsa dict (`torch.save(fsa.as_dict())`, e.g. icefall's HLG.pt), read with torch alone.

        arcs: int32 [A, 4] (src, dest, label, score bit-cast to int32); label l reads log-prob column l;
        label -1 enters the single final state (k2: the last state). aux_labels: optional int32 [A] word ids
        (-1 on final arcs in k2; read as "no word"), or our ragged extension `aux_labels_ragged`
        {"row_splits", "values"}. num_tokens: defaults to 1 + the largest label.
        """
        import torch

        d = path_or_dict
        if isinstance(d, (str, Path)):
            # weights_only: a user-supplied file must not run code (a pickle can); a k2 Fsa dict is plain
            # tensors, so the restricted unpickler reads every legitimate HLG.pt
            try:
                d = torch.load(str(d), map_location="cpu", weights_only=True)
            except FileNotFoundError as e:
                raise FileNotFoundError(f"from_k2: cannot read {path_or_dict}: {e.strerror or e}") from None
            except Exception as e:  # noqa: BLE001 -- torch raises UnpicklingError, RuntimeError, ... here
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ValueError(
                    f"from_k2: {path_or_dict} is not a plain tensor dict readable with torch.load(weights_only=True) "
                    f"(refused: {first[:200]}); export the Fsa with torch.save(fsa.as_dict())"
                ) from None
        if not isinstance(d, dict) or "arcs" not in d:
            raise ValueError("from_k2: expected a dict with an 'arcs' entry (k2 Fsa.as_dict())")
        arcs = d["arcs"]
        arcs = arcs.numpy() if hasattr(arcs, "numpy") else np.asarray(arcs)
        if arcs.ndim != 2 or arcs.shape[1] != 4:
            raise ValueError(
                f"from_k2: arcs must be [num_arcs, 4] (a single Fsa), got shape {tuple(arcs.shape)}; "
                "an FsaVec must be indexed to one Fsa first"
            )
        arcs = np.ascontiguousarray(arcs, dtype=np.int32)
        src, dest, label = arcs[:, 0], arcs[:, 1], arcs[:, 2]
        score = arcs[:, 3].copy().view(np.float32)
        num_states = int(max(src.max(initial=-1), dest.max(initial=-1))) + 1
        is_final = label == -1
        final_dests = np.unique(dest[is_final])
        if final_dests.size > 1:
            raise ValueError(f"from_k2: final arcs (label -1) enter {final_dests.size} states; k2 needs one")
        final_state = int(final_dests[0]) if final_dests.size else num_states - 1
        if np.any(label < -1):
            raise ValueError("from_k2: labels below -1 (epsilon arcs are not k2 dense-intersection arcs)")
        V = int(num_tokens) if num_tokens is not None else int(label.max(initial=0)) + 1
        ilabel = np.where(is_final, FINAL, label).astype(np.int32)
        aux = None
        olabel = np.zeros(arcs.shape[0], dtype=np.int32)
        if "aux_labels_ragged" in d:
            rs = np.asarray(d["aux_labels_ragged"]["row_splits"]).astype(np.int64)
            vals = np.asarray(d["aux_labels_ragged"]["values"]).astype(np.int32)
            if rs.shape[0] != arcs.shape[0] + 1:
                raise ValueError("from_k2: aux_labels_ragged.row_splits must have num_arcs + 1 entries")
            keep = vals > 0  # k2 puts -1 on final arcs; 0 is "no word"
            row = np.repeat(np.arange(arcs.shape[0]), np.diff(rs))
            lens = np.bincount(row[keep], minlength=arcs.shape[0])
            rs2 = np.zeros(arcs.shape[0] + 1, dtype=np.int64)
            np.cumsum(lens, out=rs2[1:])
            aux = (rs2, vals[keep])
        elif "aux_labels" in d and d["aux_labels"] is not None:
            al = d["aux_labels"]
            if not hasattr(al, "shape"):
                raise ValueError(
                    "from_k2: aux_labels is not a plain tensor (a k2 RaggedTensor needs the k2 package); "
                    "export it as 'aux_labels_ragged' {row_splits, values}"
                )
            al = al.numpy() if hasattr(al, "numpy") else np.asarray(al)
            olabel = np.where(al > 0, al, 0).astype(np.int32)
        if isinstance(words, (str, Path)):
            words = read_symbol_table(words, allow_gaps=True)
        return cls.from_arcs(
            src, dest, ilabel, olabel, score, num_states=num_states, start_state=0, final_state=final_state,
            num_tokens=V, words=words, info={"source": "k2"}, aux=aux,
        ).validate()

    def to_k2_dict(self) -> dict:
        """k2 Fsa dict (icefall HLG.pt layout): {'arcs': int32 [A, 4], 'aux_labels': int32 [A]} in k2's
        arc-sorted order (our canonical order; finals last); start state must be 0 and the final state the
        last one (k2's requirements). Multi-word arcs additionally go to 'aux_labels_ragged'."""
        import torch

        if self.num_epsilon_arcs:
            raise ValueError("to_k2_dict: the graph has epsilon arcs; k2 dense intersection reads one frame per "
                             "arc (export the epsilon-free HLG, not the TLG)")
        if self.start_state != 0 or self.final_state != self.num_states - 1:
            raise ValueError("to_k2_dict: k2 needs start state 0 and the final state last; renumber first")
        src = self.src()
        score_bits = np.ascontiguousarray(self.weight, dtype=np.float32).view(np.int32)
        arcs = np.stack([src, self.dest, self.ilabel, score_bits], axis=1).astype(np.int32)
        aux = np.where((self.ilabel == FINAL) & (self.olabel == 0), -1, self.olabel).astype(np.int32)
        out = {"arcs": torch.from_numpy(arcs), "aux_labels": torch.from_numpy(aux)}
        if self.aux_splits is not None:
            out["aux_labels_ragged"] = {
                "row_splits": torch.from_numpy(np.asarray(self.aux_splits, dtype=np.int32).copy()),
                "values": torch.from_numpy(np.asarray(self.aux_words, dtype=np.int32).copy()),
            }
        return out

    def save_k2(self, path: Union[str, Path]) -> None:
        import torch

        torch.save(self.to_k2_dict(), str(path))

    # ---- k2 text (k2py) ----------------------------------------------------------------------------------
    def write_k2_text(self, path: Union[str, Path]) -> None:
        """k2 text: "src dest label aux score" per arc, then the final state alone on the last line (what
        k2py.CreateFsaVecFromStr(s, -1, acceptor=False) reads). Scores are written as the shortest decimal
        that round-trips the float32 (bit-exact). k2 text has one aux label per arc: an arc with several
        words gets a compound id (>= num_words) listed in `<path>.aux.json` ({"base", "compounds"}), which
        `from_k2_text` and the k2py adapter expand back into words."""
        if self.num_epsilon_arcs:
            raise ValueError("write_k2_text: epsilon arcs cannot be expressed in a k2 graph (use the HLG)")
        if self.start_state != 0 or self.final_state != self.num_states - 1:
            raise ValueError("write_k2_text: k2 needs start state 0 and the final state last")
        src = self.src()
        aux = np.where((self.ilabel == FINAL) & (self.olabel == 0), -1, self.olabel).astype(np.int64)
        side = Path(str(path) + ".aux.json")
        if self.num_multiword_arcs:
            base = self.num_words
            compounds: dict[tuple, int] = {}
            lens = np.diff(self.aux_splits)
            for a in np.nonzero(lens > 1)[0].tolist():
                key = tuple(self.arc_words(a))
                aux[a] = base + compounds.setdefault(key, len(compounds))
            side.write_text(json.dumps({"base": base, "compounds": [list(k) for k in compounds]}))
        elif side.exists():
            side.unlink()
        with open(path, "w", encoding="utf-8") as f:
            # "%.9g" identifies every float32 uniquely (9 significant digits), so parsing is bit-exact
            f.writelines(
                f"{s} {d} {l} {a} {w:.9g}\n"
                for s, d, l, a, w in zip(src.tolist(), self.dest.tolist(), self.ilabel.tolist(), aux.tolist(),
                                         self.weight.astype(np.float32).tolist())
            )
            f.write(f"{self.final_state}\n")

    @classmethod
    def from_k2_text(cls, path: Union[str, Path], *, num_tokens: Optional[int] = None,
                     words: Optional[Union[list[str], str, Path]] = None) -> "WfstGraph":
        """Read `write_k2_text` output (and its `.aux.json` compound table when present)."""
        lines = [l.split() for l in Path(path).read_text(encoding="utf-8").splitlines()]
        rows = [l for l in lines if len(l) == 5]
        odd = [i for i, l in enumerate(lines, 1) if len(l) not in (0, 1, 5)]
        if odd:
            raise ValueError(f"from_k2_text: {path}:{odd[0]}: expected 'src dest label aux score'")
        if not rows:
            raise ValueError(f"from_k2_text: {path} holds no arcs")
        ints = np.asarray([r[:4] for r in rows], dtype=np.int64)
        score = np.asarray([r[4] for r in rows], dtype=np.float64).astype(np.float32)
        arcs = np.stack([ints[:, 0], ints[:, 1], ints[:, 2], score.view(np.int32).astype(np.int64)], axis=1).astype(np.int32)
        aux = ints[:, 3]
        d = {"arcs": arcs, "aux_labels": aux.astype(np.int32)}
        side = Path(str(path) + ".aux.json")
        if side.exists():
            meta = json.loads(side.read_text())
            base, comp = int(meta["base"]), meta["compounds"]
            d["aux_labels_ragged"] = expand_compounds(aux, base, comp)
        return cls.from_k2(d, num_tokens=num_tokens, words=words)

    # ---- OpenFst -----------------------------------------------------------------------------------------
    @classmethod
    def from_openfst(
        cls,
        path: Union[str, Path],
        *,
        num_tokens: Optional[int] = None,
        tokens_path: Optional[Union[str, Path]] = None,
        words_path: Optional[Union[str, Path]] = None,
    ) -> "WfstGraph":
        """Import an OpenFst vector/const FST in Kaldi numbering (TLG.fst as Riva/Kaldi read it).

        ilabel 0 -> EPSILON; 1..V -> column ilabel - 1; > V (#k disambiguation) -> EPSILON. V comes from
        `num_tokens` or from tokens.txt (`tokens_path`: symbols other than <eps> and #k). Tropical costs
        are negated into scores; final weights become FINAL arcs into one new final state (appended last).
        """
        if num_tokens is None:
            if tokens_path is None:
                raise ValueError("from_openfst: give num_tokens or tokens_path (to tell tokens from #k symbols)")
            syms = read_symbol_table(tokens_path, allow_gaps=True)
            num_tokens = sum(1 for s in syms[1:] if not (s.startswith("#") and s[1:].isdigit()))
        V = int(num_tokens)
        fa = read_openfst(path)
        il = fa.ilabel
        ilabel = np.where((il == 0) | (il > V), EPSILON, il - 1).astype(np.int32)
        words = read_symbol_table(words_path, allow_gaps=True) if words_path is not None else None
        olabel = fa.olabel.astype(np.int32)
        if words is not None:
            bad = [i for i, w in enumerate(words) if w.startswith("#") and w[1:].isdigit()]
            if bad:
                olabel = np.where(np.isin(olabel, bad), 0, olabel).astype(np.int32)
        N = fa.num_states
        fin = np.nonzero(np.isfinite(fa.final))[0]
        src = np.concatenate([fa.src, fin]).astype(np.int64)
        dest = np.concatenate([fa.dest, np.full(fin.shape, N, np.int32)])
        ilabel = np.concatenate([ilabel, np.full(fin.shape, FINAL, np.int32)])
        olabel = np.concatenate([olabel, np.zeros(fin.shape, np.int32)])
        weight = np.concatenate([-fa.cost, -fa.final[fin]]).astype(np.float32)
        return cls.from_arcs(
            src, dest, ilabel, olabel, weight, num_states=N + 1, start_state=fa.start, final_state=N,
            num_tokens=V, words=words, info={"source": "openfst"},
        ).validate()

    def write_openfst(self, path: Union[str, Path], words_path: Optional[Union[str, Path]] = None) -> None:
        """Write a binary OpenFst vector FST in Kaldi numbering (+ words.txt when words_path is given).

        The single final state is dropped (FINAL arcs become final weights, cost = -score), so a graph
        imported by `from_openfst` writes back the same FST. Arcs are written in our canonical order."""
        if self.num_multiword_arcs:
            raise ValueError("write_openfst: arcs with several words cannot be expressed in OpenFst")
        src = self.src()
        is_final = self.ilabel == FINAL
        if np.any(self.olabel[is_final] != 0):
            raise ValueError("write_openfst: final arcs carrying words cannot be expressed in OpenFst")
        if np.any(self.dest[~is_final] == self.final_state):
            raise ValueError("write_openfst: non-final arcs enter the final state")
        fs = self.final_state
        keep = np.arange(self.num_states) != fs
        new_id = np.cumsum(keep) - 1  # old state -> new id
        final = np.full(self.num_states - 1, np.inf, dtype=np.float32)
        fsrc = src[is_final]
        fw = -self.weight[is_final]
        if np.unique(fsrc).size != fsrc.size:
            raise ValueError("write_openfst: a state has several final arcs (OpenFst has one final weight)")
        final[new_id[fsrc]] = fw
        e = np.nonzero(~is_final)[0]
        il = np.where(self.ilabel[e] == EPSILON, 0, self.ilabel[e] + 1).astype(np.int32)
        ol = self.olabel[e].astype(np.int32)
        # OpenFst's ilabel arc sort (ILabelCompare: ilabel, then olabel), stable: an ilabel-sorted FST
        # (what kaldifst.arcsort and our recipes write) reads back and writes out in the same order
        order = np.lexsort((ol, il, src[e]))
        e, il, ol = e[order], il[order], ol[order]
        write_openfst_vector(path, FstArrays(
            start=int(new_id[self.start_state]), num_states=self.num_states - 1, src=new_id[src[e]].astype(np.int32),
            dest=new_id[self.dest[e]].astype(np.int32), ilabel=il, olabel=ol,
            cost=(-self.weight[e]).astype(np.float32), final=final,
        ))
        if words_path is not None:
            if self.words is None:
                raise ValueError("write_openfst: words_path given but the graph has no word table")
            write_symbol_table(words_path, self.words)


# -------------------------------------------------------------------------------------------------------------
def expand_compounds(aux: np.ndarray, base: int, compounds: list) -> dict:
    """aux ids (>= base: compound index) -> ragged {row_splits, values} (0 and -1 mean no word)."""
    aux = np.asarray(aux, dtype=np.int64)
    clens = np.asarray([len(c) for c in compounds], dtype=np.int64)
    coff = np.zeros(len(compounds) + 1, dtype=np.int64)
    np.cumsum(clens, out=coff[1:])
    cvals = np.asarray([w for c in compounds for w in c], dtype=np.int32)
    is_c = aux >= base
    lens = np.where(is_c, clens[np.where(is_c, aux - base, 0)] if len(compounds) else 0, (aux > 0).astype(np.int64))
    rs = np.zeros(aux.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=rs[1:])
    vals = np.zeros(int(rs[-1]), dtype=np.int32)
    single = ~is_c & (aux > 0)
    vals[rs[:-1][single]] = aux[single]
    if is_c.any():
        ci = aux[is_c] - base
        dst_start = rs[:-1][is_c]
        n = clens[ci]
        idx_dst = np.repeat(dst_start, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
        idx_src = np.repeat(coff[:-1][ci], n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
        vals[idx_dst] = cvals[idx_src]
    return {"row_splits": rs, "values": vals}


def _permute_csr(splits: np.ndarray, vals: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reorder the rows of a CSR (row i of the result = row order[i] of the input), vectorised."""
    splits = np.asarray(splits, dtype=np.int64)
    lens = np.diff(splits)[order]
    new_splits = np.zeros(order.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=new_splits[1:])
    total = int(new_splits[-1])
    idx = np.repeat(splits[:-1][order] - new_splits[:-1], lens) + np.arange(total, dtype=np.int64)
    return new_splits, np.asarray(vals)[idx].astype(np.int32)


def _f32_str(x: float) -> str:
    """Shortest decimal that parses back to the same float32."""
    v = np.float32(x)
    if not np.isfinite(v):
        return "inf" if v > 0 else "-inf"
    return np.format_float_positional(v, unique=True, trim="-") if abs(v) >= 1e-4 or v == 0 else \
        np.format_float_scientific(v, unique=True, trim="-")


def _validate_arrays(*, num_states, start_state, final_state, num_tokens, num_words, row_splits, dest, ilabel,
                     olabel, weight, aux_splits, aux_words, final_count, eps_count) -> None:
    """Shared checks of `validate()` and `load()` (messages name the violated invariant)."""
    N = int(num_states)
    A = int(dest.shape[0])

    def bad(msg):
        raise CorruptGraphError(f"corrupt graph: {msg}")

    if not (0 <= start_state < N):
        bad(f"start_state {start_state} outside [0, {N})")
    if not (0 <= final_state < N):
        bad(f"final_state {final_state} outside [0, {N})")
    if num_tokens <= 0:
        bad(f"num_tokens {num_tokens} must be positive")
    rs = np.asarray(row_splits, dtype=np.int64)
    if rs.shape[0] != N + 1:
        bad(f"row_splits has {rs.shape[0]} entries, expected num_states + 1 = {N + 1}")
    if rs[0] != 0 or rs[-1] != A:
        bad(f"row_splits must start at 0 and end at num_arcs={A} (got {rs[0]}..{rs[-1]})")
    if np.any(np.diff(rs) < 0):
        s = int(np.nonzero(np.diff(rs) < 0)[0][0])
        bad(f"row_splits not monotone at state {s} ({rs[s]} > {rs[s + 1]})")
    if not (ilabel.shape[0] == olabel.shape[0] == weight.shape[0] == A):
        bad("dest, ilabel, olabel and weight have different lengths")
    if A and (dest.min() < 0 or dest.max() >= N):
        a = int(np.nonzero((dest < 0) | (dest >= N))[0][0])
        bad(f"arc {a} destination {int(dest[a])} outside [0, {N})")
    il = np.asarray(ilabel)
    badl = (il >= num_tokens) | ((il < 0) & (il != FINAL) & (il != EPSILON))
    if np.any(badl):
        a = int(np.nonzero(badl)[0][0])
        bad(f"arc {a} label {int(il[a])} outside the vocabulary [0, {num_tokens}) (and not FINAL/EPSILON)")
    is_final = il == FINAL
    enters_final = np.asarray(dest) == final_state
    if np.any(is_final != enters_final):
        a = int(np.nonzero(is_final != enters_final)[0][0])
        bad(f"arc {a}: FINAL arcs must enter final_state {final_state} and only they may "
            f"(label {int(il[a])}, dest {int(dest[a])})")
    if rs[final_state + 1] != rs[final_state]:
        bad(f"final_state {final_state} has out-arcs")
    src = np.repeat(np.arange(N, dtype=np.int64), np.diff(rs))
    group = np.where(il >= 0, 0, np.where(il == EPSILON, 1, 2))
    if A > 1:
        same = src[1:] == src[:-1]
        key_prev = group[:-1] * (2**33) + np.where(group[:-1] == 0, il[:-1], 0)
        key_next = group[1:] * (2**33) + np.where(group[1:] == 0, il[1:], 0)
        wrong = same & (key_next < key_prev)
        if np.any(wrong):
            a = int(np.nonzero(wrong)[0][0]) + 1
            bad(f"arc {a} (state {int(src[a])}) breaks the canonical order (emitting by label, then epsilon, "
                "then final)")
    if final_count is not None:
        fc = np.bincount(src[is_final], minlength=N)
        if np.asarray(final_count).shape[0] != N or np.any(fc != final_count):
            s = int(np.nonzero(fc != final_count)[0][0]) if np.asarray(final_count).shape[0] == N else -1
            bad(f"per-state final arc count disagrees with the arcs (state {s})")
    if eps_count is not None:
        ec = np.bincount(src[il == EPSILON], minlength=N)
        if np.asarray(eps_count).shape[0] != N or np.any(ec != eps_count):
            s = int(np.nonzero(ec != eps_count)[0][0]) if np.asarray(eps_count).shape[0] == N else -1
            bad(f"per-state epsilon arc count disagrees with the arcs (state {s})")
    w = np.asarray(weight)
    if np.any(np.isnan(w)) or np.any(w == np.inf):
        a = int(np.nonzero(np.isnan(w) | (w == np.inf))[0][0])
        bad(f"arc {a} weight {float(w[a])} is NaN or +inf")
    ol = np.asarray(olabel)
    if A and (ol.min() < 0 or ol.max() >= num_words):
        a = int(np.nonzero((ol < 0) | (ol >= num_words))[0][0])
        bad(f"arc {a} word label {int(ol[a])} outside [0, num_words={num_words})")
    if aux_splits is not None:
        xs = np.asarray(aux_splits, dtype=np.int64)
        X = int(np.asarray(aux_words).shape[0])
        if xs.shape[0] != A + 1 or xs[0] != 0 or xs[-1] != X or np.any(np.diff(xs) < 0):
            bad(f"aux CSR malformed (aux_splits must have num_arcs + 1 = {A + 1} monotone entries 0..{X})")
        aw = np.asarray(aux_words)
        if X and (aw.min() <= 0 or aw.max() >= num_words):
            bad(f"aux word id outside [1, num_words={num_words})")
        lens = np.diff(xs)
        first = np.zeros(A, dtype=np.int64)
        nz = lens > 0
        first[nz] = aw[xs[:-1][nz]]
        if np.any(first != ol):
            a = int(np.nonzero(first != ol)[0][0])
            bad(f"arc {a}: olabel {int(ol[a])} is not the first aux word ({int(first[a])})")
