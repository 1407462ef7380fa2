"""The seed system's (OASR's) GPU WFST decoder as a benchmark column: our graph written in OASR's graph image,
and an adapter that decodes through OASR's WFST C API (TVM-FFI, JIT-built on first use).

OASR is a baseline to measure against (`../shared/anchors/README.md`: its source, unpacked into
`.anchors/oasr`, or OASR_ROOT); nothing of it is copied here. Its exporter reads k2 `HLG.pt` files and needs k2,
which does not install on our machines, so `write_oasr_image` writes the same image from a `WfstGraph`,
following the format OASR documents (seed `001_c303a39fa68c4afc.txt` §4) and reads (`csrc/decoder/wfst/graph.h`,
`graph_io.cc`):

    header (256 B, little endian): u64 magic "WFSTIMG1", u32 version 2, u32 flags (1 finals-at-end,
        2 has-eps, 4 eps-first), i64 num_states, i64 num_arcs, i32 vocab_size, i32 start_state,
        i64 aux_pool_size, i64 offsets[7]; zero padding
    sections, each at a 128-byte aligned offset: row_splits i32[N+1], final_count i32[N],
        arc_dest_ilabel i32[2A] ({dest, ilabel} per arc), arc_weight f32[A], aux_row_splits i32[A+1],
        aux_pool i32[X], eps_count i32[N]

Mapping from our conventions (decoders/graph.py): the arc order is kept (OASR: "never reorder arcs"); ours is
per state emitting arcs, then epsilon arcs, then FINAL arcs, i.e. finals at the end of each state's range and
epsilons at the end of the non-final range (flags: finals-at-end, not eps-first). An emitting label is the
log-prob column in both. FINAL (-1) is OASR's -1. OASR tells epsilon arcs by position (eps_count), never by
label; their label field holds `OASR_EPSILON_LABEL` (0, OASR's `--epsilon-id 0` convention for TLGs), which its
kernels do not read. Weights are log-domain scores (higher is better) in both, copied bit for bit. Word outputs
are our aux CSR (k2's ragged aux_labels) as they are.

Search settings, like for like with ours (eval/bench/wfst_bench.py): the same beams, min/max active,
allow_partial, no blank skipping, log-probs scaled by the same acoustic scale. Two settings have no exact
counterpart and are stated in every row's decoder_config:
- epsilon passes: ours closes epsilons until nothing improves (at most `eps_iterations`, 8); OASR runs a fixed
  number of passes per frame (its default 3). The adapter gives OASR `epsilon_depth(graph)` passes (the
  longest epsilon chain, capped at ours' limit): the fewest that reach the same closure, so both search the
  same space and OASR does no pass that cannot change anything.
- capacities: OASR's offline wrapper (`oasr/decoder/wfst_decoder.py`) builds its decoders with
  main_q_factor 32, cand_factor 3 and max_frames 4096; the adapter uses the same, with one lane per utterance
  of the batch. OASR does not rescue overflows (the caller's job, its §14); the adapter reports them
  (`overflow_count`) as its wrapper does, returning an empty hypothesis for a lane that failed.

Timing boundary "api": `wfst_decode_batch` (OASR's public C API, §10) with device log-probs in and words on the
host out, plus the conversion of word ids to strings; ours is timed through `WfstDecoder.decode` likewise.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import struct
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from decoders.graph import EPSILON, FINAL, WfstGraph

OASR_MAGIC = b"WFSTIMG1"
OASR_IMAGE_VERSION = 2
OASR_FLAG_FINALS_AT_END = 1
OASR_FLAG_HAS_EPS = 2
OASR_FLAG_EPS_FIRST = 4
OASR_EPSILON_LABEL = 0  # label field of epsilon arcs (unread by OASR: epsilons are told by eps_count)
OASR_MAX_LABEL = 0xFFFF - 1  # labels are uploaded as u16 with 0xFFFF meaning -1
_HEADER_BYTES = 256
_ALIGN = 128
_HEADER_FMT = "<8sIIqqiiq7q"
_SECTION_DTYPES = {"row_splits": "<i4", "final_count": "<i4", "arc_dest_ilabel": "<i4", "arc_weight": "<f4",
                   "aux_row_splits": "<i4", "aux_pool": "<i4", "eps_count": "<i4"}
_SECTION_NAMES = tuple(_SECTION_DTYPES)  # the order of the sections in the file
DEFAULT_OASR_ROOT = Path(".anchors/oasr")
IMAGE_SUFFIX = ".oasr.img"


class OasrUnavailable(RuntimeError):
    """OASR cannot run here (no source tree, no tvm_ffi, no CUDA): the benchmark writes an unavailable row."""


# ---------------------------------------------------------------------------------------------------------
# The graph image
# ---------------------------------------------------------------------------------------------------------


@dataclass
class OasrImage:
    """The arrays of one OASR graph image (what its reader holds: csrc/decoder/wfst/graph.h GraphImage)."""

    row_splits: np.ndarray  # i32 (N + 1,)
    final_count: np.ndarray  # i32 (N,)
    arc_dest_ilabel: np.ndarray  # i32 (2A,): dest, ilabel per arc
    arc_weight: np.ndarray  # f32 (A,)
    aux_row_splits: np.ndarray  # i32 (A + 1,)
    aux_pool: np.ndarray  # i32 (X,)
    eps_count: np.ndarray  # i32 (N,) (zeros on an epsilon-free graph)
    vocab_size: int
    start_state: int
    finals_at_end: bool = True
    has_eps: bool = False
    eps_first: bool = False

    @property
    def num_states(self) -> int:
        return int(self.row_splits.shape[0]) - 1

    @property
    def num_arcs(self) -> int:
        return int(self.arc_weight.shape[0])

    @property
    def dest(self) -> np.ndarray:
        return self.arc_dest_ilabel[0::2]

    @property
    def ilabel(self) -> np.ndarray:
        return self.arc_dest_ilabel[1::2]

    @property
    def flags(self) -> int:
        return ((OASR_FLAG_FINALS_AT_END if self.finals_at_end else 0) | (OASR_FLAG_HAS_EPS if self.has_eps else 0)
                | (OASR_FLAG_EPS_FIRST if self.eps_first else 0))


def oasr_image(graph: WfstGraph) -> OasrImage:
    """Our graph as OASR's image arrays (same states, arcs in the same order, same weights and words).

    Raises ValueError when the graph breaks a limit of OASR's format (labels above its u16 range, more than
    2^31 - 1 states or arcs)."""
    graph.validate()
    N, A = graph.num_states, graph.num_arcs
    if N >= 2**31 or A >= 2**31:
        raise ValueError(f"oasr_image: {N} states / {A} arcs exceed OASR's int32 indices")
    if graph.num_tokens > OASR_MAX_LABEL:
        raise ValueError(f"oasr_image: {graph.num_tokens} log-prob columns exceed OASR's u16 labels "
                         f"(vocab_size < 65535)")
    il = graph.ilabel
    src = graph.src()
    is_final, is_eps = il == FINAL, il == EPSILON
    final_count = np.bincount(src[is_final], minlength=N).astype(np.int32)
    eps_count = np.bincount(src[is_eps], minlength=N).astype(np.int32)
    # our canonical order already is OASR's layout; check it rather than trust it (a reordered graph would
    # make OASR read emitting arcs as epsilons)
    pos = np.arange(A, dtype=np.int64) - np.repeat(graph.row_splits[:-1].astype(np.int64), np.diff(graph.row_splits))
    deg = np.diff(graph.row_splits).astype(np.int64)
    fc, ec = final_count.astype(np.int64)[src], eps_count.astype(np.int64)[src]
    if np.any(is_final != (pos >= deg[src] - fc)):
        raise ValueError("oasr_image: final arcs are not the last arcs of their state")
    if np.any(is_eps != ((pos >= deg[src] - fc - ec) & ~is_final)):
        raise ValueError("oasr_image: epsilon arcs are not contiguous before the final arcs of their state")
    labels = np.where(is_eps, OASR_EPSILON_LABEL, il).astype(np.int32)  # FINAL stays -1
    interleaved = np.empty(2 * A, dtype=np.int32)
    interleaved[0::2] = graph.dest
    interleaved[1::2] = labels
    aux_splits, aux_words = graph.aux_csr()
    return OasrImage(
        row_splits=np.ascontiguousarray(graph.row_splits, dtype=np.int32), final_count=final_count,
        arc_dest_ilabel=interleaved, arc_weight=np.ascontiguousarray(graph.weight, dtype=np.float32),
        aux_row_splits=np.ascontiguousarray(aux_splits, dtype=np.int32),
        aux_pool=np.ascontiguousarray(aux_words, dtype=np.int32), eps_count=eps_count,
        vocab_size=int(graph.num_tokens), start_state=int(graph.start_state), finals_at_end=True,
        has_eps=bool(eps_count.any()), eps_first=False,
    )


def _offsets(img: OasrImage) -> tuple[list[int], int]:
    sizes = [img.row_splits.nbytes, img.final_count.nbytes, img.arc_dest_ilabel.nbytes, img.arc_weight.nbytes,
             img.aux_row_splits.nbytes, img.aux_pool.nbytes, img.eps_count.nbytes]
    out, off = [], _HEADER_BYTES
    for n in sizes:
        off = (off + _ALIGN - 1) // _ALIGN * _ALIGN
        out.append(off)
        off += n
    return out, off


def write_oasr_image(graph: Union[WfstGraph, OasrImage], path: Union[str, Path]) -> dict:
    """Write `graph` as an OASR graph image at `path` (atomically: a temporary file renamed over it).
    Returns its sizes {states, arcs, vocab_size, aux_pool, has_eps, bytes}."""
    img = graph if isinstance(graph, OasrImage) else oasr_image(graph)
    offsets, total = _offsets(img)
    header = struct.pack(_HEADER_FMT, OASR_MAGIC, OASR_IMAGE_VERSION, img.flags, img.num_states, img.num_arcs,
                         img.vocab_size, img.start_state, int(img.aux_pool.shape[0]), *offsets)
    buf = bytearray(total)
    buf[: len(header)] = header
    for name, off in zip(_SECTION_NAMES, offsets):
        raw = np.ascontiguousarray(getattr(img, name), dtype=_SECTION_DTYPES[name]).tobytes()
        buf[off : off + len(raw)] = raw
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_bytes(bytes(buf))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return {"states": img.num_states, "arcs": img.num_arcs, "vocab_size": img.vocab_size,
            "aux_pool": int(img.aux_pool.shape[0]), "has_eps": img.has_eps, "bytes": total}


def read_oasr_image(path: Union[str, Path]) -> OasrImage:
    """Parse an OASR graph image (the documented format above; versions 1 and 2) with every size checked
    against the file. Raises ValueError naming the file and what is wrong."""
    path = Path(path)
    raw = path.read_bytes()
    where = f"OASR graph image {path}"
    if len(raw) < _HEADER_BYTES:
        raise ValueError(f"{where}: truncated header ({len(raw)} bytes)")
    if raw[:8] != OASR_MAGIC:
        raise ValueError(f"{where}: bad magic {raw[:8]!r}")
    (version,) = struct.unpack_from("<I", raw, 8)
    if version not in (1, 2):
        raise ValueError(f"{where}: unsupported version {version}")
    fmt = _HEADER_FMT if version == 2 else "<8sIIqqiiq6q"
    _, _, flags, N, A, V, start, X, *offs = struct.unpack_from(fmt, raw)
    if version == 1:
        offs.append(0)
    if N <= 0 or A < 0 or X < 0 or N >= 2**31:
        raise ValueError(f"{where}: invalid counts (states {N}, arcs {A}, aux {X})")
    lengths = {"row_splits": N + 1, "final_count": N, "arc_dest_ilabel": 2 * A, "arc_weight": A,
               "aux_row_splits": A + 1, "aux_pool": X, "eps_count": N}
    counts = [(name, dt, lengths[name]) for name, dt in _SECTION_DTYPES.items()]
    has_eps = version == 2 and bool(flags & OASR_FLAG_HAS_EPS)
    arrays: dict[str, np.ndarray] = {}
    for (name, dt, n), off in zip(counts, offs):
        if name == "eps_count" and not has_eps:
            arrays[name] = np.zeros(N, np.int32)
            continue
        end = off + n * 4
        if off < _HEADER_BYTES or end > len(raw):
            raise ValueError(f"{where}: section {name} [{off}, {end}) outside the file ({len(raw)} bytes)")
        arrays[name] = np.frombuffer(raw, dtype=dt, count=n, offset=off).astype(np.dtype(dt).newbyteorder("="))
    rs = arrays["row_splits"]
    if rs[0] != 0 or rs[-1] != A or np.any(np.diff(rs.astype(np.int64)) < 0):
        raise ValueError(f"{where}: corrupt row_splits")
    return OasrImage(vocab_size=int(V), start_state=int(start), finals_at_end=bool(flags & OASR_FLAG_FINALS_AT_END),
                     has_eps=has_eps, eps_first=bool(flags & OASR_FLAG_EPS_FIRST), **arrays)


def graph_from_oasr_image(img: OasrImage, *, final_state: int, words: Optional[list[str]] = None) -> WfstGraph:
    """Our graph back from an OASR image written by `write_oasr_image` (epsilon arcs found by position, as
    OASR's kernels find them). OASR's image has no final-state field (its FINAL arcs only name their
    destination), so the caller says which state it is."""
    if not img.finals_at_end or img.eps_first:
        raise ValueError("graph_from_oasr_image: only the finals-at-end, epsilons-last layout this module writes")
    N, A = img.num_states, img.num_arcs
    deg = np.diff(img.row_splits.astype(np.int64))
    src = np.repeat(np.arange(N, dtype=np.int64), deg)
    pos = np.arange(A, dtype=np.int64) - np.repeat(img.row_splits[:-1].astype(np.int64), deg)
    fc, ec = img.final_count.astype(np.int64)[src], img.eps_count.astype(np.int64)[src]
    is_final = pos >= deg[src] - fc
    is_eps = (pos >= deg[src] - fc - ec) & ~is_final
    ilabel = np.where(is_eps, EPSILON, img.ilabel).astype(np.int32)
    if np.any(img.ilabel[is_final] != FINAL):
        raise ValueError("graph_from_oasr_image: an arc in a final range has a label other than -1")
    aux_splits, aux_words = img.aux_row_splits.astype(np.int32), img.aux_pool.astype(np.int32)
    lens = np.diff(aux_splits.astype(np.int64))
    olabel = np.zeros(A, np.int32)
    olabel[lens > 0] = aux_words[aux_splits[:-1][lens > 0]]
    multi = bool(A and lens.max() > 1)
    return WfstGraph(num_states=N, start_state=img.start_state, final_state=int(final_state),
                     num_tokens=img.vocab_size, row_splits=img.row_splits.astype(np.int32),
                     dest=img.dest.astype(np.int32), ilabel=ilabel, olabel=olabel,
                     weight=img.arc_weight.astype(np.float32), words=words,
                     aux_splits=aux_splits if multi else None, aux_words=aux_words if multi else None)


def epsilon_depth(graph: WfstGraph, cap: int = 64) -> int:
    """Epsilon-closure passes that reach the whole closure: the longest chain of epsilon arcs (0 on an
    epsilon-free graph). With an epsilon cycle (no longest chain) or a chain longer than `cap`, `cap`."""
    eps = graph.ilabel == EPSILON
    if not eps.any():
        return 0
    s, d = graph.src()[eps], graph.dest[eps]
    depth = np.zeros(graph.num_states, np.int64)  # longest epsilon chain starting at each state
    for k in range(1, cap + 1):
        new = np.zeros_like(depth)
        np.maximum.at(new, s, depth[d] + 1)
        if np.array_equal(new, depth):
            return int(depth.max())
        depth = new
    return cap


def cached_oasr_image(graph_path: Union[str, Path], graph: Optional[WfstGraph] = None,
                      out_dir: Optional[Union[str, Path]] = None) -> Path:
    """`<graph_path stem>.oasr.img` next to our image (or in out_dir), rewritten when older than the source."""
    graph_path = Path(graph_path)
    out = Path(out_dir or graph_path.parent) / (graph_path.stem + IMAGE_SUFFIX)
    if not out.is_file() or out.stat().st_mtime < graph_path.stat().st_mtime:
        write_oasr_image(graph if graph is not None else WfstGraph.load(graph_path), out)
    return out


# ---------------------------------------------------------------------------------------------------------
# OASR's decoder behind the decoder protocol
# ---------------------------------------------------------------------------------------------------------


def oasr_root(root: Optional[Union[str, Path]] = None) -> Path:
    """The unpacked OASR source tree: `root`, else $OASR_ROOT, else .anchors/oasr (from the repository root)."""
    p = Path(root or os.environ.get("OASR_ROOT") or DEFAULT_OASR_ROOT)
    if not (p / "oasr" / "jit" / "wfst_decoder.py").is_file():
        raise OasrUnavailable(f"OASR source not found at {p} (unpack ../shared/anchors/oasr-9c1a3ce.tar.xz into "
                              ".anchors/oasr, or set OASR_ROOT)")
    return p.resolve()


_MODULE_LOCK = threading.Lock()
_MODULES: dict[str, Any] = {}


def load_oasr_module(root: Optional[Union[str, Path]] = None):
    """OASR's WFST decoder module (`oasr.jit.wfst_decoder.gen_wfst_decoder_module().build_and_load()`; the
    first call JIT-builds it, about a minute; cached by OASR under ~/.cache/oasr/jit)."""
    p = oasr_root(root)
    with _MODULE_LOCK:
        if str(p) in _MODULES:
            return _MODULES[str(p)]
        try:
            import tvm_ffi  # noqa: F401 - OASR's JIT loader; a clearer message than OASR's own import error
        except ImportError as e:
            raise OasrUnavailable(f"OASR needs apache-tvm-ffi (../shared/anchors/requirements-oasr.txt): {e}") from None
        import torch

        if not torch.cuda.is_available():
            raise OasrUnavailable("OASR's WFST decoder needs a CUDA device")
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
        mod = importlib.import_module("oasr.jit.wfst_decoder").gen_wfst_decoder_module().build_and_load()
        _MODULES[str(p)] = mod
        return mod


@dataclass
class OasrWfstConfig:
    """Settings of the OASR column (values of ours where the two decoders share a setting)."""

    name: str = "oasr"
    graph: str = "TLG"  # TLG.bin or HLG.bin of the graph directory, exported to <graph>.oasr.img
    search_beam: float = 17.0
    output_beam: float = 8.0
    min_active: int = 30
    max_active: int = 10000
    allow_partial: bool = True
    acoustic_scale: float = 1.0
    eps_iterations: Optional[int] = None  # None: epsilon_depth(graph) capped at max_eps_iterations
    max_eps_iterations: int = 8  # ours' eps_iterations
    max_lanes: int = 32  # utterances per decode call (the benchmark's batch size)
    max_frames: int = 4096  # OASR's offline default; a longer batch rebuilds the decoder with room
    main_q_factor: int = 32  # OASR's offline wrapper (oasr/decoder/wfst_decoder.py)
    cand_factor: int = 3
    use_cuda_graphs: bool = True
    oasr_root: Optional[str] = None

    def __post_init__(self):
        if self.graph not in ("TLG", "HLG"):
            raise ValueError(f"oasr: graph must be 'TLG' or 'HLG', got {self.graph!r}")
        for name in ("max_lanes", "max_frames", "main_q_factor", "cand_factor", "max_active", "max_eps_iterations"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"oasr: {name} must be a positive integer, got {v!r}")
        if not (self.search_beam > 0 and self.output_beam > 0 and self.acoustic_scale > 0):
            raise ValueError("oasr: search_beam, output_beam and acoustic_scale must be > 0")
        if self.eps_iterations is not None and (not isinstance(self.eps_iterations, int) or self.eps_iterations < 0):
            raise ValueError(f"oasr: eps_iterations must be a non-negative integer or None, got {self.eps_iterations!r}")


class OasrWfstDecoder:
    """OASR's GPU WFST decoder on our graph: decode(log_probs (B, T, V), lengths) -> [Hypothesis]."""

    name = "oasr"

    def __init__(self, cfg: Union[OasrWfstConfig, dict], ctx):
        import torch

        from eval.adapters.base import load_graph_cached

        self.cfg = cfg if isinstance(cfg, OasrWfstConfig) else OasrWfstConfig(**dict(cfg))
        if ctx.graph_dir is None:
            raise ValueError("oasr: DecodingContext.graph_dir is not set")
        device = torch.device(ctx.device)
        if device.type != "cuda":
            raise OasrUnavailable(f"oasr: OASR's WFST decoder runs on CUDA only (device {ctx.device!r})")
        self.mod = load_oasr_module(self.cfg.oasr_root)
        path = Path(ctx.graph_dir) / f"{self.cfg.graph}.bin"
        self.graph = load_graph_cached("wfst", Path(ctx.graph_dir), f"{self.cfg.graph}.bin", WfstGraph.load)
        if ctx.tokens.vocab_size < self.graph.num_tokens:
            raise ValueError(f"oasr: the graph reads {self.graph.num_tokens} columns, the log-probs have "
                             f"{ctx.tokens.vocab_size}")
        self.image_path = cached_oasr_image(path, self.graph)
        depth = epsilon_depth(self.graph, cap=self.cfg.max_eps_iterations)
        self.eps_iterations = self.cfg.eps_iterations if self.cfg.eps_iterations is not None else max(depth, 1)
        self.words = self.graph.words or ["<eps>"] + [str(i) for i in range(1, self.graph.num_words)]
        self.device_index = device.index if device.index is not None else torch.cuda.current_device()
        self._graph_h = int(self.mod.wfst_load_graph(str(self.image_path)))
        self._dec_h = None
        self._frames = 0
        self._create(self.cfg.max_frames)
        self._stats = {"overflow_count": 0, "partial_count": 0, "failed_count": 0}

    @property
    def resolved_config(self) -> dict:
        """What the decoder was built with (for the row's decoder_config)."""
        return {**dataclasses.asdict(self.cfg), "eps_iterations": self.eps_iterations, "max_frames": self._frames,
                "image": self.image_path.name}

    def _create(self, max_frames: int) -> None:
        if self._dec_h is not None:
            self.mod.wfst_free_decoder(self._dec_h)
            self._dec_h = None
        c = self.cfg
        # argument order: csrc/decoder/wfst/wfst_decoder.cu wfst_create_decoder
        self._dec_h = int(self.mod.wfst_create_decoder(
            self._graph_h, float(c.search_beam), float(c.output_beam), int(c.min_active), int(c.max_active),
            int(c.allow_partial), int(c.max_lanes), int(max_frames), int(self.device_index), int(c.main_q_factor),
            int(c.cand_factor), int(c.use_cuda_graphs), 0, 0, 0,  # lattice, fp16_logprobs, streaming
            0, int(self.eps_iterations), 0, 0, 0))  # lat_prune_interval, eps_iterations, arena, stream log, gc
        self._frames = int(max_frames)

    def pop_stats(self) -> dict:
        """Counters since the last call: lanes with an overflow bit set, lanes that ended without reaching a
        final state (allow_partial), lanes OASR returned no result for."""
        out, self._stats = self._stats, {k: 0 for k in self._stats}
        return out

    def decode(self, log_probs, lengths, boosts: Optional[Sequence[dict]] = None):
        import torch

        from decoders.types import Hypothesis

        if boosts and any(boosts):
            raise NotImplementedError("oasr: OASR's WFST decoder has no per-utterance word boosting")
        if log_probs.dim() != 3:
            raise ValueError(f"oasr: log_probs must be (B, T, V), got shape {tuple(log_probs.shape)}")
        B, T, V = log_probs.shape
        if V < self.graph.num_tokens:
            raise ValueError(f"oasr: log_probs have {V} columns, the graph reads {self.graph.num_tokens}")
        lp = log_probs.to(device=f"cuda:{self.device_index}", dtype=torch.float32)
        if self.cfg.acoustic_scale != 1.0:
            lp = lp * self.cfg.acoustic_scale
        lp = lp.contiguous()
        lens = torch.as_tensor(lengths).to("cpu", torch.int32)
        if lens.shape != (B,) or (B and (int(lens.min()) < 0 or int(lens.max()) > T)):
            raise ValueError(f"oasr: lengths must be ({B},) values in [0, {T}]")
        if T > self._frames:
            self._create(max(T, 2 * self._frames))
        out: list = []
        for i in range(0, B, self.cfg.max_lanes):
            out += self._decode_lanes(lp[i : i + self.cfg.max_lanes], lens[i : i + self.cfg.max_lanes], Hypothesis)
        return out

    def _decode_lanes(self, lp, lens, Hypothesis) -> list:
        import torch

        g, T = int(lp.shape[0]), int(lp.shape[1])
        cap = max(1, T)
        for _ in range(2):  # words beyond `cap` (multi-word arcs): re-run with room, as OASR's wrapper does
            words = torch.empty((g, cap), dtype=torch.int32)
            wlen = torch.empty((g,), dtype=torch.int32)
            scores = torch.empty((g,), dtype=torch.float64)
            meta = torch.empty((g, 3), dtype=torch.int32)  # ok, reached_final, overflow
            self.mod.wfst_decode_batch(self._dec_h, lp, lens, words, wlen, scores, meta)
            need = int(wlen.max()) if g else 0
            if need <= cap:
                break
            cap = need
        hyps = []
        W, L, S, M = words.tolist(), wlen.tolist(), scores.tolist(), meta.tolist()
        for b in range(g):
            ok, reached, ovf = M[b]
            self._stats["overflow_count"] += int(ovf != 0)
            self._stats["failed_count"] += int(not ok)
            self._stats["partial_count"] += int(ok and not reached)
            ids = W[b][: min(L[b], cap)] if ok else []
            hyps.append(Hypothesis(tokens=[], words=[self.words[w] for w in ids],
                                   score=float(S[b]) if ok else float("-inf")))
        return hyps

    def close(self) -> None:
        """Free OASR's decoder and graph handles (device memory), once."""
        mod = getattr(self, "mod", None)
        if mod is None:
            return
        if getattr(self, "_dec_h", None) is not None:
            mod.wfst_free_decoder(self._dec_h)
            self._dec_h = None
        if getattr(self, "_graph_h", None) is not None:
            mod.wfst_free_graph(self._graph_h)
            self._graph_h = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the process frees the device anyway
            pass


def build_oasr_decoder(cfg: Union[OasrWfstConfig, dict], ctx) -> OasrWfstDecoder:
    """The OASR column's decoder (what eval/bench/wfst_bench.py builds for decoder name "oasr")."""
    return OasrWfstDecoder(cfg, ctx)
