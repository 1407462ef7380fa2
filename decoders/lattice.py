"""WFST lattices: k2 `intersect_dense_pruned` lattices from our search, n-best, MBR, posteriors, word times.

    decoder = WfstDecoder(graph, WfstDecoderConfig(search_beam=17, output_beam=8))
    lats = decoder.decode_lattice(log_probs, lengths)
    lats.nbest(5)[0]          # the 5 best distinct word sequences of utterance 0, best first
    lats.mbr()[0]             # Kaldi MBR hypothesis with word confidences and times
    lats.word_posteriors(0)   # [(word, start frame, posterior), ...]
    lats.to_k2_dict(0); lats.to_openfst(0, "lat.fst")

Semantics (the executable spec is decoders/csrc/wfst_lattice_cpu.cpp):
- The lattice of an utterance is the search space of `decode()` (same forward pass, same tokens and scores)
  pruned backward with `output_beam` exactly as k2's `PruneTimeRange`: it keeps the arcs with
  forward(src) + arc + backward(dst) >= best - output_beam (tropical forward/backward). Its best path is
  `decode()`'s (same score; the same words up to exact ties). States are (frame, graph state): frame 0 is the
  start state and its epsilon closure, frame f the states reached after f frames, frame len + 1 the final state;
  arc scores are acoustic_scale * log-prob + graph weight + word boosts (k2: the dense FSA's scores plus the
  graph's). Epsilon arcs (TLG) stay inside a frame; the graph's epsilon subgraph must be acyclic.
- `nbest(k)`: the k best distinct word sequences, each scored by its best path (tropical semiring; the result
  of determinizing on words and taking the k shortest paths), found exactly by A* over (lattice state, word
  prefix) with the exact backward scores as heuristic (the C++ op wfst_lattice_nbest, parallel over utterances; its
  readable spec, held equal by the tests, is `_nbest_paths_reference`).
- `mbr()`: Kaldi's MinimumBayesRisk (lat/sausages.cc) in the log semiring with the lattice's scores (acoustic
  scale included), over the word-determinized lattice (`word_determinized`: one path per word sequence at its best
  alignment, pruned with the output beam), as Kaldi's recipes (their decoders write determinized lattices) and
  Riva's decode_mbr do. Word confidences are the sausage posteriors of the chosen words, times Kaldi's averaged bin
  times (fractional frames) from the determinized states' compact-lattice times. `mbr(determinize=False)`: the
  same MBR over the lattice itself, so a word sequence's posterior sums over its alignments (`word_posteriors` and
  `arc_posteriors` are always over the lattice itself).
- Word times of a path: a word starts at the frame of the arc that outputs it (an epsilon arc in frame f:
  frame f) and ends after the last non-blank token its segment reads (without a blank id: where the next word
  starts). `frame_shift` converts to seconds outside this module.
- Bad input: `k < 1` is a ValueError; an utterance with no surviving path has an empty lattice
  (`has_path[i]` False, empty n-best, empty MBR hypothesis with score -inf), never an exception.

CUDA (decoders/include/wfst_lattice_kernels.cuh): the same forward pass on the device, every lane at once, then the
same backward output-beam prune on the device (one block per lane, frames backwards, epsilon arcs level by level);
only the kept tokens and arcs are copied to the host, where they get the CPU reference's canonical numbering, so both
backends return identical lattices (CPU tensors). The op runs in two halves (wfst_lattice_gather on the GPU,
wfst_lattice_assemble on the host), so a call's host half runs on a worker thread while the rescue's GPU pass runs
(BEAMDEC_LATTICE_OVERLAP=0: one after the other). Capacities (per-frame tokens, per-step arcs, the
token and arc arenas: `lattice_capacities`) are sized from the config and, for the arenas, from the per-step use the
decoder has measured; an utterance that hits one is flagged (`overflow`, wfst_defs.h bits) and re-decoded up to
`max_rescues` times (`rescue_plan`: `rescue_factor` x larger search capacities after a search overflow, as the 1-best
path does; after an overflow of the batch's shared arenas only, larger arenas with the same search capacities).
BEAMDEC_WFST_LATTICE_BACKEND=cpu makes a CUDA decoder use the CPU reference instead.
"""
from __future__ import annotations

import heapq
import math
import os
import threading
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
import torch

from decoders.graph import EPSILON, FINAL, WfstGraph
from decoders.types import Hypothesis

TIMING_ENV = "BEAMDEC_LATTICE_TIMING"  # "1": one stderr line per phase of the lattice path (a diagnostic)


class _PhaseTimer:
    """The Python half of the lattice ops' phase timer (wfst_lattice_host.h PhaseTimer, same line format): with
    BEAMDEC_LATTICE_TIMING=1, mark(phase) prints the wall time and minor page faults since the previous mark."""

    def __init__(self, op: str):
        import os

        self.op = op
        self.on = os.environ.get(TIMING_ENV, "0") not in ("", "0")
        if self.on:
            self._last, self._faults = self._now()

    @staticmethod
    def _now() -> tuple[float, int]:
        import resource
        import time

        return time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def mark(self, phase: str) -> None:
        if not self.on:
            return
        import sys

        t, f = self._now()
        import torch

        # with CUDA in use, the caching allocator's bytes now and the peak since the last reset (the benchmarks'
        # MemoryProbe resets it per batch): which phase sets a row's cuda_peak_bytes
        mem = f" cuda {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}" \
            if torch.cuda.is_available() and torch.cuda.is_initialized() else ""
        print(f"lattice-phase {self.op} {phase} {1e3 * (t - self._last):.3f} ms {f - self._faults}{mem}",
              file=sys.stderr, flush=True)
        self._last, self._faults = t, f

_levels_cache: dict[int, np.ndarray] = {}
_levels_lock = threading.Lock()


def epsilon_levels(graph: WfstGraph) -> np.ndarray:
    """int32 (N,): per state the number of arcs on the longest epsilon path ending in it (0 without epsilons).
    Every epsilon arc s -> d has level(d) > level(s), so sorting a frame's states by level orders its epsilon
    arcs topologically. ValueError when the epsilon subgraph has a cycle (a lattice would have cycles)."""
    key = id(graph)
    with _levels_lock:
        hit = _levels_cache.get(key)
    if hit is not None:
        return hit
    n = graph.num_states
    level = np.zeros(n, dtype=np.int32)
    il = np.asarray(graph.ilabel)
    m = il == EPSILON
    if m.any():
        src = np.asarray(graph.src())[m].astype(np.int64)
        dst = np.asarray(graph.dest)[m].astype(np.int64)
        order = np.argsort(src, kind="stable")
        src, dst = src[order], dst[order]
        starts = np.searchsorted(src, np.arange(n + 1))
        indeg = np.bincount(dst, minlength=n)
        frontier = np.nonzero(indeg == 0)[0]
        while frontier.size:  # Kahn by levels; a state's level is fixed when its last predecessor is done
            cnt = starts[frontier + 1] - starts[frontier]
            total = int(cnt.sum())
            if total == 0:
                break
            idx = np.repeat(starts[frontier], cnt) + (np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt))
            s, d = src[idx], dst[idx]
            np.maximum.at(level, d, level[s] + 1)
            np.subtract.at(indeg, d, 1)
            nxt = np.unique(d)
            frontier = nxt[indeg[nxt] == 0]
        if np.any(indeg > 0):
            raise ValueError("lattice mode needs an acyclic epsilon subgraph (epsilon arcs inside a frame would "
                             "make lattice cycles); this graph has an epsilon cycle")
    with _levels_lock:
        _levels_cache[key] = level
        weakref.finalize(graph, _levels_cache.pop, key, None)
    return level


