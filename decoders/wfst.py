"""WFST beam search over CTC log-probs with k2 `intersect_dense_pruned` semantics and word boosting.

    graph = WfstGraph.load("HLG.bin")
    decoder = WfstDecoder(graph, WfstDecoderConfig(search_beam=20.0), device="cuda")
    result = decoder.decode(log_probs, lengths, boosts=[{"hello": 4.0}, {}])
    result.word_strings[0], result.scores[0], result.overflow[0]

Semantics (the CPU reference, decoders/csrc/wfst_cpu.cpp, is the executable spec; k2 source:
k2/csrc/intersect_dense_pruned.cu, `GetPruningCutoffs` and `GetArcs`):
- Step t < len: every emitting arc of every frontier state is a candidate with
  end = score + (acoustic_scale * log_probs[t, ilabel] + weight + boost(words of the arc)). The candidate set is
  pruned against its EXACT maximum with k2's dynamic beam b (start: search_beam), updated per step from
  `active` = number of frontier states: within [min_active, max_active] (or 0) b <- 0.8 b +
  0.2 search_beam; under min_active b <- max(b, search_beam) * 1.25; over max_active b <- min(b,
  search_beam) * 0.8 (not in the last 5 steps, where min_active is also raised to max_active / 2).
  max_active is advisory (it only steers b), never a hard top-k. Admit iff end > max - b; recombine by
  destination state keeping the best incoming arc.
- Step t == len (final step): only FINAL arcs (no acoustic term), b = 1e10. If no frontier state has a
  FINAL arc and `allow_partial`, every arc of every frontier state is redirected into the final state with
  score + weight (k2's behaviour: "treat all states on the last frame as final"); the redirected arc's
  word is kept, `reached_final` is False. Without allow_partial such an utterance has no path: empty
  words, score -inf.
- Epsilon arcs (TLG; k2 has none): after each emitting step (and for the start state) an epsilon closure
  in Jacobi passes with the step's cutoff, until no state with epsilon arcs improves, at most
  `eps_iterations` passes (overflow bit 16 when still changing). The GPU overlaps pass k's resolution with
  pass k + 1's expansion; the converged closure is the same (decoders/include/wfst_kernels.cuh). An epsilon
  cycle whose score grows per loop (its weights plus word_bonus and an utterance's boosts on its words) has no best
  path and is a one-line ValueError before decoding (check_epsilon_cycles).
- Word boosting: per utterance {word: boost} (log domain, positive favours the word). Whenever an arc is
  taken, the boosts of the words it outputs (its aux words; usually one or none) are added, i.e. decoding the graph composed with a one-state
  boost acceptor, without composing. Zero boosts change nothing; out-of-vocabulary words are reported in
  `WfstResult.oov_boost_words` (never silently dropped).
- Scores are deterministic. Exact ties between equal-score paths may resolve differently between the CPU
  reference (first arc met) and the GPU (atomic order), as in k2.
- `output_beam` only prunes lattices (k2's meaning): it does not change the 1-best. `decode_lattice` returns
  lattices (decoders/lattice.py: n-best, MBR, posteriors, word times, k2 / OpenFst export).

Parity with k2 (tests/test_wfst_cpu.py, tests/test_wfst_agreement.py): identical words and scores (<= 2e-4)
to k2's offline intersection and to k2py's online intersecter on 100 % of the embedded clean/other sets at
default beams. At tight beams the k2py wheel differs from k2 proper in two ways, both reproduced exactly by
the Python model in tests/wfst_testlib.py: it scores FINAL arcs 0 (k2: -inf) on real frames, so they take part
in each frame's maximum and put the dead-end final state in the frontier; and its online intersecter, not
knowing the length, has no last-5-frames rule. This decoder follows k2 proper.

GPU pipeline per frame (decoders/include/wfst_kernels.cuh): Max -> Expand -> Resolve over the flattened tokens /
candidates of all utterances, then one Resolve per epsilon pass (each also expands the epsilon arcs of the
tokens it wrote: the next pass's candidates). By default the whole step loop runs as ONE cooperative kernel with
grid barriers where these kernels end (1.3-1.7x faster on the H200, most at small batches; decoders/csrc/wfst_launch.cu);
BEAMDEC_WFST_PERSISTENT=0 launches each kernel instead, and with BEAMDEC_WFST_CUDA_GRAPH=1 replays those launches as
a cached CUDA graph (slower here). BEAMDEC_WFST_FUSED_MAX=1 / 2 makes the persistent kernel fuse each step's Max walk
into the Resolve of the step before (exact; a second recombination table per lane; measured no faster on the H200, so
off by default: decoders/csrc/wfst_launch.cu; decoders/include/wfst_kernels.cuh "Fused max").

Capacities (GPU only; the CPU reference never runs out): any hit sets a per-utterance overflow bit
(decoders/include/wfst_defs.h); `decode` re-decodes flagged utterances with `rescue_factor` times larger
capacities (up to `max_rescues` times) and reports in `overflow` only what it could not absorb
(`rescued_overflow` says what sent each rescued utterance). The back-pointer arena holds word links only:
a token reached by an arc without output words inherits its predecessor's link, so the arena grows with
word ends rather than with every surviving token (the backtrack reads nothing but words).

CPU reference memory: the same word links, plus compaction between steps: the link store holds at most
max(65536, 2 L) + (one step's links) entries of 8 bytes, L being the links still reachable from the frontier
(about the words on the frontier's paths), so a long utterance costs memory in its words, not its frames
(`search_stats(...)["peak_stored_links"]` reports the peak).
"""
from __future__ import annotations

import math
import numbers
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence, Union

import numpy as np
import torch

from decoders.graph import EPSILON, FINAL, WfstGraph
from decoders.types import Hypothesis

# Result layout / bits: keep in sync with decoders/include/wfst_defs.h.
RESULT_HEADER = 4
OVERFLOW_CANDIDATES = 1
OVERFLOW_HASH = 2
OVERFLOW_ARENA = 4
OVERFLOW_FRONTIER = 8
OVERFLOW_EPSILON = 16
OVERFLOW_WORDS = 32
OVERFLOW_NAMES = {
    OVERFLOW_CANDIDATES: "candidates",
    OVERFLOW_HASH: "hash",
    OVERFLOW_ARENA: "arena",
    OVERFLOW_FRONTIER: "frontier",
    OVERFLOW_EPSILON: "epsilon",
    OVERFLOW_WORDS: "words",
}
FLAG_REACHED_FINAL = 1
FLAG_HAS_PATH = 2


