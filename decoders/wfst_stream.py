"""Streaming WFST decoding with bounded memory: k2's online semantics, chunk by chunk, many streams at once.

    decoder = WfstStreamingDecoder(graph, WfstDecoderConfig(search_beam=17.0), device="cuda", max_streams=256)
    a, b = decoder.create_stream(), decoder.create_stream(boosts={"hello": 4.0})
    decoder.decode_chunk([a, b], log_probs, lengths)   # log_probs (N, chunk_T, V), lengths (N,) valid frames
    decoder.partial([a])                                # [Hypothesis]: best path so far (words, frame of each word)
    result = decoder.finalize([a, b])                   # WfstResult; the streams are closed afterwards
    decoder.close(stream)                               # free a slot without a result

Semantics: k2's online intersection (k2py.OnlineDenseIntersecter; seed 001 section 3, "T = INT32_MAX until
the stream is finalized"). The stream's length is unknown until `finalize`, so the offline-only clauses of the
dynamic beam (the last-5-frames min_active rule and its no-tightening twin) never fire on emitting steps;
`finalize` runs the final step (FINAL arcs, or the allow_partial redirect, beam 1e10) and the backtrack.
Everything else -- the exact per-step maximum, admission, recombination, epsilon closure, word boosting -- is the
offline decoder's (decoders/wfst.py). Hence, for ANY chunking:

    finalize(chunks of x) == WfstDecoder(graph, replace(config, online=True)).decode(x)

(words exact, scores equal; tests/test_wfst_stream.py). `config.online` itself is ignored here: streaming is
always online. `partial` applies no end-of-stream rule: it is the best frontier token's path (first of equal
scores), with the frame at which each word's arc was taken.

Slots and memory: a decoder owns `max_streams` fixed slots (one workspace); `create_stream` takes a free slot
(a full decoder raises WfstStreamSlotsFull: finalize or close a stream first), `finalize`/`close` free it.
Word links are stored as offline (a link per arc with output words) and, as the stream advances, compacted:
the prefix every frontier token's path shares (it can no longer change) is drained into the stream's
transcript and its links are freed, so a stream's link store stays bounded by
max(compact_min_links, 2 L) + one step's links however long it runs (L: the links on the frontier's
diverging tails). `memory_stats(stream)` reports it (CPU: decoders/csrc/wfst_stream_cpu.cpp).

Blank skipping (config.blank_skip_threshold) drops frames chunk by chunk before the search, as offline.

CUDA (decoders/csrc/wfst_stream_cuda.cpp, launcher wfst_stream_launch.cu, kernels wfst_stream_kernels.cuh): the
offline decoder's own step kernels run over one persistent workspace whose lanes are the slots (allocated once:
device memory is flat after the first call). A chunk call stages the streams' rows into their slots and steps them;
slots outside the call stay parked. The word links of all slots share one arena, garbage-collected between calls
when it is half full: each stream's converged prefix is drained to the host, the rest compacted
(`memory_stats` reports the arena). Chunks longer than `max_chunk_frames` are split (the arena is sized for two
pieces of every slot). Differences from the CPU reference: exact score ties may resolve differently (atomic order,
as offline); partial hypotheses carry no word frames (timesteps None: the arena stores no frame); capacity
overflows (WfstResult.overflow bits, decoders/wfst.py) cannot be rescued by re-decoding a stream and are reported.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional, Sequence

import numpy as np
import torch

from decoders.graph import WfstGraph
from decoders.types import Hypothesis
from decoders.wfst import (
    FLAG_HAS_PATH,
    FLAG_REACHED_FINAL,
    BoostTable,
    WfstDecoder,
    WfstDecoderConfig,
    WfstResult,
    _ops,
    arc_weights,
    build_boost_tables,
    gpu_capacities,
)

__all__ = ["WfstStreamingDecoder", "WfstStream", "WfstStreamSlotsFull"]


class WfstStreamSlotsFull(RuntimeError):
    """Every slot of the decoder holds an open stream."""


class WfstStream:
    """One open stream of a WfstStreamingDecoder (a handle: the state lives in the decoder's slot)."""

    __slots__ = ("_decoder", "slot", "frames", "closed", "oov_boost_words")

    def __init__(self, decoder: "WfstStreamingDecoder", slot: int, oov: list):
        self._decoder = decoder
        self.slot = slot
        self.frames = 0  # frames decoded so far (after blank skipping)
        self.closed = False
        self.oov_boost_words = oov

    def __repr__(self) -> str:
        return f"WfstStream(slot={self.slot}, frames={self.frames}, closed={self.closed})"


class WfstStreamingDecoder:
    """Chunked WFST decoding of up to `max_streams` concurrent streams over one graph on one device.

    compact_min_links: a stream's link store is compacted (and its converged prefix drained) when it reaches
    max(compact_min_links, 2 x the links still live) entries; smaller = tighter memory, more frequent passes.
    """

    def __init__(self, graph: WfstGraph, config: Optional[WfstDecoderConfig] = None, device="cpu", *,
                 max_streams: int = 64, compact_min_links: int = 4096, max_chunk_frames: int = 32,
                 drain_capacity: int = 4096):
        if isinstance(max_streams, bool) or not isinstance(max_streams, (int, np.integer)) or not 1 <= max_streams <= 2**20:
            raise ValueError(f"max_streams must be an int in [1, 2^20], got {max_streams!r}")
        for name, v in (("max_chunk_frames", max_chunk_frames), ("drain_capacity", drain_capacity)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 2**20:
                raise ValueError(f"{name} must be an int in [1, 2^20], got {v!r}")
        if isinstance(compact_min_links, bool) or not isinstance(compact_min_links, (int, np.integer)) or compact_min_links < 1:
            raise ValueError(f"compact_min_links must be an int >= 1, got {compact_min_links!r}")
        self.config = replace(config or WfstDecoderConfig(), online=True)
        # the offline decoder in online mode: input checks, blank skipping, the uploaded graph, result parsing
        self._offline = WfstDecoder(graph, self.config, device)
        self.graph = graph
        self.device = self._offline.device
        self.max_streams = int(max_streams)
        self._streams: list[Optional[WfstStream]] = [None] * self.max_streams
        g = self._offline._graph
        cfg = self.config
        args = [g["row_splits"], g["eps_begin"], g["final_begin"], g["dest"], g["ilabel"], g["aux_splits"],
                g["aux_words"], arc_weights(g, graph, cfg.word_bonus), int(graph.start_state), int(graph.final_state), float(cfg.search_beam),
                int(cfg.min_active), int(cfg.max_active), bool(cfg.allow_partial), float(cfg.acoustic_scale),
                self._offline._eps_passes(cfg),  # the offline decoder's pass count (same closure, same results)
                self.max_streams, int(compact_min_links)]
        _ops()  # builds / loads the extension (registers the classes)
        if self.device.type == "cpu":
            self._impl = torch.classes.beamdec.WfstStreamCpu(*args)
        else:
            # per-lane capacities as offline (one lane); the shared word-link arena holds two pieces' worth of links
            # (256 per lane and step, above the measured worst utterance) and is garbage-collected when half full
            caps = gpu_capacities(cfg, 1, int(max_chunk_frames))
            arena = cfg.arena_capacity or int(min(max(2**20, 2 * self.max_streams * int(max_chunk_frames) * 256), 2**28))
            args += [int(caps["frontier_capacity"]), int(caps["candidate_capacity"]), int(caps["hash_capacity"]),
                     int(arena), int(max_chunk_frames), int(drain_capacity)]
            self._impl = torch.classes.beamdec.WfstStreamCuda(*args)

    # ---- lifecycle ----------------------------------------------------------------------------------
    def create_stream(self, boosts: Optional[BoostTable] = None) -> WfstStream:
        """Opens a stream in a free slot; `boosts` as WfstDecoder.decode's (one {word: boost} dict)."""
        if boosts is not None and not isinstance(boosts, dict):
            raise TypeError(f"boosts must be a dict {{word: boost}} or None, got {type(boosts).__name__}")
        keys, values, oov = build_boost_tables([boosts] if boosts is not None else None, 1, self.graph,
                                              self.config.word_bonus)
        try:
            slot = self._streams.index(None)
        except ValueError:
            raise WfstStreamSlotsFull(f"all {self.max_streams} stream slots are in use: finalize or close a stream, or "
                                      "build the decoder with a larger max_streams") from None
        self._impl.open(slot, keys[0].contiguous().to(self.device), values[0].contiguous().to(self.device))
        stream = WfstStream(self, slot, oov[0])
        self._streams[slot] = stream
        return stream

    def close(self, stream: WfstStream) -> None:
        """Frees the stream's slot without a result (the stream cannot be used again)."""
        self._own([stream], "close")
        self._impl.close(stream.slot)
        self._release(stream)

    def _release(self, stream: WfstStream) -> None:
        stream.closed = True
        self._streams[stream.slot] = None

    def _own(self, streams, what: str) -> torch.Tensor:
        """The slots of `streams` (checked: open streams of this decoder, no repeats) as an int64 tensor."""
        if isinstance(streams, WfstStream) or not isinstance(streams, Sequence):
            raise TypeError(f"{what}: streams must be a list of WfstStream, got {type(streams).__name__}")
        slots = []
        for i, s in enumerate(streams):
            if not isinstance(s, WfstStream):
                raise TypeError(f"{what}: streams[{i}] is a {type(s).__name__}, not a WfstStream")
            if s._decoder is not self:
                raise ValueError(f"{what}: streams[{i}] belongs to another WfstStreamingDecoder")
            if s.closed or self._streams[s.slot] is not s:
                raise ValueError(f"{what}: streams[{i}] (slot {s.slot}) is closed (finalized or closed before)")
            slots.append(s.slot)
        if len(set(slots)) != len(slots):
            raise ValueError(f"{what}: a stream appears twice in streams")
        return torch.tensor(slots, dtype=torch.int64)

    # ---- decoding -----------------------------------------------------------------------------------
    def decode_chunk(self, streams: Sequence[WfstStream], log_probs: torch.Tensor, lengths) -> None:
        """Advances each stream by lengths[i] frames of log_probs[i] (N, chunk_T, V), in one batched call."""
        slots = self._own(streams, "decode_chunk")
        if isinstance(log_probs, torch.Tensor) and log_probs.dim() == 3 and log_probs.shape[0] != len(slots):
            raise ValueError(f"decode_chunk: log_probs has {log_probs.shape[0]} rows for {len(slots)} streams")
        if isinstance(log_probs, torch.Tensor) and log_probs.dim() == 3 and log_probs.shape[1] == 0:
            raise ValueError("decode_chunk: a chunk of 0 frames (log_probs is (N, 0, V)); send at least one frame")
        lengths = self._offline._check(log_probs, lengths)
        if len(slots) and int(lengths.min()) < 1:
            i = int(torch.nonzero(lengths < 1)[0])
            raise ValueError(f"decode_chunk: lengths[{i}] = 0: a chunk of 0 frames; leave the stream out of this call")
        if len(slots) == 0:
            return
        if self.config.blank_skip_threshold is not None:
            log_probs, lengths = self._offline._skip_blanks(log_probs, lengths)
        self._impl.advance(slots, log_probs.contiguous(), lengths)
        for s, n in zip(streams, lengths.tolist()):
            s.frames += int(n)

    def partial(self, streams: Sequence[WfstStream]) -> list[Hypothesis]:
        """Best path so far of each stream (no end-of-stream rules): words, score, frame of each word."""
        slots = self._own(streams, "partial")
        words, frames, offsets, scores, info = self._impl.partial(slots)
        # frames: the CPU reference records the frame of each word's arc; the CUDA arena does not (-1: None)
        return [Hypothesis(tokens=[], words=self._strings(words[a:b].tolist()), score=float(scores[i]),
                           timesteps=None if bool((frames[a:b] < 0).any()) else frames[a:b].tolist())
                for i, (a, b) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist()))]

    def finalize(self, streams: Sequence[WfstStream]) -> WfstResult:
        """End-of-stream rules (final step), the best path of each stream; the streams are closed afterwards."""
        slots = self._own(streams, "finalize")
        words, frames, offsets, scores, info = self._impl.finalize(slots)
        for s in streams:
            self._release(s)
        ids = [words[a:b].tolist() for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        info = info.tolist()
        return WfstResult(words=ids, word_strings=[self._strings(w) for w in ids], scores=scores.to(torch.float64),
                          overflow=[r[0] for r in info], reached_final=[bool(r[1] & FLAG_REACHED_FINAL) for r in info],
                          has_path=[bool(r[1] & FLAG_HAS_PATH) for r in info], rescued=[], rescued_overflow=[],
                          oov_boost_words=[s.oov_boost_words for s in streams])

    def _strings(self, ids: list[int]) -> list[str]:
        vocab = self.graph.words
        return [vocab[w] if vocab is not None and 0 <= w < len(vocab) else str(w) for w in ids]

    # ---- introspection --------------------------------------------------------------------------------
    @property
    def open_streams(self) -> int:
        return sum(s is not None for s in self._streams)

    def memory_stats(self, stream: WfstStream) -> dict:
        """Memory of the stream. CPU: frames, stored_links (its link store now), peak_stored_links, links_created,
        drained_words, frontier (states) -- the link store is what compaction bounds, drained_words is the
        transcript. CUDA (one word-link arena shared by the slots): frames, arena_links (live links of all streams
        now), peak_arena_links, gc_runs, drained_words, frontier, device_bytes (everything the decoder holds on
        the device, allocated once; the per-call log-prob staging excluded)."""
        slot = int(self._own([stream], "memory_stats")[0])
        v = self._impl.stats(slot).tolist()
        if self.device.type == "cpu":
            return dict(frames=v[0], stored_links=v[1], peak_stored_links=v[2], links_created=v[3],
                        drained_words=v[4], frontier=v[5])
        return dict(frames=v[0], arena_links=v[1], peak_arena_links=v[2], gc_runs=v[3], drained_words=v[4],
                    frontier=v[5], device_bytes=int(self._impl.device_bytes()))

    def collect(self) -> None:
        """CUDA: garbage-collect the word-link arena now (decode_chunk does when it is half full). CPU: no-op
        (each stream compacts its own store as it steps)."""
        if self.device.type == "cuda":
            self._impl.collect()