def _split_by_counts(items: list, counts: list[int]) -> list[list]:
    """`items` (laid out utterance after utterance) as one list per utterance of counts[i] items."""
    out, p = [], 0
    for c in counts:
        out.append(items[p:p + c])
        p += c
    return out


@dataclass
class WfstLattices:
    """A batch of lattices (CPU tensors, layout decoders/csrc/wfst_lattice_ops.h) plus the graph they index."""

    graph: WfstGraph
    scores: torch.Tensor  # (B,) float32 best path score, -inf: empty lattice
    header: torch.Tensor  # (B, 4) int64 [overflow, flags, arcs before the output-beam prune, tokens before]
    state_splits: torch.Tensor  # (B+1,) int64
    states: torch.Tensor  # (S, 2) int32 [frame, graph state]
    state_scores: torch.Tensor  # (S, 2) float32 [forward, backward (k2's, relative to the best path)]
    arc_splits: torch.Tensor  # (B+1,) int64
    arcs: torch.Tensor  # (A, 3) int32 [src, dst, graph arc]
    arc_scores: torch.Tensor  # (A,) float32
    blank_id: Optional[int] = None
    oov_boost_words: list = field(default_factory=list)
    # the CUDA op's state map per call that made these lattices (the batch's, then each rescue's): "dense" or
    # "hash" (decoders/csrc/wfst_lattice_ops.h lattice_map_slots); empty on the CPU
    state_maps: list = field(default_factory=list)
    # utterances the CUDA op re-decoded with larger capacities (decode_lattice's rescue), as WfstResult.rescued
    rescued: list = field(default_factory=list)
    # the first pass's overflow bits of each rescued utterance (same order as `rescued`), as WfstResult's
    rescued_overflow: list = field(default_factory=list)
    # the output beam the lattices were pruned with (decode_lattice sets it): mbr(determinize=True) prunes the
    # word-determinized lattice with it, as Kaldi's and Riva's determinize-pruned do with their lattice beam
    output_beam: float = math.inf
    _mbr_cache: dict = field(default_factory=dict, repr=False)

    # ---- per-utterance facts ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.scores.shape[0])

    @property
    def overflow(self) -> list[int]:
        return [int(x) for x in self.header[:, 0].tolist()]

    @property
    def has_path(self) -> list[bool]:
        return [bool(int(x) & 2) for x in self.header[:, 1].tolist()]

    @property
    def reached_final(self) -> list[bool]:
        return [bool(int(x) & 1) for x in self.header[:, 1].tolist()]

    def num_states(self, i: int) -> int:
        i = self._index(i)
        return int(self.state_splits[i + 1] - self.state_splits[i])

    def num_arcs(self, i: int) -> int:
        i = self._index(i)
        return int(self.arc_splits[i + 1] - self.arc_splits[i])

    def memory_bytes(self, i: Optional[int] = None) -> int:
        """Bytes the lattice(s) hold in this layout (states: 16 B, arcs: 16 B)."""
        if i is None:
            states = int(self.state_splits[-1] - self.state_splits[0])
            return 16 * states + 16 * int(self.arc_splits[-1] - self.arc_splits[0])
        return 16 * self.num_states(i) + 16 * self.num_arcs(i)

    def _index(self, i) -> int:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"utterance index must be an int, got {type(i).__name__}")
        if not 0 <= int(i) < len(self):
            raise IndexError(f"utterance index {i} outside [0, {len(self)})")
        return int(i)

    def _utt(self, i: int) -> dict:
        """numpy views of utterance i: frame, gstate, fwd, bwd per state; src, dst, arc, score per arc."""
        i = self._index(i)
        s0, s1 = int(self.state_splits[i]), int(self.state_splits[i + 1])
        a0, a1 = int(self.arc_splits[i]), int(self.arc_splits[i + 1])
        st = self.states[s0:s1].numpy()
        sc = self.state_scores[s0:s1].numpy()
        ar = self.arcs[a0:a1].numpy()
        return {"frame": st[:, 0], "gstate": st[:, 1], "fwd": sc[:, 0], "bwd": sc[:, 1], "src": ar[:, 0],
                "dst": ar[:, 1], "arc": ar[:, 2], "score": self.arc_scores[a0:a1].numpy(), "a0": a0}

    # ---- labels ------------------------------------------------------------------------------------------
    def _arc_words(self, graph_arcs: np.ndarray) -> list[tuple[int, ...]]:
        splits, words = self.graph.aux_csr()
        ga = np.asarray(graph_arcs, dtype=np.int64)
        sp = np.asarray(splits)
        lo, n = sp[ga], sp[ga + 1] - sp[ga]
        has = np.nonzero(n)[0]
        out: list[tuple[int, ...]] = [()] * len(ga)
        if has.size:
            w = np.asarray(words)
            if int(n[has].max()) == 1:  # the usual case: one word per arc
                for j, x in zip(has.tolist(), w[lo[has]].tolist()):
                    out[j] = (x,)
            else:
                for j, l, m in zip(has.tolist(), lo[has].tolist(), n[has].tolist()):
                    out[j] = tuple(w[l:l + m].tolist())
        return out

    def _word_strings(self, ids: Sequence[int]) -> list[str]:
        vocab = self.graph.words
        return [vocab[w] if vocab is not None and 0 <= w < len(vocab) else str(w) for w in ids]

    # ---- paths -------------------------------------------------------------------------------------------
    def _path_hypothesis(self, u: dict, path_arcs: list[int], score: float) -> Hypothesis:
        """Hypothesis of one lattice path (lattice arc indices, in order) with word start/end frames."""
        pa = np.asarray(path_arcs, dtype=np.int64)
        aw = self._arc_words(u["arc"][pa]) if path_arcs else []
        words: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        tokens: list[int] = []
        steps: list[int] = []
        final_state = len(u["frame"]) - 1
        last_real = None  # frame of the last non-blank token read since the current word started
        prev_token = None
        # per path arc, as plain ints: the frame it reads and its label, -1 when it reads none (an emitting arc leads
        # to frame f + 1 and not into the final state; the final step's arcs, FINAL or allow_partial redirected,
        # read no frame)
        src_f = u["frame"][u["src"][pa]] if path_arcs else np.zeros(0, np.int32)
        dst = u["dst"][pa] if path_arcs else np.zeros(0, np.int32)
        emitting = (dst != final_state) & (u["frame"][dst] == src_f + 1)
        labs = np.where(emitting, np.asarray(self.graph.ilabel)[u["arc"][pa]] if path_arcs else 0, -1).tolist()
        group = 0  # words of the current word arc, waiting for their end (the words of one arc share it)
        for f, lab, ws in zip(src_f.tolist(), labs, aw):
            if ws:
                ends += [(last_real + 1) if (last_real is not None and self.blank_id is not None) else f] * group
                for w in ws:
                    words.append(w)
                    starts.append(f)
                group = len(ws)
                last_real = None
            if lab >= 0:
                if lab != self.blank_id:
                    last_real = f
                    if lab != prev_token:
                        tokens.append(lab)
                        steps.append(f)
                prev_token = lab
        end_frame = int(u["frame"][-1]) - 1 if len(u["frame"]) else 0  # frames read: 0 .. len - 1
        ends += [(last_real + 1) if (last_real is not None and self.blank_id is not None) else end_frame] * group
        return Hypothesis(tokens=tokens, words=self._word_strings(words), score=float(score), timesteps=steps,
                          word_start_frames=[float(s) for s in starts], word_end_frames=[float(e) for e in ends])

    def best_path(self, i: int) -> list[int]:
        """Lattice arc indices (utterance i, in order) of the best path: traced back from the final state through
        arcs whose float32 forward(src) + score equals forward(dst) (the arc that won the forward pass's max;
        exact ties: the first in arc order). [] for an empty lattice."""
        u = self._utt(i)
        S = len(u["frame"])
        if S == 0:
            return []
        fwd = u["fwd"]
        tight = (fwd[u["src"]] + u["score"]).astype(np.float32) == fwd[u["dst"]]
        first_in = np.full(S, -1, dtype=np.int64)
        idx = np.nonzero(tight)[0]
        # the first tight arc into each state (arcs are sorted by source, so reversed assignment keeps the first)
        first_in[u["dst"][idx[::-1]]] = idx[::-1]
        path, s = [], S - 1
        first, src = first_in.tolist(), u["src"].tolist()
        while s != 0:
            a = first[s]
            if a < 0:  # cannot happen on a lattice from the forward pass; fall back to the exact search
                return self.nbest_paths(i, 1)[0][0]
            path.append(a)
            s = src[a]
        path.reverse()
        return path

    def best(self) -> list[Hypothesis]:
        """The lattice's best path per utterance (equals decode()'s), with word times; no words and -inf for an
        empty lattice. The paths and their hypotheses come from one C++ pass over the batch (wfst_lattice_best,
        the rules of best_path and _path_hypothesis)."""
        from decoders.wfst import _ops

        timer = _PhaseTimer("best")
        splits, words = self.graph.aux_csr()
        status, tok_splits, toks, word_splits, wtab = _ops().wfst_lattice_best(
            self.state_splits, self.states, self.state_scores, self.arc_splits, self.arcs, self.arc_scores,
            _int32_tensor(self.graph.ilabel), _int32_tensor(splits), _int32_tensor(words),
            -1 if self.blank_id is None else int(self.blank_id))
        timer.mark("best paths (op)")
        st, ts, ws = status.tolist(), tok_splits.tolist(), word_splits.tolist()
        tl, wl = toks.tolist(), wtab.tolist()
        out = []
        for i in range(len(self)):
            if st[i] == 0:
                out.append(Hypothesis(tokens=[], words=[], score=-math.inf))
            elif st[i] < 0:  # no tight path (not seen from the forward pass): the exact search
                out.append(self._path_hypothesis(self._utt(i), self.best_path(i), float(self.scores[i])))
            else:
                out.append(self._packed_hypothesis(tl[ts[i]:ts[i + 1]], wl[ws[i]:ws[i + 1]], float(self.scores[i])))
        timer.mark("hypotheses (Python)")
        return out

    def _packed_hypothesis(self, toks: list, words: list, score: float) -> Hypothesis:
        """A Hypothesis from the path ops' rows (wfst_lattice_best / wfst_lattice_path_hypotheses): toks [token,
        frame], words [word, start, end]."""
        return Hypothesis(tokens=[x[0] for x in toks], words=self._word_strings([x[0] for x in words]), score=score,
                          timesteps=[x[1] for x in toks], word_start_frames=[float(x[1]) for x in words],
                          word_end_frames=[float(x[2]) for x in words])

    def nbest(self, k: int) -> list[list[Hypothesis]]:
        """Per utterance the k best distinct word sequences (tropical: each scored by its best path), best
        first; fewer when the lattice holds fewer; [] for an empty lattice."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"nbest: k must be an int, got {type(k).__name__}")
        if k < 1:
            raise ValueError(f"nbest: k must be >= 1, got {k}")
        from decoders.wfst import _ops

        counts, path_splits, path_arcs, path_scores = self._nbest_raw(int(k))
        # the paths' hypotheses in one C++ pass (wfst_lattice_path_hypotheses: _path_hypothesis's rules)
        splits, words = self.graph.aux_csr()
        path_utt = torch.repeat_interleave(torch.arange(len(self), dtype=torch.int64), counts)
        tok_splits, toks, word_splits, wtab = _ops().wfst_lattice_path_hypotheses(
            self.state_splits, self.states, self.arc_splits, self.arcs, self.arc_scores, path_utt, path_splits,
            path_arcs, _int32_tensor(self.graph.ilabel), _int32_tensor(splits), _int32_tensor(words),
            -1 if self.blank_id is None else int(self.blank_id))
        ts, ws, tl, wl = tok_splits.tolist(), word_splits.tolist(), toks.tolist(), wtab.tolist()
        hyps = [self._packed_hypothesis(tl[ts[j]:ts[j + 1]], wl[ws[j]:ws[j + 1]], float(score))
                for j, score in enumerate(path_scores.tolist())]
        return _split_by_counts(hyps, counts.tolist())

    def _nbest_op(self, k: int, i: Optional[int] = None) -> list[list[tuple[list[int], float]]]:
        """nbest_paths of every utterance (or of utterance i alone) by the C++ op wfst_lattice_nbest."""
        counts, splits, arcs, scores = (x.tolist() for x in self._nbest_raw(k, i))
        return _split_by_counts([(arcs[splits[j]:splits[j + 1]], score) for j, score in enumerate(scores)], counts)

    def _nbest_raw(self, k: int, i: Optional[int] = None) -> tuple:
        """wfst_lattice_nbest's tensors for every utterance (or utterance i alone): (counts (B,), path_splits,
        path_arcs (arc indices local to each utterance), path_scores float64)."""
        from decoders.wfst import _ops

        if i is None:
            packed = (self.state_splits, self.states, self.arc_splits, self.arcs, self.arc_scores)
        else:
            s0, s1, a0, a1 = (int(self.state_splits[i]), int(self.state_splits[i + 1]), int(self.arc_splits[i]),
                              int(self.arc_splits[i + 1]))
            packed = (torch.tensor([0, s1 - s0]), self.states[s0:s1].contiguous(), torch.tensor([0, a1 - a0]),
                      self.arcs[a0:a1].contiguous(), self.arc_scores[a0:a1].contiguous())
        splits, words = self.graph.aux_csr()
        return _ops().wfst_lattice_nbest(*packed, _int32_tensor(splits), _int32_tensor(words), int(k))

    def nbest_paths(self, i: int, k: int) -> list[tuple[list[int], float]]:
        """The paths behind nbest(k)[i]: (lattice arc indices of utterance i in path order, score), best first."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"nbest: k must be an int >= 1, got {k!r}")
        return self._nbest_op(int(k), self._index(i))[0]

    def _nbest_paths_reference(self, i: int, k: int) -> list[tuple[list[int], float]]:
        """nbest_paths in Python: the readable spec of the op (wfst_lattice_cpu.cpp nbest_one) that the tests hold it
        to, step for step. A* over (lattice state, word prefix) nodes with the exact backward scores as heuristic."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"nbest: k must be an int >= 1, got {k!r}")
        u = self._utt(i)
        S = len(u["frame"])
        if S == 0:
            return []
        src, dst, score = u["src"].tolist(), u["dst"].tolist(), u["score"].astype(np.float64).tolist()
        A = len(src)
        out_begin = np.searchsorted(u["src"], np.arange(S + 1)).tolist()  # arcs are sorted by source
        # exact best completion per state (float64), one reverse sweep: states are topologically sorted
        h = [-math.inf] * S
        h[S - 1] = 0.0
        for a in range(A - 1, -1, -1):
            v = score[a] + h[dst[a]]
            if v > h[src[a]]:
                h[src[a]] = v
        arc_words = self._arc_words(u["arc"])
        trie: dict[tuple[int, int], int] = {}  # (prefix id, word) -> prefix id; 0 = empty prefix
        # A*: nodes (state, prefix) popped in order of g + h; the first pop of a node has its best g
        node_parent: list[int] = []
        node_arc: list[int] = []
        heap = [(-(0.0 + h[0]), 0, 0, 0, 0.0, -1, -1)]  # (-priority, tiebreak, state, prefix, g, parent, arc)
        seen: set[tuple[int, int]] = set()
        results: list[tuple[list[int], float]] = []
        counter = 1
        while heap and len(results) < k:
            _, _, s, p, g, parent, arc = heapq.heappop(heap)
            if (s, p) in seen:
                continue
            seen.add((s, p))
            node = len(node_parent)
            node_parent.append(parent)
            node_arc.append(arc)
            if s == S - 1:
                path = []
                n = node
                while n >= 0 and node_arc[n] >= 0:
                    path.append(node_arc[n])
                    n = node_parent[n]
                path.reverse()
                results.append((path, g))
                continue
            for a in range(out_begin[s], out_begin[s + 1]):
                d = dst[a]
                if h[d] == -math.inf:
                    continue
                q = p
                for w in arc_words[a]:
                    q = trie.setdefault((q, w), len(trie) + 1)
                if (d, q) in seen:
                    continue
                g2 = g + score[a]
                heapq.heappush(heap, (-(g2 + h[d]), counter, d, q, g2, node, a))
                counter += 1
        return results

    # ---- posteriors and MBR -----------------------------------------------------------------------------
    def mbr_arc_labels(self) -> tuple[torch.Tensor, dict[int, tuple], int]:
        """The MBR op's word label per lattice arc: (A,) int32 (0: no word, a word id, or for an arc with several
        words one compound label >= graph.num_words), the compound labels' word tuples, and that base."""
        splits, words = self.graph.aux_csr()
        ga = self.arcs[:, 2].numpy().astype(np.int64)
        # gathered at the lattice's arcs only: converting the graph's whole arrays first (10 M arcs on the bench TLG)
        # cost ~25 ms a batch
        sp, w = np.asarray(splits), np.asarray(words)
        lo = sp[ga].astype(np.int64) if ga.size else np.zeros(0, np.int64)
        n = sp[ga + 1].astype(np.int64) - lo if ga.size else np.zeros(0, np.int64)
        first = w[np.minimum(lo, max(len(w) - 1, 0))].astype(np.int64) if ga.size and len(w) \
            else np.zeros(ga.shape, np.int64)
        label = np.where(n == 0, 0, first).astype(np.int64)
        compounds: dict[tuple, int] = {}
        base = self.graph.num_words
        for j in np.nonzero(n > 1)[0].tolist():  # several words on one arc: one compound label
            key = tuple(int(w) for w in words[splits[ga[j]]:splits[ga[j] + 1]])
            label[j] = base + compounds.setdefault(key, len(compounds))
        return torch.from_numpy(label.astype(np.int32)), {v: k for k, v in compounds.items()}, base

    def _mbr_all(self, determinize: bool = False) -> tuple:
        if determinize not in self._mbr_cache:
            from decoders.wfst import _ops

            label, compounds, base = self.mbr_arc_labels()
            packed = self.word_determinized(label) if determinize else (
                self.state_splits, self.states, self.arc_splits, self.arcs, self.arc_scores, label)
            self._mbr_cache[determinize] = (_ops().wfst_lattice_mbr(*packed), compounds, base)
        return self._mbr_cache[determinize]

    def word_determinized(self, label: Optional[torch.Tensor] = None) -> tuple:
        """Every utterance's lattice as a word acceptor (labels: mbr_arc_labels; 0 = no word), epsilon-free and
        determinized in the tropical semiring (one path per word sequence, scored by its best path), pruned with
        `output_beam`: every sequence within the beam of the best is kept, a few beyond it may be, as with Kaldi's
        determinize-pruned (the op wfst_lattice_word_determinize, decoders/csrc/wfst_lattice_cpu.cpp). Returned in
        the MBR op's packed layout (state_splits, states [frame, 0], arc_splits, arcs [src, dst, 0], arc_scores,
        labels), states topologically numbered, the start first and one final state last; a state's frame is
        Kaldi's compact-lattice time: where the best path of its word prefix emitted the last word (the start: 0, the
        final state: the lattice's final frame). An empty lattice stays empty."""
        from decoders.wfst import _ops

        if label is None:
            label = self.mbr_arc_labels()[0]
        return _ops().wfst_lattice_word_determinize(self.state_splits, self.states, self.arc_splits, self.arcs,
                                                    self.arc_scores, label, float(self.output_beam))

    def arc_posteriors(self, i: int) -> np.ndarray:
        """(A_i,) float32: each arc's posterior probability (log-semiring forward-backward)."""
        i = self._index(i)
        out, _, _ = self._mbr_all()
        return out[4][int(self.arc_splits[i]):int(self.arc_splits[i + 1])].numpy()

    def total_logprob(self, i: int) -> float:
        """log of the summed probability of every lattice path (log semiring)."""
        out, _, _ = self._mbr_all()
        return float(out[5][self._index(i)])

    def word_posteriors(self, i: int) -> list[tuple[str, int, float]]:
        """[(word, start frame, posterior)] for utterance i: the summed posterior of the lattice arcs that
        output `word` starting at that frame, sorted by frame then word (expected word occurrences)."""
        u = self._utt(i)
        post = self.arc_posteriors(i)
        acc: dict[tuple[int, int], float] = {}
        for a, ws in enumerate(self._arc_words(u["arc"])):
            for w in ws:
                key = (int(u["frame"][u["src"][a]]), w)
                acc[key] = acc.get(key, 0.0) + float(post[a])
        return [(self._word_strings([w])[0], f, p) for (f, w), p in sorted(acc.items())]

    def mbr(self, determinize: bool = True) -> list[Hypothesis]:
        """Kaldi MBR hypothesis per utterance: words, word confidences, averaged word times (frames); score is
        the lattice's total log-probability (log semiring). Empty lattice: no words, score -inf.

        determinize=True (the default): over the word-determinized lattice (one path per word sequence, weighted by
        its best alignment, pruned with `output_beam`: word_determinized), what Kaldi's recipes and Riva's decode_mbr
        run MBR on. Its states carry Kaldi's compact-lattice times (where the best path of each word prefix emitted
        its last word), so word times are averaged bins as over the lattice; the score is its total log-probability.
        determinize=False: over this lattice, so a word sequence's posterior sums over its alignments."""
        if not isinstance(determinize, bool):
            raise TypeError(f"determinize must be a bool, got {type(determinize).__name__}")
        timer = _PhaseTimer("mbr")
        out, compounds, base = self._mbr_all(determinize)
        timer.mark("labels + " + ("determinization + " if determinize else "") + "MBR (op)")
        # Python lists once (indexing the tensors element by element cost ~55 ms per batch of 200 on the H200 host)
        word_splits, words, times, conf, total = (out[k].tolist() for k in (0, 1, 2, 3, 5))  # out[4]: arc posteriors
        hyps = []
        for i in range(len(self)):
            ids: list[int] = []
            starts: list[float] = []
            ends: list[float] = []
            confs: list[float] = []
            for j in range(word_splits[i], word_splits[i + 1]):
                wid = words[j]
                expanded = compounds[wid] if wid >= base and wid in compounds else (wid,)
                for w in expanded:
                    ids.append(int(w))
                    starts.append(float(times[j][0]))
                    ends.append(float(times[j][1]))
                    confs.append(float(conf[j]))
            hyps.append(Hypothesis(tokens=[], words=self._word_strings(ids), score=float(total[i]),
                                   word_start_frames=starts, word_end_frames=ends, word_confidences=confs))
        timer.mark("hypotheses (Python)")
        return hyps

    # ---- export ------------------------------------------------------------------------------------------
    def _labels(self, u: dict, epsilon_label: int) -> np.ndarray:
        il = np.asarray(self.graph.ilabel, dtype=np.int64)[u["arc"]]
        into_final = u["dst"] == len(u["frame"]) - 1
        lab = np.where(il == EPSILON, epsilon_label, il)
        return np.where(into_final, FINAL, lab).astype(np.int32)

    def to_k2_dict(self, i: int, epsilon_label: int = 0) -> dict:
        """k2 `Fsa.as_dict()` layout of utterance i's lattice: 'arcs' int32 (A, 4) [src, dst, label, score
        bits], 'aux_labels' int32 (A,) (word id, 0 none, -1 on arcs into the final state without a word),
        'scores' float32 (A,); plus 'aux_labels_ragged' when an arc outputs several words. Labels are log-prob
        columns, -1 into the final state (k2's convention) and `epsilon_label` on epsilon arcs (TLG lattices;
        k2's own lattices have none). An empty lattice has zero arcs."""
        u = self._utt(i)
        scores = np.ascontiguousarray(u["score"], dtype=np.float32)
        lab = self._labels(u, epsilon_label) if len(u["src"]) else np.zeros(0, np.int32)
        arcs = np.stack([u["src"], u["dst"], lab, scores.view(np.int32)], axis=1).astype(np.int32) \
            if len(u["src"]) else np.zeros((0, 4), np.int32)
        aw = self._arc_words(u["arc"])
        aux = np.array([ws[0] if ws else 0 for ws in aw], dtype=np.int32)
        aux = np.where((lab == FINAL) & (aux == 0), -1, aux).astype(np.int32)
        out = {"arcs": torch.from_numpy(arcs), "aux_labels": torch.from_numpy(aux),
               "scores": torch.from_numpy(scores.copy())}
        if any(len(ws) > 1 for ws in aw):
            lens = np.array([len(ws) for ws in aw], dtype=np.int32)
            out["aux_labels_ragged"] = {
                "row_splits": torch.from_numpy(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)),
                "values": torch.from_numpy(np.array([w for ws in aw for w in ws], dtype=np.int32)),
            }
        return out

    def to_openfst(self, i: int, path: Union[str, Path], words_path: Optional[Union[str, Path]] = None) -> None:
        """Write utterance i's lattice as a binary OpenFst vector FST (standard arcs, through decoders.openfst):
        input labels column + 1 (0 = epsilon, as WfstGraph.write_openfst), output labels word ids, costs
        -score; the final state is final with weight 0. Readable by kaldifst / OpenFst. An empty lattice writes
        an FST with no states."""
        from decoders.openfst import FstArrays, write_openfst_vector, write_symbol_table

        u = self._utt(i)
        S = len(u["frame"])
        aw = self._arc_words(u["arc"])
        if any(len(ws) > 1 for ws in aw):
            raise ValueError("to_openfst: the lattice has arcs with several words, which OpenFst cannot express")
        lab = self._labels(u, -2) if S else np.zeros(0, np.int32)
        il = np.where(lab < 0, 0, lab + 1).astype(np.int32)  # epsilon and final-arc labels -> 0
        ol = np.array([ws[0] if ws else 0 for ws in aw], dtype=np.int32)
        final = np.full(S, np.inf, dtype=np.float32)
        if S:
            final[S - 1] = 0.0
        write_openfst_vector(path, FstArrays(
            start=0 if S else -1, num_states=S, src=u["src"].astype(np.int32), dest=u["dst"].astype(np.int32),
            ilabel=il, olabel=ol, cost=(-np.asarray(u["score"], dtype=np.float32)).astype(np.float32), final=final,
        ))
        if words_path is not None:
            if self.graph.words is None:
                raise ValueError("to_openfst: words_path given but the graph has no word table")
            write_symbol_table(words_path, self.graph.words)