def count_rescue_causes(stats: dict, rescued_overflow) -> None:
    """Adds `rescued_<capacity>` counters to a benchmark row's stats: per capacity (OVERFLOW_NAMES), the rescued
    utterances whose first pass hit it (WfstResult / WfstLattices .rescued_overflow; an utterance can count under
    several), so a row says what its rescues were for."""
    for bits in rescued_overflow:
        for bit, name in OVERFLOW_NAMES.items():
            if int(bits) & bit:
                stats[f"rescued_{name}"] = stats.get(f"rescued_{name}", 0) + 1

BoostTable = dict  # {word id or word string: boost (log domain)}


@dataclass
class WfstDecoderConfig:
    """Search settings (k2 names) plus GPU capacities; validated at construction."""

    search_beam: float = 20.0
    output_beam: float = 8.0
    min_active: int = 30
    max_active: int = 10000
    allow_partial: bool = True
    acoustic_scale: float = 1.0
    # Frames whose blank posterior exceeds this are removed before decoding (WeNet-style frame skipping,
    # outside the search). None: keep every frame. Needs `blank_id` (or graph.info["blank_id"]).
    blank_skip_threshold: Optional[float] = None
    blank_id: Optional[int] = None
    # ---- capacities (per utterance unless noted); None = derived from max_active / the batch ----
    # Defaults sized from what the search needs (eval/bench/wfst_capacity_stats.py: the CPU reference's exact
    # counts, which predicted the H200 run's rescues one for one; char TLG/HLG at tiny/small/bench scale, beam 17,
    # max_active 10000, 200 utterances each): per-utterance peak frontier p99 12k-39k states (one 171k outlier),
    # peak admitted candidates p99 22k-57k, word links per step 63-126 on average (worst utterance 368).
    # Anything rarer is rescued. Those counts are at the harness's acoustic scale 3; at the GPU benchmarks' 1.0 the
    # search is wider: bench BPE compact TLG, 200 'other', p50 / p90 / p99 14.5k / 30.7k / 123k, 11 utterances above
    # the default frontier at 103k-139k (wfst_capacity_stats --acoustic-scale 1.0). A frontier of 160k removes their
    # rescue (H100: 1-best +30 %, lattice +5 %) for 1.8 GB more at batch 200, every lane sized for the largest.
    frontier_capacity: Optional[int] = None  # distinct states per step (default 4 * max_active, >= 4096)
    candidate_factor: int = 2  # admitted candidates per step = candidate_factor * frontier_capacity
    arena_capacity: Optional[int] = None  # word links for the batch (default ~512 per decoded step)
    words_capacity: Optional[int] = None  # words per utterance (default T + 16)
    eps_iterations: int = 8  # epsilon-closure passes per frame (TLG)
    # Lattice mode (CUDA): the token and arc arenas, shared by the batch, are sized per decoded step. None: 1024
    # tokens / 2048 arcs to start with; either way the decoder raises them to 1.25x the densest per-step use it has
    # seen (decoders/lattice.py lattice_capacities), so a workload that needs more pays one rescue, not one per call.
    lattice_tokens_per_step: Optional[int] = None
    lattice_arcs_per_step: Optional[int] = None
    rescue_factor: int = 8
    max_rescues: int = 2
    check_finite: bool = True  # reject NaN/+inf inside the valid frames (-inf, log 0, is valid)
    # k2's online semantics (k2 OnlineDenseIntersecter; decoders/wfst_stream.py): the utterance length is unknown
    # until the end, so the offline-only clauses of the dynamic beam (the last-5-frames min_active rule and its
    # "no tightening" twin) stay inert on emitting steps; the final step is unchanged (beam 1e10). A streaming
    # decode equals an offline decode with online=True exactly.
    online: bool = False
    # Added to the score of every word the graph outputs (per word of an arc with words): a word-insertion bonus
    # (Kaldi's word_ins_penalty with the other sign; Flashlight's word_score, in the same log units as the graph's
    # weights). The search, lattices and streaming see weight + word_bonus * (words on the arc) as the arc weight.
    word_bonus: float = 0.0

    def __post_init__(self):
        if isinstance(self.word_bonus, bool) or not isinstance(self.word_bonus, numbers.Real) \
                or not math.isfinite(self.word_bonus):
            raise ValueError(f"word_bonus must be a finite number, got {self.word_bonus!r}")
        if not (self.search_beam > 0 and math.isfinite(self.search_beam)):
            raise ValueError(f"search_beam must be a finite number > 0, got {self.search_beam}")
        if not self.output_beam > 0:
            raise ValueError(f"output_beam must be > 0, got {self.output_beam}")
        if self.min_active < 0 or self.max_active <= self.min_active:
            raise ValueError(f"need 0 <= min_active < max_active, got {self.min_active}, {self.max_active}")
        if not (self.acoustic_scale > 0 and math.isfinite(self.acoustic_scale)):
            raise ValueError(f"acoustic_scale must be > 0, got {self.acoustic_scale}")
        if self.blank_skip_threshold is not None and not 0.0 < self.blank_skip_threshold <= 1.0:
            raise ValueError(f"blank_skip_threshold must be in (0, 1] or None, got {self.blank_skip_threshold}")
        if self.blank_id is not None and (isinstance(self.blank_id, bool) or not isinstance(self.blank_id, (int, np.integer))
                                          or self.blank_id < 0):
            raise ValueError(f"blank_id must be a column index >= 0 or None, got {self.blank_id!r}")
        if self.eps_iterations < 1:
            raise ValueError(f"eps_iterations must be >= 1, got {self.eps_iterations}")
        for name in ("frontier_capacity", "arena_capacity", "words_capacity", "lattice_tokens_per_step",
                     "lattice_arcs_per_step"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"{name} must be an integer >= 1 or None, got {v!r}")
        if self.candidate_factor < 1 or self.rescue_factor < 2 or self.max_rescues < 0:
            raise ValueError("candidate_factor must be >= 1, rescue_factor >= 2, max_rescues >= 0")

    def scaled(self, factor: int, batch: int, frames: int, total_steps: Optional[int] = None,
               longest: Optional[int] = None) -> "WfstDecoderConfig":
        """The same search with every capacity multiplied by `factor` (the rescue instance)."""
        caps = gpu_capacities(self, batch, frames, total_steps, longest)
        return replace(
            self,
            frontier_capacity=caps["frontier_capacity"] * factor,
            arena_capacity=min(caps["arena_capacity"] * factor, 2**31 - 1),
            words_capacity=caps["words_capacity"] * factor,
            eps_iterations=self.eps_iterations * 2,
        )


def _next_pow2(x: int) -> int:
    return 1 << max(0, int(x - 1).bit_length())


def gpu_capacities(cfg: WfstDecoderConfig, batch: int, frames: int, total_steps: Optional[int] = None,
                   longest: Optional[int] = None) -> dict:
    """GPU capacities. total_steps = sum(lengths + 1) (the arena is shared by the batch, so it is sized by
    the decoded steps, not by batch * padded T); longest = max(lengths) (the room for one dense utterance is
    sized by the longest one, not by the padded T: a batch sliced from a padded set has T past every length)."""
    frontier = cfg.frontier_capacity or max(4 * cfg.max_active, 4096)
    frontier = min(frontier, 2**27)
    steps = total_steps if total_steps is not None else batch * (frames + 1)
    tail = frames if longest is None else min(max(int(longest), 0), frames)
    # word links per step: batch means 63-126 measured, one utterance <= 368: 512 per step for the batch plus
    # room for one long, dense utterance (what decides at small batches, where nothing averages out).
    arena = cfg.arena_capacity or int(min(max(steps * 512 + 2048 * (tail + 1), 2**18), 2**28))
    return {
        "frontier_capacity": frontier,
        "candidate_capacity": min(cfg.candidate_factor * frontier, 2**30),
        "hash_capacity": _next_pow2(frontier + frontier // 2),  # load <= 2/3 even with a full frontier
        "arena_capacity": arena,
        "words_capacity": cfg.words_capacity or frames + 16,
    }


@dataclass
class WfstResult:
    """Batch result. `overflow` holds the bits the rescue could NOT absorb (0 = clean)."""

    words: list[list[int]]
    word_strings: list[list[str]]
    scores: torch.Tensor  # (B,) float64; -inf where no path was found
    overflow: list[int]
    reached_final: list[bool]
    has_path: list[bool] = field(default_factory=list)
    rescued: list[int] = field(default_factory=list)  # utterances re-decoded with larger capacities
    # overflow bits of the first pass that sent each rescued utterance (same order as `rescued`)
    rescued_overflow: list[int] = field(default_factory=list)
    oov_boost_words: list[list] = field(default_factory=list)  # per utterance: boost keys not in the graph

    def hypotheses(self) -> list[Hypothesis]:
        return [
            Hypothesis(tokens=[], words=list(ws), score=float(s))
            for ws, s in zip(self.word_strings, self.scores.tolist())
        ]

    @staticmethod
    def overflow_names(bits: int) -> list[str]:
        return [name for bit, name in OVERFLOW_NAMES.items() if bits & bit]


# ---------------------------------------------------------------------------------------------------
# Decoder-side caches of a graph, keyed by id(graph) and dropped when the graph is collected (a WfstGraph is an
# unhashable dataclass, and the decoder's derived data does not belong in the graph object itself).
# Graph upload: once per (graph, device), shared by every decoder instance.
_graph_cache: dict[tuple[int, str], dict] = {}
_MAX_DEVICE_TOKENS = 32768  # wfst::kMaxDeviceTokens: the device graph's int16 ilabel
# Host-side derived data per graph: {"arrays": _graph_arrays, "eps_depth": int, "word_index": {str: id}}
_host_cache: dict[int, dict] = {}
_graph_cache_lock = threading.Lock()


def _host_entry(graph: WfstGraph) -> dict:
    """The host cache entry of `graph` (created on first use; caller holds _graph_cache_lock)."""
    key = id(graph)
    entry = _host_cache.get(key)
    if entry is None:
        entry = _host_cache[key] = {}
        weakref.finalize(graph, _host_cache.pop, key, None)
    return entry


def clear_graph_cache() -> None:
    """Forget every uploaded graph (the next decoder uploads again; benchmarks that charge the upload)."""
    with _graph_cache_lock:
        _graph_cache.clear()


def _graph_arrays(graph: WfstGraph) -> dict[str, np.ndarray]:
    """Per-state arc sub-ranges (emitting | epsilon | final), checking the canonical CSR order."""
    n = graph.num_states
    rs = np.asarray(graph.row_splits, dtype=np.int64)
    if rs.shape != (n + 1,) or rs[0] != 0 or rs[-1] != graph.num_arcs or np.any(np.diff(rs) < 0):
        raise ValueError("graph: row_splits must be monotone, start at 0 and end at num_arcs")
    il = np.asarray(graph.ilabel, dtype=np.int64)
    dest = np.asarray(graph.dest, dtype=np.int64)
    if graph.num_arcs and (dest.min() < 0 or dest.max() >= n):
        raise ValueError(f"graph: arc destination outside [0, {n})")
    bad = (il < EPSILON) | (il >= graph.num_tokens)
    if np.any(bad):
        raise ValueError(f"graph: ilabel must be in [0, {graph.num_tokens}) or FINAL/EPSILON")
    if not (0 <= graph.start_state < n and 0 <= graph.final_state < n):
        raise ValueError("graph: start_state/final_state out of range")
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(rs))
    group = np.where(il >= 0, 0, np.where(il == EPSILON, 1, 2))
    if graph.num_arcs > 1 and np.any((np.diff(group) < 0) & (np.diff(src) == 0)):
        raise ValueError("graph: arcs of a state must be ordered emitting, then epsilon, then final")
    n_emit = np.bincount(src, weights=(group == 0), minlength=n).astype(np.int64)
    n_eps = np.bincount(src, weights=(group == 1), minlength=n).astype(np.int64)
    return {
        "row_splits": rs.astype(np.int32),
        "eps_begin": (rs[:-1] + n_emit).astype(np.int32),
        "final_begin": (rs[:-1] + n_emit + n_eps).astype(np.int32),
        "dest": dest.astype(np.int32),
        "ilabel": il.astype(np.int32),
        "aux_splits": np.asarray(graph.aux_csr()[0], dtype=np.int32),
        "aux_words": np.asarray(graph.aux_csr()[1], dtype=np.int32),
        "weight": np.asarray(graph.weight, dtype=np.float32),
    }