def _int32_tensor(a) -> torch.Tensor:
    """A contiguous int32 CPU tensor sharing `a`'s memory when it already is int32."""
    return torch.from_numpy(np.ascontiguousarray(np.asarray(a), dtype=np.int32))


LATTICE_BACKEND_ENV = "BEAMDEC_WFST_LATTICE_BACKEND"  # "cpu" forces the CPU reference on a CUDA decoder
# the CUDA lattice kernels' arc walk: "adaptive" / "auto" / unset (the default: the warp-cooperative walk with as many
# items per warp as spread a lane's items over its warps), "warp" (the same with 32 items per warp, their arcs 32 at a
# time; decoders/include/wfst_lattice_kernels.cuh warp_walk_arcs) or "token" (one frontier item per warp); measured
# in decoders/csrc/wfst_lattice_launch.cu walk_selected
LATTICE_WALK_ENV = "BEAMDEC_LATTICE_WALK"
# the CUDA lattice pass's map from graph state to the frame's token: "dense" (B x num_states entries, 8 B each; 6.8 GB
# at batch 200 on a 4 M-state TLG), "hash" (per lane a hash table of >= 2 x frontier_capacity entries, 12 B each) or
# unset (dense while the batch's dense maps fit 1 GiB, else hash where smaller; decoders/csrc/wfst_lattice_cuda.cpp
# lattice_map_slots)
LATTICE_MAP_ENV = "BEAMDEC_LATTICE_MAP"
# "1": the CUDA forward pass as one cooperative kernel instead of ~16 launches a frame, "0": the launches; unset: the
# kernel below 32 lanes, the launches above (decoders/csrc/wfst_lattice_launch.cu persistent_selected: measured)
LATTICE_PERSISTENT_ENV = "BEAMDEC_LATTICE_PERSISTENT"
# where the CUDA lattice op groups the kept tokens and arcs by utterance: "host" (the default, a loop on one thread)
# or "device" (a stable sort on the GPU; decoders/csrc/wfst_lattice_cuda.cpp)
LATTICE_GROUP_ENV = "BEAMDEC_LATTICE_GROUP"
# "0": decode_lattice assembles each CUDA op call's lattices before the next call; unset / "1": on a worker thread
# beside the next call's GPU pass (the rescue's)
LATTICE_OVERLAP_ENV = "BEAMDEC_LATTICE_OVERLAP"
_ASSEMBLER = None
_ASSEMBLER_LOCK = threading.Lock()


def _assembler():
    """The process's one worker thread for wfst_lattice_assemble (decode_lattice's overlap)."""
    global _ASSEMBLER
    with _ASSEMBLER_LOCK:
        if _ASSEMBLER is None:
            from concurrent.futures import ThreadPoolExecutor

            _ASSEMBLER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="beamdec-lattice-assemble")
        return _ASSEMBLER


def lattice_knobs() -> dict:
    """The CUDA lattice switches in effect, for a benchmark row's decoder config (unset: the defaults' names)."""
    from decoders.wfst import _ops

    return {"lattice_walk": os.environ.get(LATTICE_WALK_ENV) or "adaptive",
            "lattice_map": os.environ.get(LATTICE_MAP_ENV) or "default",
            "lattice_persistent": os.environ.get(LATTICE_PERSISTENT_ENV)
            or f"below {_ops().wfst_lattice_persistent_batch()} lanes",
            "lattice_group": os.environ.get(LATTICE_GROUP_ENV) or "host",
            "lattice_overlap": os.environ.get(LATTICE_OVERLAP_ENV) or "1"}


def count_lattice_stats(stats: dict, lats: "WfstLattices") -> None:
    """Adds a lattice batch to a benchmark row's counters: utterances still flagged (`overflow_count`), re-decoded
    (`rescued_count`, and `rescued_<capacity>`: count_rescue_causes), the lattices' bytes, and the CUDA op calls
    behind `lats` by the state map each used (the size rule's choice is per call: a row records how many of its
    batches ran on the dense maps and how many on the hashed)."""
    from decoders.wfst import count_rescue_causes

    stats["overflow_count"] = stats.get("overflow_count", 0) + sum(1 for o in lats.overflow if o)
    stats["rescued_count"] = stats.get("rescued_count", 0) + len(lats.rescued)
    count_rescue_causes(stats, lats.rescued_overflow)
    stats["lattice_bytes"] = stats.get("lattice_bytes", 0) + lats.memory_bytes()
    for m in lats.state_maps:
        key = "lattice_dense_map_calls" if m == "dense" else "lattice_hashed_map_calls"
        stats[key] = stats.get(key, 0) + 1