def epsilon_depth(graph: WfstGraph) -> int:
    """Longest chain of epsilon arcs (0: none), or -1 when the epsilon subgraph has a cycle.

    With depth D, D Jacobi closure passes always converge: a token created or improved by pass k (0-based)
    was reached by k + 1 epsilon arcs, so after pass D - 1 no improved token has an epsilon arc left to relax
    (the closure's convergence test only looks at tokens with epsilon arcs). This lets the decoder run D
    passes instead of `eps_iterations` without changing any result (our TLGs: D = 3..4 against the default
    bound 8).
    """
    il = np.asarray(graph.ilabel)
    m = il == EPSILON
    if not m.any():
        return 0
    n = graph.num_states
    src = np.asarray(graph.src())[m].astype(np.int64)
    dst = np.asarray(graph.dest)[m].astype(np.int64)
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    starts = np.searchsorted(src, np.arange(n + 1))
    indeg = np.bincount(dst, minlength=n)
    frontier = np.nonzero(indeg == 0)[0]
    level = 0
    while frontier.size:  # level-synchronous Kahn: the number of levels with arcs is the longest path
        cnt = starts[frontier + 1] - starts[frontier]
        total = int(cnt.sum())
        if total == 0:
            break
        idx = np.repeat(starts[frontier], cnt) + (np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        d = dst[idx]
        np.subtract.at(indeg, d, 1)
        nxt = np.unique(d)
        frontier = nxt[indeg[nxt] == 0]
        level += 1
    if np.any(indeg > 0):  # states on (or behind) an epsilon cycle never lost all their predecessors
        return -1
    return level


def device_graph_arrays(arrays: dict[str, np.ndarray], num_tokens: int) -> dict[str, np.ndarray]:
    """The CUDA kernels' layout of `_graph_arrays` (wfst::DeviceGraph, decoders/include/wfst_launch.h): the same state
    and arc arrays with `ilabel` in int16, and instead of the per-arc word CSR (4 B an arc) a word-arc index -- per
    block of 32 arcs a bit mask of the arcs that output words and the number of word arcs before the block, then the
    word arcs' splits into the words -- under the op argument names "aux_splits" (that index) and "aux_words" (the
    words, unchanged). 10.25 B an arc + 4 B a word arc instead of 16 B an arc; the bench char compact TLG: 210 -> 159
    MiB. Every search reads the same arcs, weights and words, so results are unchanged."""
    if num_tokens > _MAX_DEVICE_TOKENS:
        raise ValueError(f"the CUDA WFST decoder holds token ids in 16 bits: at most {_MAX_DEVICE_TOKENS} tokens, "
                         f"the graph has {num_tokens}")
    splits = np.asarray(arrays["aux_splits"], dtype=np.int64)
    A = splits.shape[0] - 1
    counts = np.diff(splits)
    has = counts > 0
    blocks = (A + 31) // 32
    flags = np.zeros(blocks * 32, dtype=bool)
    flags[:A] = has
    bits = np.packbits(flags.reshape(blocks, 32), axis=1, bitorder="little").view("<u4").reshape(blocks)
    per_block = flags.reshape(blocks, 32).sum(axis=1)
    before = np.concatenate([[0], np.cumsum(per_block)[:-1]]) if blocks else np.zeros(0, np.int64)
    index = np.empty(2 * blocks, dtype=np.int32)
    index[0::2] = bits.view(np.int32)
    index[1::2] = before
    word_splits = np.concatenate([[0], np.cumsum(counts[has])]).astype(np.int32)
    out = dict(arrays)
    out["ilabel"] = np.asarray(arrays["ilabel"]).astype(np.int16)
    out["aux_splits"] = np.concatenate([index, word_splits]).astype(np.int32)
    return out


def _upload_packed(arrays: dict[str, np.ndarray], device: torch.device) -> dict:
    """One device allocation for all of the graph's arrays (each 256-byte aligned), views handed out per array: one
    caching-allocator segment instead of one per array, each rounded up to 2 MiB."""
    offsets, total = {}, 0
    for k, v in arrays.items():
        offsets[k] = total
        total += -(-max(v.nbytes, 1) // 256) * 256
    staged = np.zeros(total, dtype=np.uint8)
    for k, v in arrays.items():
        staged[offsets[k]: offsets[k] + v.nbytes] = np.ascontiguousarray(v).view(np.uint8).reshape(-1)
    buf = torch.from_numpy(staged).to(device)
    out = {}
    for k, v in arrays.items():
        dtype = {np.dtype(np.int32): torch.int32, np.dtype(np.int16): torch.int16,
                 np.dtype(np.float32): torch.float32}[v.dtype]
        out[k] = buf[offsets[k]: offsets[k] + v.nbytes].view(dtype)
    return out


def graph_on_device(graph: WfstGraph, device: Union[str, torch.device]) -> dict:
    """Device tensors of `graph` (uploaded once per (graph, device) and cached while graph lives)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (id(graph), str(device))
    with _graph_cache_lock:
        hit = _graph_cache.get(key)
        if hit is not None:
            return hit
        entry = _host_entry(graph)
        host = entry.get("arrays")
        if host is None:
            host = entry["arrays"] = _graph_arrays(graph)
        if device.type == "cuda":
            if "device_arrays" not in entry:
                entry["device_arrays"] = device_graph_arrays(host, graph.num_tokens)
            tensors = _upload_packed(entry["device_arrays"], device)
        else:
            tensors = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in host.items()}
        tensors["has_eps"] = bool(np.any(host["eps_begin"] < host["final_begin"]))
        rs = np.asarray(host["row_splits"], dtype=np.int64)
        tensors["max_degree"] = int(np.diff(rs).max()) if rs.size > 1 else 0  # the CUDA op's emit-slots packing
        if "eps_depth" not in entry:
            entry["eps_depth"] = epsilon_depth(graph) if tensors["has_eps"] else 0
        tensors["eps_depth"] = entry["eps_depth"]
        _graph_cache[key] = tensors
        weakref.finalize(graph, _graph_cache.pop, key, None)
        return tensors


def arc_weights(g: dict, graph: WfstGraph, word_bonus: float) -> torch.Tensor:
    """The arc weights a search with `word_bonus` reads: graph.weight + word_bonus * (words on the arc), in float32,
    computed once per (graph, device, bonus) on the host (so every backend reads the same numbers) and cached beside
    the graph's device arrays; bonus 0 is the graph's own weights."""
    if word_bonus == 0:
        return g["weight"]
    key = ("weight", float(word_bonus))
    hit = g.get(key)
    if hit is None:
        hit = g[key] = torch.from_numpy(_bonus_weights(graph, word_bonus)).to(g["weight"].device)
    return hit


def _bonus_weights(graph: WfstGraph, word_bonus: float) -> np.ndarray:
    """graph.weight + word_bonus * (words on the arc), float32, on the host (graph.weight itself for bonus 0)."""
    w = np.asarray(graph.weight, dtype=np.float32)
    if word_bonus == 0:
        return w
    splits, _ = graph.aux_csr()
    return w + np.float32(word_bonus) * np.diff(np.asarray(splits, dtype=np.int64)).astype(np.float32)


def max_emit_weight(graph: WfstGraph, word_bonus: float) -> float:
    """The largest weight of an emitting arc as a search with `word_bonus` reads it (arc_weights), computed once per
    (graph, bonus) on the host: the CUDA decoder's fused max bounds a token's best arc with it to skip tokens that
    cannot reach a step's maximum (decoders/include/wfst_kernels.cuh "Fused max"; no result depends on it)."""
    with _graph_cache_lock:
        entry = _host_entry(graph)
        key = ("max_emit_weight", float(word_bonus))
        hit = entry.get(key)
        if hit is None:
            emit = np.asarray(graph.ilabel) >= 0
            hit = entry[key] = float(_bonus_weights(graph, word_bonus)[emit].max()) if emit.any() else 0.0
    return hit


# ---------------------------------------------------------------------------------------------------
def _hash_u32(x: int) -> int:
    """Same mixer as wfst::hash_u32 (decoders/include/wfst_defs.h)."""
    m = 0xFFFFFFFF
    x &= m
    x ^= x >> 16
    x = (x * 0x7FEB352D) & m
    x ^= x >> 15
    x = (x * 0x846CA68B) & m
    x ^= x >> 16
    return x


# Largest |boost| accepted (log domain). The kernels add boosts in float32: 1e39 used to pass a float64
# finiteness check, become +inf in float32 and silently kill every path through the word; and boosts near
# float32's range swamp the acoustic terms of a path's score long before they overflow. A log-domain boost of
# 1e4 (a factor e^10000) is already far beyond any useful bias (search_beam is ~20).
MAX_ABS_BOOST = 1.0e4


def _check_boost(where: str, value) -> float:
    """The boost as the kernel will see it (float32), or a one-line ValueError naming `where`."""
    try:
        f = float(value)
    except OverflowError:  # an int beyond float64
        f = math.inf
    v32 = np.float32(f) if math.isfinite(f) and abs(f) < 3.4e38 else np.float32(np.inf)
    if not (np.isfinite(v32) and abs(float(v32)) <= MAX_ABS_BOOST):
        raise ValueError(f"{where}: boost {value!r} must be finite and within +-{MAX_ABS_BOOST:g} "
                         "(log domain, added in float32)")
    return float(v32)


def epsilon_cycle_arcs(src: np.ndarray, dest: np.ndarray, ilabel: np.ndarray, num_states: int) -> np.ndarray:
    """Indices of the epsilon arcs (ilabel == EPSILON) that lie on an epsilon cycle: both ends in one strongly
    connected component of the epsilon subgraph (a self-loop is its own component). Empty when it is acyclic."""
    eps = np.nonzero(np.asarray(ilabel) == EPSILON)[0]
    if eps.size == 0:
        return eps.astype(np.int64)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    s, d = np.asarray(src)[eps].astype(np.int64), np.asarray(dest)[eps].astype(np.int64)
    adj = csr_matrix((np.ones(eps.size, dtype=np.int8), (s, d)), shape=(num_states, num_states))
    comp = connected_components(adj, directed=True, connection="strong")[1]
    return eps[comp[s] == comp[d]].astype(np.int64)


def _epsilon_cycles(graph: WfstGraph) -> Optional[dict]:
    """The arcs on the epsilon cycles of `graph` ({"arcs", "src", "dst", "ok": bonuses already checked}), or None when
    its epsilon arcs are acyclic (known at once from the decoder's epsilon_depth when that ran). Cached per graph."""
    with _graph_cache_lock:
        entry = _host_entry(graph)
        if "eps_cycles" in entry:
            return entry["eps_cycles"]
        acyclic = entry.get("eps_depth", -1) >= 0
    cycles = None
    if not acyclic:
        src = np.asarray(graph.src())
        arcs = epsilon_cycle_arcs(src, graph.dest, graph.ilabel, graph.num_states)
        if arcs.size:
            cycles = {"arcs": arcs, "src": src[arcs].astype(np.int64),
                      "dst": np.asarray(graph.dest)[arcs].astype(np.int64), "ok": set()}
    with _graph_cache_lock:
        _host_entry(graph)["eps_cycles"] = cycles
    return cycles


def check_epsilon_cycles(graph: WfstGraph, word_bonus: float, boosts: Sequence[Mapping[int, float]] = ()) -> None:
    """A one-line ValueError when an epsilon cycle of `graph` gains score once `word_bonus` (per output word) and an
    utterance's word boosts ({word id: boost}) are added to its arcs: every loop through it raises the score, so no
    best path exists (the closure would only stop at eps_iterations, overflow-flagged, with a result that depends on
    the order of relaxation). Zero-gain cycles are fine (they never improve a token). Cost: one strongly-connected-
    component pass per graph; graphs whose epsilon arcs are acyclic (our TLGs) need nothing more."""
    cycles = _epsilon_cycles(graph)
    if cycles is None:
        return
    boosted = [(b, t) for b, t in enumerate(boosts) if t]
    bonus = float(word_bonus)
    if bonus in cycles["ok"] and not boosted:  # the bonus-only verdict is the same for every batch
        return
    cyc = cycles["arcs"]
    splits, words = graph.aux_csr()
    splits = np.asarray(splits, dtype=np.int64)
    base = np.asarray(graph.weight, dtype=np.float64)[cyc] + bonus * (splits[cyc + 1] - splits[cyc])
    cyc_words = None  # the words of each cycle arc, listed once for all boosted utterances
    for b, table in [(-1, {})] + boosted:
        if b < 0 and bonus in cycles["ok"]:
            continue
        gain = base
        if b >= 0:  # the boosts of the words on each cycle arc (only arcs with words can change)
            if cyc_words is None:
                cyc_words = [[int(w) for w in words[splits[a]:splits[a + 1]]] for a in cyc]
            extra = np.array([sum(table.get(w, 0.0) for w in ws) for ws in cyc_words])
            if not extra.any():
                continue
            gain = base + extra
        # no arc that gains: no cycle can (the usual case: epsilon weights <= 0, no bonus)
        state = _positive_cycle_state(cycles["src"], cycles["dst"], gain) if (gain > 0).any() else None
        if state is not None:
            who = "" if b < 0 else f" and utterance {b}'s word boosts"
            raise ValueError(f"the graph has an epsilon cycle through state {state} whose score grows with every "
                             f"loop under word_bonus={word_bonus:g}{who}: no best path exists (lower the bonus or "
                             "boosts, or remove the cycle's word outputs)")
        if b < 0:
            with _graph_cache_lock:
                cycles["ok"].add(bonus)


# Bellman-Ford's work bound in check_epsilon_cycles (rounds x cycle arcs): past it the check gives up without an
# error and the search's own guard remains (the closure stops at eps_iterations, overflow bit 16 per utterance).
_MAX_CYCLE_CHECK_WORK = 50_000_000


def _positive_cycle_state(src: np.ndarray, dst: np.ndarray, gain: np.ndarray) -> Optional[int]:
    """A state on (or reached from) a cycle of positive total gain among the arcs (src, dst, gain), or None:
    max-plus Bellman-Ford from every state at 0; still improving after as many rounds as states -> a positive cycle.
    Improvements below 1e-5 (float rounding of a zero-gain cycle) do not count. None also when the rounds would pass
    _MAX_CYCLE_CHECK_WORK before deciding (a huge epsilon component with gaining arcs: left to the runtime flag)."""
    nodes, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    s, d = inv[: src.size], inv[src.size:]
    dist = np.zeros(nodes.size)
    rounds = min(nodes.size, max(1, _MAX_CYCLE_CHECK_WORK // max(1, src.size)))
    for _ in range(rounds):
        cand = np.full(nodes.size, -np.inf)
        np.maximum.at(cand, d, dist[s] + gain)
        better = cand > dist + 1e-5
        if not better.any():
            return None
        dist = np.where(better, cand, dist)
    return int(nodes[np.argmax(better)]) if rounds == nodes.size else None


def build_boost_tables(
    boosts: Optional[Sequence[Optional[BoostTable]]], batch: int, graph: WfstGraph, word_bonus: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, list[list]]:
    """Per-utterance open-addressing tables (keys -1 = empty) + the out-of-vocabulary keys per utterance, after
    check_epsilon_cycles with the search's `word_bonus` and these boosts."""
    if boosts is None:
        check_epsilon_cycles(graph, word_bonus)
        return torch.zeros((batch, 0), dtype=torch.int32), torch.zeros((batch, 0), dtype=torch.float32), [
            [] for _ in range(batch)
        ]
    if isinstance(boosts, (Mapping, str)) or not isinstance(boosts, Sequence):
        raise TypeError(f"boosts must be a list with one dict (or None) per utterance, got {type(boosts).__name__}")
    if len(boosts) != batch:
        raise ValueError(f"boosts must have one entry per utterance ({batch}), got {len(boosts)}")
    num_words = graph.num_words
    index = None
    if graph.words is not None:
        with _graph_cache_lock:
            entry = _host_entry(graph)
            index = entry.get("word_index")
            if index is None:
                index = entry["word_index"] = {w: i for i, w in enumerate(graph.words)}
    resolved: list[dict[int, float]] = []
    oov: list[list] = []
    for b, table in enumerate(boosts):
        if table is None:
            table = {}
        if not isinstance(table, Mapping):
            raise TypeError(f"boosts[{b}] must be a dict {{word: boost}} or None, got {type(table).__name__}")
        ids: dict[int, float] = {}
        bad: list = []
        for word, value in table.items():
            where = f"boosts[{b}][{word!r}]"
            if isinstance(word, bool) or not isinstance(word, (str, int, np.integer)):
                raise TypeError(f"boosts[{b}]: word {word!r} must be a word string or an int word id, "
                                f"got {type(word).__name__}")
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"{where}: boost {value!r} must be a number (log domain), got {type(value).__name__}")
            value = _check_boost(where, value)
            if isinstance(word, str):
                wid = index.get(word) if index is not None else None
            else:
                wid = int(word)
            if wid is None or not 1 <= wid < num_words:
                bad.append(word)
                continue
            if value != 0.0:
                ids[wid] = _check_boost(f"boosts[{b}]: the summed boosts of word id {wid}", ids.get(wid, 0.0) + value)
        resolved.append(ids)
        oov.append(bad)
    check_epsilon_cycles(graph, word_bonus, resolved)
    most = max((len(r) for r in resolved), default=0)
    if most == 0:
        return torch.zeros((batch, 0), dtype=torch.int32), torch.zeros((batch, 0), dtype=torch.float32), oov
    cap = _next_pow2(2 * most)
    keys = np.full((batch, cap), -1, dtype=np.int32)
    values = np.zeros((batch, cap), dtype=np.float32)
    for b, ids in enumerate(resolved):
        for wid, value in ids.items():
            h = _hash_u32(wid) & (cap - 1)
            while keys[b, h] != -1:
                h = (h + 1) & (cap - 1)
            keys[b, h] = wid
            values[b, h] = value
    return torch.from_numpy(keys), torch.from_numpy(values), oov


_fake_registered = False


def _ops():
    global _fake_registered
    from decoders._ext import ops

    namespace = ops()
    if not _fake_registered:
        _fake_registered = True
        try:

            @torch.library.register_fake("beamdec::wfst_decode")
            def _(log_probs, lengths, *args):  # shape-only implementation for torch.compile / opcheck
                words_capacity = args[22]  # (a trailing `online` may follow)
                return log_probs.new_empty((log_probs.shape[0], RESULT_HEADER + words_capacity), dtype=torch.int32)

        except RuntimeError:  # already registered by another import path
            pass
    return namespace


class WfstDecoder:
    """Batched WFST decoder over one graph on one device ("cpu": the C++ reference; "cuda": the GPU)."""

    def __init__(self, graph: WfstGraph, config: Optional[WfstDecoderConfig] = None, device="cpu"):
        self.graph = graph
        self.config = config or WfstDecoderConfig()
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {device}")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("WfstDecoder: device='cuda' requested but torch sees no CUDA device")
        self._graph = graph_on_device(graph, self.device)
        self._arena_high: dict[int, int] = {}  # batch size -> the largest arena a call of it used (_run)
        blank = self.config.blank_id if self.config.blank_id is not None else graph.info.get("blank_id")
        if self.config.blank_skip_threshold is not None and blank is None:
            raise ValueError("blank_skip_threshold needs config.blank_id (or graph.info['blank_id'])")
        if blank is not None:
            # a negative id would index from the end (-3 read column V - 3), one >= V fails late
            source = "config.blank_id" if self.config.blank_id is not None else "graph.info['blank_id']"
            if isinstance(blank, bool) or not isinstance(blank, (int, np.integer)) or not 0 <= blank < graph.num_tokens:
                raise ValueError(f"{source} must be a column index in [0, V={graph.num_tokens}), got {blank!r}")
            blank = int(blank)
        self._blank_id = blank

    # ---- input checks -----------------------------------------------------------------------------
    def _check(self, log_probs: torch.Tensor, lengths) -> torch.Tensor:
        if not isinstance(log_probs, torch.Tensor):
            raise ValueError("log_probs must be a torch.Tensor (B, T, V)")
        if log_probs.dim() != 3:
            raise ValueError(f"log_probs must have shape (B, T, V), got {tuple(log_probs.shape)}")
        if log_probs.dtype not in (torch.float32, torch.float16):
            raise ValueError(f"log_probs must be float32 or float16, got {log_probs.dtype}")
        if log_probs.device.type != self.device.type:
            raise ValueError(f"log_probs is on {log_probs.device}, the decoder on {self.device}")
        B, T, V = log_probs.shape
        if V != self.graph.num_tokens:
            raise ValueError(f"log_probs has V={V} columns, the graph reads {self.graph.num_tokens} tokens")
        lengths = torch.as_tensor(lengths)
        if lengths.dim() != 1 or lengths.shape[0] != B or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
            raise ValueError(f"lengths must be an integer tensor of shape ({B},)")
        lengths = lengths.to("cpu", torch.int64)
        if B and (int(lengths.min()) < 0 or int(lengths.max()) > T):
            raise ValueError(f"lengths must be in [0, T={T}], got min {int(lengths.min())} max {int(lengths.max())}")
        # -inf is log(0), a valid log-prob (the search never admits an arc that reads it); NaN and +inf are not (NaN
        # compares false everywhere and +inf wins every max), on both backends. First one reduction over the whole
        # tensor (max propagates NaN; one kernel and one read-back on CUDA, the common case), then, only when it
        # finds either, the masked search that tells a padded frame (allowed) from a valid one and names it
        if self.config.check_finite and B and T and not float(log_probs.max()) < math.inf:
            valid = torch.arange(T, device=log_probs.device)[None, :] < lengths.to(log_probs.device)[:, None]
            ok = (log_probs < math.inf).all(dim=2) | ~valid  # one pass: False exactly for NaN and +inf
            if not bool(ok.all()):
                b, t = (~ok).nonzero()[0].tolist()
                raise ValueError(f"log_probs contains NaN or +inf inside the valid frames (utterance {b}, frame {t}); "
                                 "-inf (log 0) is allowed")
        return lengths

    def _skip_blanks(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        thr = self.config.blank_skip_threshold
        blank_lp = log_probs[:, :, self._blank_id].float()  # (B, T)
        T = log_probs.shape[1]
        valid = torch.arange(T, device=log_probs.device)[None, :] < lengths.to(log_probs.device)[:, None]
        keep = valid & ~(blank_lp > math.log(thr))
        new_lengths = keep.sum(dim=1).cpu()
        rows = [log_probs[b][keep[b]] for b in range(log_probs.shape[0])]
        out = log_probs.new_zeros((log_probs.shape[0], max(1, int(new_lengths.max())), log_probs.shape[2]))
        for b, r in enumerate(rows):
            out[b, : r.shape[0]] = r
        return out.contiguous(), new_lengths

    # ---- decoding ---------------------------------------------------------------------------------
    def _eps_passes(self, cfg: WfstDecoderConfig) -> int:
        """Closure passes per frame: 0 without epsilons; the epsilon depth D (enough to converge, see
        epsilon_depth) when the epsilon subgraph is acyclic and that is below the configured bound; else the
        bound (overflow-flagged when it does not converge)."""
        g = self._graph
        if not g["has_eps"]:
            return 0
        depth = g["eps_depth"]
        return min(int(cfg.eps_iterations), max(1, depth)) if depth >= 0 else int(cfg.eps_iterations)

    def _graph_args(self, log_probs, lengths, keys, values, cfg: WfstDecoderConfig) -> list:
        """The op arguments up to eps_iterations (shared by wfst_decode and wfst_search_stats)."""
        g = self._graph
        return [
            log_probs,
            lengths,
            g["row_splits"],
            g["eps_begin"],
            g["final_begin"],
            g["dest"],
            g["ilabel"],
            g["aux_splits"],
            g["aux_words"],
            arc_weights(g, self.graph, cfg.word_bonus),
            int(self.graph.start_state),
            int(self.graph.final_state),
            keys.to(self.device),
            values.to(self.device),
            float(cfg.search_beam),
            int(cfg.min_active),
            int(cfg.max_active),
            bool(cfg.allow_partial),
            float(cfg.acoustic_scale),
            self._eps_passes(cfg),
        ]

    def _run(self, log_probs, lengths, keys, values, cfg: WfstDecoderConfig) -> torch.Tensor:
        B = log_probs.shape[0]
        caps = gpu_capacities(cfg, B, log_probs.shape[1], int(lengths.sum()) + int(lengths.numel()),
                              int(lengths.max()) if lengths.numel() else 0)
        if cfg.arena_capacity is None:
            # Grow-only per batch size, with 25 % headroom when it grows: the workspace (the arena is the part that
            # varies with the lengths) then keeps one size across a run's batches, so torch's caching allocator
            # reuses one segment instead of keeping a slightly smaller stale one beside each larger request. A
            # larger arena changes no result (capacities only bound the search's storage).
            high = self._arena_high.get(B, 0)
            if caps["arena_capacity"] > high:
                high = self._arena_high[B] = max(caps["arena_capacity"], min(caps["arena_capacity"] * 5 // 4, 2**28))
            caps["arena_capacity"] = high
        out = _ops().wfst_decode(
            *self._graph_args(log_probs, lengths, keys, values, cfg),
            int(caps["frontier_capacity"]),
            int(caps["candidate_capacity"]),
            int(caps["hash_capacity"]),
            int(caps["arena_capacity"]),
            int(caps["words_capacity"]),
            bool(cfg.online),
            # the CUDA op's fused-max bound (one O(arcs) pass per graph and bonus); the CPU reference ignores it
            max_emit_weight(self.graph, cfg.word_bonus) if self.device.type == "cuda" else 3.0e38,
            int(self._graph["max_degree"]),
        )
        return out.cpu()  # the one device->host copy of the batch

    def search_stats(self, log_probs: torch.Tensor, lengths,
                     boosts: Optional[Sequence[Optional[BoostTable]]] = None) -> dict:
        """What each utterance's search needs, from the CPU reference (same search, exact counts; CPU decoder
        only): per utterance `peak_frontier` / `mean_frontier` (distinct states of a step after its closure;
        the GPU's frontier_capacity), `peak_candidates` / `mean_candidates` (admitted per step; an upper bound
        of the GPU's candidate count), `word_links` (back-pointers on word arcs; the GPU arena's entries),
        `steps`, `peak_stored_links` (the most word links the CPU reference held at once: its memory, kept
        bounded by compaction, see decoders/csrc/wfst_cpu.cpp) and `mean_closure_passes` (epsilon-closure passes
        per step that generated candidates, the start closure's counted in: the GPU runs the graph's epsilon depth
        of passes per step, and the rest of them have no items). Lists of ints / floats, one per utterance."""
        return self.decode_with_stats(log_probs, lengths, boosts)[1]

    def decode_with_stats(self, log_probs: torch.Tensor, lengths,
                          boosts: Optional[Sequence[Optional[BoostTable]]] = None) -> tuple[WfstResult, dict]:
        """`decode` and `search_stats` from one search (CPU decoder only)."""
        if self.device.type != "cpu":
            raise ValueError("search_stats runs on the CPU reference: build the decoder with device='cpu'")
        log_probs, lengths, keys, values, oov = self._prepare(log_probs, lengths, boosts)
        words_capacity = gpu_capacities(self.config, log_probs.shape[0], log_probs.shape[1])["words_capacity"]
        rows, out = _ops().wfst_search_stats(*self._graph_args(log_probs, lengths, keys, values, self.config),
                                             int(words_capacity), bool(self.config.online))
        st = out.tolist()
        steps = [max(1, r[5]) for r in st]
        stats = dict(peak_frontier=[r[0] for r in st], mean_frontier=[r[1] / n for r, n in zip(st, steps)],
                     peak_candidates=[r[2] for r in st], mean_candidates=[r[3] / n for r, n in zip(st, steps)],
                     word_links=[r[4] for r in st], steps=[r[5] for r in st], peak_stored_links=[r[6] for r in st],
                     mean_closure_passes=[r[7] / n for r, n in zip(st, steps)])
        return self._parse(rows.numpy(), oov, []), stats

    def _prepare(self, log_probs: torch.Tensor, lengths, boosts) -> tuple:
        """Checked inputs of a batch: (log_probs contiguous, lengths, boost keys, boost values, OOV boost words),
        after blank skipping when configured."""
        lengths = self._check(log_probs, lengths)
        B = log_probs.shape[0]
        keys, values, oov = build_boost_tables(boosts, B, self.graph, self.config.word_bonus)
        if self.config.blank_skip_threshold is not None and B:
            log_probs, lengths = self._skip_blanks(log_probs, lengths)
        return log_probs.contiguous(), lengths, keys, values, oov

    def decode(
        self,
        log_probs: torch.Tensor,
        lengths,
        boosts: Optional[Sequence[Optional[BoostTable]]] = None,
    ) -> WfstResult:
        """Decode a batch. log_probs: (B, T, V) natural-log posteriors on the decoder's device."""
        log_probs, lengths, keys, values, oov = self._prepare(log_probs, lengths, boosts)
        B = log_probs.shape[0]
        if B == 0:
            return WfstResult([], [], torch.zeros(0, dtype=torch.float64), [], [], [], [], [])
        rows = self._run(log_probs, lengths, keys, values, self.config)
        rows_np = rows.numpy().copy()

        # Rescue: re-decode flagged utterances with larger capacities.
        rescued: list[int] = []
        first_bits = {int(i): int(rows_np[i, 1]) for i in np.nonzero(rows_np[:, 1] != 0)[0]}
        cfg = self.config
        for _ in range(self.config.max_rescues if self.device.type == "cuda" else 0):
            flagged = np.nonzero(rows_np[:, 1] != 0)[0]
            if flagged.size == 0:
                break
            rescued.extend(int(i) for i in flagged if int(i) not in rescued)
            sub_lengths = lengths.index_select(0, torch.from_numpy(flagged))
            cfg = cfg.scaled(cfg.rescue_factor, len(flagged), log_probs.shape[1],
                             int(sub_lengths.sum()) + len(flagged), int(sub_lengths.max()))
            idx = torch.from_numpy(flagged).to(log_probs.device)
            sub = self._run(
                log_probs.index_select(0, idx).contiguous(),
                sub_lengths,
                keys.index_select(0, torch.from_numpy(flagged)) if keys.shape[1] else keys[: len(flagged)],
                values.index_select(0, torch.from_numpy(flagged)) if values.shape[1] else values[: len(flagged)],
                cfg,
            ).numpy()
            if sub.shape[1] > rows_np.shape[1]:
                rows_np = np.pad(rows_np, ((0, 0), (0, sub.shape[1] - rows_np.shape[1])))
            rows_np[flagged, : sub.shape[1]] = sub
        rescued = sorted(rescued)
        return self._parse(rows_np, oov, rescued, [first_bits.get(i, 0) for i in rescued])

    def _parse(self, rows: np.ndarray, oov: list[list], rescued: list[int],
               rescued_overflow: Optional[list[int]] = None) -> WfstResult:
        words_all, strings_all, overflow, reached, has_path = [], [], [], [], []
        scores = rows[:, 3].astype(np.int32).view(np.float32).astype(np.float64)
        vocab = self.graph.words
        for r in rows:
            n = min(int(r[0]), rows.shape[1] - RESULT_HEADER)
            ws = [int(w) for w in r[RESULT_HEADER : RESULT_HEADER + n]]
            words_all.append(ws)
            strings_all.append([vocab[w] if vocab is not None and 0 <= w < len(vocab) else str(w) for w in ws])
            overflow.append(int(r[1]))
            reached.append(bool(r[2] & FLAG_REACHED_FINAL))
            has_path.append(bool(r[2] & FLAG_HAS_PATH))
        return WfstResult(
            words=words_all,
            word_strings=strings_all,
            scores=torch.from_numpy(scores),
            overflow=overflow,
            reached_final=reached,
            has_path=has_path,
            rescued=rescued,
            rescued_overflow=list(rescued_overflow or []),
            oov_boost_words=oov,
        )

    def decode_lattice(self, log_probs: torch.Tensor, lengths,
                       boosts: Optional[Sequence[Optional[BoostTable]]] = None):
        """Lattices of a batch (same inputs and checks as `decode`): a decoders.lattice.WfstLattices whose best
        paths are `decode()`'s, pruned with output_beam exactly as k2's intersect_dense_pruned."""
        from decoders.lattice import decode_lattice

        return decode_lattice(self, log_probs, lengths, boosts)

    __call__ = decode