def lattice_capacities(cfg, batch: int, frames: int, total_steps: int, factor: int = 1,
                       per_step: Optional[tuple[int, int]] = None) -> dict:
    """GPU lattice capacities: the 1-best search's per-lane frontier / per-step candidates (times `factor`, the
    rescue of a search overflow), and the token and arc arenas, shared by the batch, sized by the decoded steps times
    `per_step` = (tokens, arcs) per step (at most the frontier / candidates per step; default: the config's
    lattice_tokens_per_step / lattice_arcs_per_step, else 1024 / 2048, times `factor`)."""
    from decoders.wfst import gpu_capacities

    caps = gpu_capacities(cfg, batch, frames, total_steps)
    F = min(caps["frontier_capacity"] * factor, 2**27)
    C = min(caps["candidate_capacity"] * factor, 2**29)
    if per_step is None:
        per_step = tuple(n * factor for n in arena_per_step(cfg))
    steps = max(total_steps, 1)
    return {
        "frontier_capacity": F,
        "candidate_capacity": C,
        "token_capacity": int(min(steps * min(F, per_step[0]), 2**31 - 1)),
        "arc_capacity": int(min(steps * min(C, per_step[1]), 2**30)),
    }


ARENA_MARGIN = 1.25  # arenas sized from a measured per-step use get this much room


def arena_per_step(cfg, seen: tuple[float, float] = (0.0, 0.0)) -> tuple[int, int]:
    """The lattice arenas' (tokens, arcs) per decoded step: the config's (else 1024 / 2048), raised to ARENA_MARGIN x
    a measured per-step use `seen` (a decoder's record, decode_lattice)."""
    return (max(cfg.lattice_tokens_per_step or 1024, math.ceil(ARENA_MARGIN * seen[0])),
            max(cfg.lattice_arcs_per_step or 2048, math.ceil(ARENA_MARGIN * seen[1])))


def arena_use(header: torch.Tensor, steps: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per utterance, the tokens and arcs per decoded step its forward pass put in the arenas (header columns 3 and
    2: the counts before the output-beam prune; steps = length + 1); NaN where the arena overflowed (bit 4), whose
    counts stop at the overflow and say nothing of the need."""
    from decoders.wfst import OVERFLOW_ARENA

    tok, arc = [], []
    for (ov, _, n_arc, n_tok), st in zip(header.tolist(), steps.tolist()):
        ok = not (int(ov) & OVERFLOW_ARENA)
        tok.append(n_tok / max(st, 1) if ok else math.nan)
        arc.append(n_arc / max(st, 1) if ok else math.nan)
    return tok, arc


def batch_arena_mean(use: tuple[list[float], list[float]], steps: Sequence[int]) -> Optional[tuple[float, float]]:
    """The batch's tokens and arcs per decoded step, over the utterances `use` measured (NaN: not measured), each
    weighted by its steps; None when none was measured."""
    ok = [i for i, v in enumerate(use[0]) if not math.isnan(v)]
    if not ok:
        return None
    n = float(sum(steps[i] for i in ok))
    return sum(use[0][i] * steps[i] for i in ok) / n, sum(use[1][i] * steps[i] for i in ok) / n


def rescue_plan(overflow: Sequence[int], use: tuple[list[float], list[float]], lanes: list[tuple[int, tuple, int]],
                rescue_factor: int) -> dict:
    """The next rescue of the lattice path: `lanes[b]` = (search factor, arena (tokens, arcs) per step, epsilon
    passes) that utterance b last ran with, updated in place for the flagged ones and grouped by those settings
    ({settings: [utterances]}, one op call per group). A search capacity hit (frontier, candidates, hash, epsilon:
    any bit but the arena's) multiplies the search capacities and the arenas by `rescue_factor` and doubles the
    epsilon passes, as before; an arena hit alone, which only says the batch's shared arenas ran out, keeps the
    search capacities and sizes the arenas per step from the densest utterance of `use` that did not overflow
    (ARENA_MARGIN x), at least doubling them (x rescue_factor when no measured utterance was denser than the arenas
    it ran with: then the measured ones say nothing of the flagged ones)."""
    from decoders.wfst import OVERFLOW_ARENA

    def densest(vals: list[float]) -> float:
        known = [v for v in vals if not math.isnan(v)]
        return max(known) if known else math.nan

    d_tok, d_arc = densest(use[0]), densest(use[1])

    def grown(prev: int, dense: float) -> int:
        # a measured utterance denser than the arenas were: its density (with the margin), at least doubled; none
        # (or none denser: the measured ones are not like the flagged ones, e.g. short ones): x rescue_factor
        if math.isnan(dense) or dense <= prev:
            return prev * rescue_factor
        return max(2 * prev, math.ceil(ARENA_MARGIN * dense))

    groups: dict = {}
    for b, ov in enumerate(overflow):
        if not ov:
            continue
        fac, (pt, pa), eps = lanes[b]
        if ov & ~OVERFLOW_ARENA:
            lanes[b] = (fac * rescue_factor, (pt * rescue_factor, pa * rescue_factor), eps * 2)
        else:
            lanes[b] = (fac, (grown(pt, d_tok), grown(pa, d_arc)), eps)
        groups.setdefault(lanes[b], []).append(b)
    return groups


def _take(lats: WfstLattices, pieces: list[tuple["WfstLattices", int]]) -> WfstLattices:
    """A batch made of utterance `j` of each (lattices, j) in `pieces` (the rescue splices re-decoded ones in).
    Consecutive utterances of one source are copied as one run (a rescue of a few utterances leaves a few runs; a
    slice per utterance took ~50 ms for a 200-utterance bench batch)."""
    runs: list[tuple[WfstLattices, int, int]] = []  # (source, first j, last j + 1)
    for l, j in pieces:
        if runs and runs[-1][0] is l and runs[-1][2] == j:
            runs[-1] = (l, runs[-1][1], j + 1)
        else:
            runs.append((l, j, j + 1))

    def cat(ts: list[torch.Tensor]) -> torch.Tensor:
        return ts[0].clone() if len(ts) == 1 else torch.cat(ts)

    def per_row(split_name: str, t_name: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
        counts, parts = [], []
        for l, j0, j1 in runs:
            sp = getattr(l, split_name)
            counts.append(sp[j0:j1 + 1].diff())
            parts.append(getattr(l, t_name)[int(sp[j0]):int(sp[j1])])
        return torch.cat([torch.zeros(1, dtype=torch.int64), torch.cat(counts).cumsum(0)]), parts

    state_splits, states = per_row("state_splits", "states")
    _, state_scores = per_row("state_splits", "state_scores")
    arc_splits, arcs = per_row("arc_splits", "arcs")
    _, arc_scores = per_row("arc_splits", "arc_scores")
    return WfstLattices(
        lats.graph, cat([l.scores[j0:j1] for l, j0, j1 in runs]), cat([l.header[j0:j1] for l, j0, j1 in runs]),
        state_splits, cat(states), cat(state_scores), arc_splits, cat(arcs), cat(arc_scores), lats.blank_id,
        [l.oov_boost_words[j] if j < len(l.oov_boost_words) else [] for l, j in pieces], output_beam=lats.output_beam)


def decode_lattice(decoder, log_probs: torch.Tensor, lengths, boosts=None) -> WfstLattices:
    """WfstDecoder.decode_lattice (see the module docstring)."""
    from decoders.wfst import _ops, arc_weights, graph_on_device

    cfg = decoder.config
    if not cfg.output_beam > 0:  # NaN too; the config checks at construction, a mutated config here
        raise ValueError(f"output_beam must be > 0, got {cfg.output_beam}")
    graph = decoder.graph
    timer = _PhaseTimer("decode_lattice")
    levels = torch.from_numpy(epsilon_levels(graph))
    log_probs, lengths, keys, values, oov = decoder._prepare(log_probs, lengths, boosts)
    timer.mark("checks + boosts")
    B = log_probs.shape[0]
    if B == 0:
        return WfstLattices(graph, torch.zeros(0), torch.zeros((0, 4), dtype=torch.int64), torch.zeros(1, dtype=torch.int64),
                            torch.zeros((0, 2), dtype=torch.int32), torch.zeros((0, 2)), torch.zeros(1, dtype=torch.int64),
                            torch.zeros((0, 3), dtype=torch.int32), torch.zeros(0), decoder._blank_id, oov)
    on_gpu = log_probs.device.type == "cuda" and os.environ.get(LATTICE_BACKEND_ENV, "").lower() != "cpu"
    state_map = os.environ.get(LATTICE_MAP_ENV, "")
    if state_map not in ("", "dense", "hash"):
        raise ValueError(f"{LATTICE_MAP_ENV} must be 'dense' or 'hash', got {state_map!r}")
    walk = os.environ.get(LATTICE_WALK_ENV, "")
    if walk not in ("", "auto", "token", "warp", "adaptive"):
        raise ValueError(f"{LATTICE_WALK_ENV} must be 'auto', 'token', 'warp' or 'adaptive', got {walk!r}")
    if os.environ.get(LATTICE_PERSISTENT_ENV, "") not in ("", "0", "1"):
        raise ValueError(f"{LATTICE_PERSISTENT_ENV} must be '0' or '1', got {os.environ[LATTICE_PERSISTENT_ENV]!r}")
    if os.environ.get(LATTICE_OVERLAP_ENV, "1") not in ("0", "1"):
        raise ValueError(f"{LATTICE_OVERLAP_ENV} must be '0' or '1', got {os.environ[LATTICE_OVERLAP_ENV]!r}")
    if os.environ.get(LATTICE_GROUP_ENV, "host") not in ("host", "device"):
        raise ValueError(f"{LATTICE_GROUP_ENV} must be 'host' or 'device', got {os.environ[LATTICE_GROUP_ENV]!r}")
    device = log_probs.device if on_gpu else torch.device("cpu")
    g = graph_on_device(graph, device)
    lp = log_probs if on_gpu else log_probs.cpu().contiguous()
    if on_gpu:  # the device prune reads the levels there; cached beside the graph's device arrays
        if "eps_level" not in g:
            g["eps_level"] = levels.to(device)
        levels = g["eps_level"]

    maps: list[str] = []  # gather() appends the state map of each op call

    def op_args(lp_, lengths_, keys_, values_, cfg_, factor, per_step) -> tuple:
        caps = lattice_capacities(cfg_, lp_.shape[0], lp_.shape[1], int(lengths_.sum()) + int(lengths_.numel()), factor,
                                  per_step) \
            if on_gpu else {"frontier_capacity": 1, "candidate_capacity": 1, "token_capacity": 1, "arc_capacity": 1}
        if on_gpu:  # the op's state-map choice, by the op's own rule (for the lattices' record)
            maps.append("hash" if _ops().wfst_lattice_map_slots(lp_.shape[0], caps["frontier_capacity"],
                                                                graph.num_states) else "dense")
        return (lp_, lengths_, g["row_splits"], g["eps_begin"], g["final_begin"], g["dest"], g["ilabel"],
                g["aux_splits"], g["aux_words"], arc_weights(g, graph, cfg_.word_bonus), int(graph.start_state),
                int(graph.final_state), keys_.to(device), values_.to(device), float(cfg_.search_beam),
                int(cfg_.min_active), int(cfg_.max_active), bool(cfg_.allow_partial), float(cfg_.acoustic_scale),
                decoder._eps_passes(cfg_), levels, float(cfg_.output_beam), caps["frontier_capacity"],
                caps["candidate_capacity"], caps["token_capacity"], caps["arc_capacity"])

    def lattices(out) -> WfstLattices:
        return WfstLattices(graph, *out, decoder._blank_id, oov, output_beam=float(cfg.output_beam))

    if not on_gpu:
        lats = lattices(_ops().wfst_lattice(*op_args(lp, lengths, keys, values, cfg, 1, None)))
        timer.mark("op + WfstLattices")
        lats.state_maps = maps
        return lats

    # CUDA: each op call in two halves (wfst_lattice_ops.h): wfst_lattice_gather (the GPU passes and the copy of the
    # kept tokens and arcs) and wfst_lattice_assemble (grouping by utterance, canonical numbering, packing: host work,
    # ~45 ms of a bench batch-200 call). The overflow flags and arena counts come with the gathered half, so the
    # rescue's GPU pass starts while a worker thread assembles the previous call's lattices (the ops release the GIL);
    # BEAMDEC_LATTICE_OVERLAP=0 assembles each call before the next.
    overlap = os.environ.get(LATTICE_OVERLAP_ENV, "1") != "0"

    def gather(lp_, lengths_, keys_, values_, cfg_, factor, per_step):
        """One op call's device half; returns (a callable giving its WfstLattices, its header: (B, 4) int64
        [overflow bits, 0, arcs before the prune, tokens before], what arena_use reads)."""
        out = _ops().wfst_lattice_gather(*op_args(lp_, lengths_, keys_, values_, cfg_, factor, per_step))
        lanes_, flags_ = out[3].to(torch.int64), out[4].to(torch.int64)
        header = torch.stack([flags_[:, 0], torch.zeros_like(flags_[:, 0]), lanes_[:, 2], lanes_[:, 1]], 1)
        if overlap:
            job = _assembler().submit(_ops().wfst_lattice_assemble, *out)
            done: list = []

            def result() -> WfstLattices:
                if not done:
                    done.append(lattices(job.result()))
                return done[0]

            return result, header
        assembled = lattices(_ops().wfst_lattice_assemble(*out))
        return (lambda: assembled), header

    # the arenas' size per decoded step: the config's (or 1024 / 2048 tokens / arcs), raised to ARENA_MARGIN x the
    # densest batch mean this decoder has measured (grow-only, per decoder: a workload denser than the defaults pays
    # one rescue, on its first batch). The mean is the whole batch's, each utterance measured where it finally ran
    # without an arena overflow (its rescue's measure for a rescued one): a rescue's sub-batch alone holds the unusual
    # utterances, and one dense outlier must not size every later batch's arenas.
    per_step = arena_per_step(cfg, getattr(decoder, "_lattice_arena_seen", (0.0, 0.0)))
    steps = lengths.cpu().to(torch.int64) + 1
    first, header = gather(lp, lengths, keys, values, cfg, 1, per_step)
    timer.mark("gather" + (" (assembly in the background)" if overlap else " + assembly"))
    use = arena_use(header, steps)
    overflow = [int(x) for x in header[:, 0].tolist()]
    lanes = [(1, per_step, cfg.eps_iterations)] * B
    rescued: set[int] = set()
    first_bits: dict[int, int] = {}  # a rescued utterance's overflow bits in the first pass
    rounds: list[dict] = []  # per rescue round: {utterance: (its sub-batch's result callable, index in it)}
    for _ in range(cfg.max_rescues):  # rescue: re-decode utterances that hit a capacity (rescue_plan says with what)
        groups = rescue_plan(overflow, use, lanes, cfg.rescue_factor)
        if not groups:
            break
        where, use_next, overflow_next = {}, (list(use[0]), list(use[1])), [0] * B
        for b in (b for members in groups.values() for b in members):
            first_bits.setdefault(b, overflow[b])
        rescued.update(first_bits)
        for (fac, ps, eps), members in groups.items():
            idx = torch.tensor(members)
            sub_len = lengths.index_select(0, idx)
            sub, sub_header = gather(lp.index_select(0, idx.to(lp.device)).contiguous(), sub_len,
                                     keys.index_select(0, idx) if keys.shape[1] else keys[: len(members)],
                                     values.index_select(0, idx) if values.shape[1] else values[: len(members)],
                                     replace(cfg, eps_iterations=eps), fac, ps)
            sub_use = arena_use(sub_header, sub_len.cpu().to(torch.int64) + 1)
            for k, b in enumerate(members):
                where[b] = (sub, k)
                use_next[0][b], use_next[1][b] = sub_use[0][k], sub_use[1][k]
                overflow_next[b] = int(sub_header[k, 0])
        rounds.append(where)
        use, overflow = use_next, overflow_next
        timer.mark("rescue of " + " + ".join(f"{len(m)} (factor {f}, arena {ps[0]} / {ps[1]} per step)"
                                             for (f, ps, _), m in groups.items()))
    lats = first()
    for where in rounds:  # the rescues' lattices spliced in, round by round
        lats = _take(lats, [(where[b][0](), where[b][1]) if b in where else (lats, b) for b in range(B)])
        lats.oov_boost_words = oov  # the sub-batch carried the whole batch's list
    timer.mark("assembly waited for + rescues spliced in")
    lats.rescued = sorted(rescued)
    lats.rescued_overflow = [first_bits[b] for b in lats.rescued]
    mean = batch_arena_mean(use, steps.tolist())
    if mean is not None:
        old = getattr(decoder, "_lattice_arena_seen", (0.0, 0.0))
        decoder._lattice_arena_seen = (max(old[0], mean[0]), max(old[1], mean[1]))
    lats.state_maps = maps
    return lats
