"""Streaming WFST benchmarks: bounded memory over long streams, and the paper's streaming latency study (Table 4).

Modes (each writes one run directory under runs/bench/wfst_stream/<run>, rows through eval.bench.common.BenchRun):

  memory      one long stream (default 90,000 frames = 1 hour at 40 ms) and N concurrent streams (default 256 x
              15,000 frames = 10 minutes), decoded chunk after chunk as fast as possible; per chunk the decoder's
              memory (CUDA: allocator bytes + live word links; CPU: the stream's link store) -> memory.json and
              memory_over_time.png; a row per run with WER, RTFx and the memory probe.
  serve       the Table 4 analogue: N real-time streams, each sending a chunk (default 400 ms = 10 frames) every
              chunk period (or Poisson arrivals at the same mean rate); configurations:
                wfst        our streaming decoder behind a dynamic batcher (max batch, max wait), one server
                flashlight  Flashlight's incremental decoder (decode_begin / decode_step / decode_end), one
                            decoder per stream, streams dealt to P worker processes (default 16; the paper's
                            "16 CPU cores"), each worker serving its streams' chunks first come first served
              per configuration: compute / queue / total latency (mean, p50, p90, p99), sustained RTFx, whether it
              kept up (backlog at the end of the arrivals), the M/D/1 prediction (reports.streaming) -> serving.md.
  sweep       `serve` over several stream counts (short runs; --fl-streams: Flashlight's own list), stopping at the
              first N a configuration does not sustain -> largest_sustained.json (per configuration, and the
              GPU / Flashlight ratio when both ran); --give-up-s ends a run once a chunk waited that long (a
              server that far behind is not keeping up; the row says aborted_at_s), --time-budget-s skips the
              runs that could not finish in time (listed as skipped).
  throughput  streaming vs offline decode throughput at equal batch (the same utterances, streamed in chunks).

Log-probs: the embedded workload's posterior simulator (eval.bench.common.workload_set), each stream the
concatenation of whole utterances, replayed at the real rate (a stream's chunk k arrives at offset + k * period).
Graph: --graph-dir (TLG.bin; the words of each stream are scored against the concatenated references).

On the H200 (each command well under 3 minutes; --duration 600 gives the paper's 10-minute run):

    python -m eval.bench.wfst_stream_bench memory --device cuda --run h200_memory
    python -m eval.bench.wfst_stream_bench serve --decoders wfst flashlight --streams 256 --duration 60 --run h200_table4
    python -m eval.bench.wfst_stream_bench serve --decoders wfst flashlight --streams 256 --duration 60 \
        --arrivals poisson --run h200_table4_poisson
    python -m eval.bench.wfst_stream_bench sweep --decoders wfst --streams 256 512 1024 2048 --duration 20 --run h200_sweep_wfst
    python -m eval.bench.wfst_stream_bench sweep --decoders flashlight --streams 16 32 64 128 256 --duration 20 --run h200_sweep_fl
    python -m eval.bench.wfst_stream_bench throughput --device cuda --batches 32 256 --run h200_throughput

Table 4 on graphs big enough that Flashlight falls behind (bench scale: workload, graph, sweep of both
configurations and the throughput run in one device call, ~6-7 minutes): `bash eval/bench/stream_gpu_run.sh`.

Flashlight's weights: the harness's (--fl-lm-weight 0.5, --fl-word-score 2, conf/decoder/flashlight.yaml) by
default; --fl-matched puts it at the WFST decoder's objective (acoustic_scale x acoustic + LM, no word bonus: LM
weight 1 / acoustic_scale, word score 0). The WER gap between the two on the tiny serve run (11.74 vs 10.66 %) is
that difference of weights, not streaming: at matched weights they agree (README, "Streaming").

Timing: every latency is an eval.metrics.clock_s() difference (one clock across the worker processes) with the
GPU synchronised before a batch's completion time is taken; aggregate decoder seconds go through
eval.metrics.Stopwatch, memory through eval.metrics.MemoryProbe, WER through eval.metrics.word_error_stats.
"""
from __future__ import annotations

import argparse
import heapq
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from eval.bench.common import BenchRun, LogProbSet, describe_error, print_rows, release_device_memory, workload_set
from eval.metrics import MemoryProbe, Stopwatch, clock_s, cuda_allocated_bytes, cuda_free_bytes, word_error_stats
from reports.streaming import latency_summary, md1_queue_wait_s, plot_memory_over_time, serving_table

FRAME_S = 0.04
SEARCH_BEAM, MAX_ACTIVE = 17.0, 10000  # the paper's settings (as eval.bench.wfst_bench)
# the harness's acoustic scale for the simulator's posteriors (conf/decoder/wfst.yaml); --acoustic-scale overrides
SETTINGS = {"acoustic_scale": 3.0}
DEFAULT_GRAPH_DIR = "data/graphs/tiny/bpe_blanklast/compact"


# ---------------------------------------------------------------------------------------------------------
# Streams: whole utterances of the set, concatenated, as frame indices into one flat (frames, V) array
# ---------------------------------------------------------------------------------------------------------
@dataclass
class StreamSet:
    """Streams of whole utterances. A stream is a sequence of segments (utterances); `segmented`: each segment is
    decoded as its own decoder stream (an endpoint between utterances: the graphs are sentence graphs, so a
    sentence boundary inside one decoder stream would cost words), else the stream is one segment."""

    flat: torch.Tensor  # (total frames of the set, V) float32, host
    segments: list[list[np.ndarray]]  # per stream, per segment: indices into flat, in order
    refs: list[str]
    vocab: int
    chunk_frames: int
    chunks: list[list[tuple[int, int, int]]] = None  # per stream: (segment, first frame, frames) of each chunk
    segment_refs: Optional[list[list[str]]] = None  # per stream, the reference of each segment

    def __post_init__(self):
        C = self.chunk_frames
        self.chunks = [[(j, a, min(C, len(seg) - a)) for j, seg in enumerate(segs) for a in range(0, len(seg), C)]
                       for segs in self.segments]
        # per stream, (chunks, C) indices into flat + a zero row (padding), so a batch is one gather
        pad = int(self.flat.shape[0])
        self._flat0 = torch.cat([self.flat, torch.zeros(1, self.vocab)])
        self.flat = self._flat0[:pad]  # one copy of the log-probs (a view), so sharing it shares both
        self._index = []
        for s, segs in enumerate(self.segments):
            idx = np.full((len(self.chunks[s]), C), pad, dtype=np.int64)
            for k, (j, a, n) in enumerate(self.chunks[s]):
                idx[k, :n] = segs[j][a : a + n]
            self._index.append(idx)

    def __len__(self) -> int:
        return len(self.segments)

    def share_memory_(self) -> "StreamSet":
        """Moves the log-probs to shared memory: worker processes then map them instead of receiving copies."""
        self._flat0.share_memory_()
        return self

    def frames(self, s: int) -> int:
        return sum(len(seg) for seg in self.segments[s])

    def audio_seconds(self) -> float:
        return FRAME_S * sum(self.frames(s) for s in range(len(self)))

    def num_chunks(self, s: int) -> int:
        return len(self.chunks[s])

    def first_of_segment(self, s: int, k: int) -> bool:
        return self.chunks[s][k][1] == 0

    def last_of_segment(self, s: int, k: int) -> bool:
        j, a, n = self.chunks[s][k]
        return a + n == len(self.segments[s][j])

    def chunk(self, streams: Sequence[int], ks: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, chunk_frames, V) log-probs of chunk ks[i] of stream streams[i] (zero-padded) and the valid lengths."""
        idx = np.stack([self._index[s][k] for s, k in zip(streams, ks)]) if len(streams) else \
            np.zeros((0, self.chunk_frames), dtype=np.int64)
        out = self._flat0.index_select(0, torch.from_numpy(idx.reshape(-1))).view(len(streams), self.chunk_frames,
                                                                                  self.vocab)
        lengths = torch.tensor([self.chunks[s][k][2] for s, k in zip(streams, ks)], dtype=torch.int64)
        return out, lengths


def build_streams(data: LogProbSet, n_streams: int, frames_per_stream: int, chunk_frames: int,
                  segmented: bool = True) -> StreamSet:
    """Stream i: utterances i*7, i*7+1, ... (mod the set) while the stream stays within frames_per_stream (at
    least one utterance)."""
    lengths = [int(x) for x in data.lengths]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = torch.cat([data.log_probs[b, : lengths[b]] for b in range(len(data))]).float().contiguous()
    segments, refs, seg_refs = [], [], []
    U = len(data)
    if not any(lengths):
        raise ValueError("build_streams: every utterance of the set has 0 frames")
    for i in range(n_streams):
        parts, text, total, u = [], [], 0, (i * 7) % U
        while not (parts and total + lengths[u] > frames_per_stream):
            if lengths[u]:
                parts.append(np.arange(offsets[u], offsets[u + 1], dtype=np.int64))
                text.append(data.refs[u])
            total += lengths[u]
            u = (u + 1) % U
        segments.append(parts if segmented else [np.concatenate(parts)])
        refs.append(" ".join(text))
        seg_refs.append(text if segmented else [" ".join(text)])
    return StreamSet(flat=flat, segments=segments, refs=refs, vocab=data.vocab_size, chunk_frames=chunk_frames,
                     segment_refs=seg_refs)


def load_graph(graph_dir: Path, which: str):
    from decoders.graph import WfstGraph

    path = graph_dir / f"{which}.bin"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found (build graphs with recipes.build_graphs or give --graph-dir)")
    return WfstGraph.load(path)


def wfst_config():
    from decoders.wfst import WfstDecoderConfig

    return WfstDecoderConfig(search_beam=SEARCH_BEAM, max_active=MAX_ACTIVE, acoustic_scale=SETTINGS["acoustic_scale"])


# ---------------------------------------------------------------------------------------------------------
# memory: long streams decoded back to back, memory recorded per chunk
# ---------------------------------------------------------------------------------------------------------
def run_memory(run: BenchRun, args, data: LogProbSet, graph) -> None:
    from decoders.wfst_stream import WfstStreamingDecoder

    device = args.device
    series, detail = {}, {}
    for label, n, frames in (("1 stream x %d frames" % args.hour_frames, 1, args.hour_frames),
                             ("%d streams x %d frames" % (args.streams, args.stream_frames), args.streams,
                              args.stream_frames)):
        C = args.chunk_frames
        streams = build_streams(data, n, frames, C, segmented=False)  # one decoder stream each: the memory test
        lab = f"wfst_stream@{device.split(':')[0]}[{n} x {frames} frames]"
        params = {"mode": "memory", "streams": n, "frames_per_stream": frames, "chunk_frames": C}
        try:
            baseline = cuda_free_bytes(device) if device.startswith("cuda") else None
            dec = WfstStreamingDecoder(graph, wfst_config(), device, max_streams=n, max_chunk_frames=C)
            handles = [dec.create_stream() for _ in range(n)]
            watch, probe = Stopwatch(device), MemoryProbe(device, device_free_baseline_bytes=baseline)
            audio_s, mib, links = [], [], []
            K = max(streams.num_chunks(s) for s in range(n))
            hyps = [""] * n
            every = max(1, K // 400)
            with probe:
                for k in range(K):
                    live = [s for s in range(n) if k < streams.num_chunks(s)]
                    lp, lengths = streams.chunk(live, [k] * len(live))
                    lp = lp.to(device)
                    with watch:
                        dec.decode_chunk([handles[s] for s in live], lp, lengths)
                        done = [s for s in live if k == streams.num_chunks(s) - 1]
                        if done:
                            res = dec.finalize([handles[s] for s in done])
                            for s, w in zip(done, res.word_strings):
                                hyps[s] = " ".join(w)
                    alive = [s for s in live if s not in done]
                    if k % every == 0 and alive:
                        st = dec.memory_stats(handles[alive[0]])
                        audio_s.append((k + 1) * C * FRAME_S)
                        if device.startswith("cuda"):
                            mib.append(cuda_allocated_bytes(device) / 2**20)
                            links.append(st["arena_links"])
                        else:  # the CPU reference's link stores (12 bytes a link), all streams
                            stored = [dec.memory_stats(handles[s])["stored_links"] for s in alive]
                            mib.append(sum(stored) * 12 / 2**20)
                            links.append(sum(stored))
        except Exception as e:  # noqa: BLE001 - a configuration that cannot run is a row, not a crash
            run.unavailable(decoder=lab, decoder_name="wfst_stream", device=device, reason=describe_error(e),
                            params=params)
            continue
        finally:
            dec = handles = None  # noqa: F841
            release_device_memory()
        wer = word_error_stats(streams.refs, hyps)
        # flat after warm-up (the first tenth of the stream): the peak over the last half is within 10 % of the peak
        # over the first half after warm-up (plus 1 MiB of allocator granularity on CUDA); a store that grew with
        # the stream would have doubled. CUDA: allocator bytes; CPU: the link stores.
        v = mib if device.startswith("cuda") else links
        warm, half = len(v) // 10, len(v) // 2
        slack = 1.0 if device.startswith("cuda") else 0.0
        flat_after_warmup = len(v) >= 10 and max(v[half:]) <= 1.1 * max(v[warm:half]) + slack
        stats = {"memory_flat_after_warmup": int(flat_after_warmup), "peak_mib_first_half": max(mib[warm:half] or [0]),
                 "peak_mib_second_half": max(mib[half:] or [0]), "peak_links": max(links or [0])}
        run.measured(decoder=lab, decoder_name="wfst_stream", device=device, dataset=data.dataset, wer=wer,
                     audio_seconds=streams.audio_seconds(), decoder_seconds=watch.wall_seconds,
                     decoder_cuda_seconds=watch.cuda_seconds, frames=sum(streams.frames(s) for s in range(n)),
                     memory=probe.stats, stats=stats, batch_size=n, decoder_config=_cfg_dict(), params=params)
        unit = "allocated MiB" if device.startswith("cuda") else "link store MiB (12 B/link)"
        series[f"{label} ({unit})"] = {"audio_s": audio_s, "mib": mib}
        detail[label] = {"audio_s": audio_s, "mib": mib, "links": links, **stats}
        print(f"{lab}: RTFx {streams.audio_seconds() / max(watch.wall_seconds, 1e-9):.1f}, WER {100 * wer.wer:.2f} %, "
              f"memory flat after warm-up: {flat_after_warmup} ({stats})", flush=True)
        run.checkpoint()
    run.extra["memory.json"] = detail
    run.memory_series = series  # plotted into the run directory once it is written (main)


def _cfg_dict() -> dict:
    return {"search_beam": SEARCH_BEAM, "max_active": MAX_ACTIVE, "acoustic_scale": SETTINGS["acoustic_scale"]}


# ---------------------------------------------------------------------------------------------------------
# serve: real-time arrivals, a dynamic batcher in front of our decoder; Flashlight workers
# ---------------------------------------------------------------------------------------------------------
def arrival_times(streams: StreamSet, period_s: float, kind: str, seed: int) -> list[list[float]]:
    """Per stream, the arrival time (s from the start) of each chunk: periodic with a random phase, or Poisson
    with the same mean rate; a chunk never arrives before the audio it holds has been spoken (periodic) or before
    the stream's previous chunk (Poisson)."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(len(streams)):
        K = streams.num_chunks(s)
        if kind == "periodic":
            phase = float(rng.uniform(0, period_s))
            out.append([phase + (k + 1) * period_s for k in range(K)])
        else:
            out.append(list(np.cumsum(rng.exponential(period_s, size=K)) + period_s))
    return out


@dataclass
class ServeResult:
    arrival: list  # per chunk (s)
    dispatch: list
    done: list
    batch_sizes: list  # per dispatch
    batch_compute: list  # per dispatch (s)
    hyps: list
    wall_s: float
    arrivals_end_s: float
    backlog_at_end: int
    busy_s: float
    aborted_at_s: Optional[float] = None  # --give-up-s: when the run was ended (None: it ran to the end)
    served_frames: Optional[int] = None  # frames of the chunks served (all of them unless aborted)
    segment_hyps: Optional[list] = None  # per stream, the hypothesis of each finished segment (utterance)


def serve_wfst(streams: StreamSet, sched: list[list[float]], device: str, graph, chunk_frames: int, max_batch: int,
               max_wait_s: float, watch: Stopwatch, give_up_s: float = 0.0) -> ServeResult:
    """One server: a dynamic batcher (a batch leaves when max_batch chunks are ready or the oldest waited
    max_wait_s) in front of WfstStreamingDecoder; at most one chunk per stream per batch (chunks stay in order).
    give_up_s > 0: the run ends as soon as a ready chunk has waited that long (a server that far behind is not
    keeping up; the sweep needs no more of it)."""
    from decoders.wfst_stream import WfstStreamingDecoder

    n = len(streams)
    # one slot more than streams: a throw-away stream warms up (extension, graph upload, first kernels)
    dec = WfstStreamingDecoder(graph, wfst_config(), device, max_streams=n + 1, max_chunk_frames=chunk_frames)
    warm = dec.create_stream()
    lp, ln = streams.chunk([0], [0])
    dec.decode_chunk([warm], lp.to(device), ln)
    dec.finalize([warm])
    handles: list = [None] * n
    K = [streams.num_chunks(s) for s in range(n)]
    events = [(sched[s][k], s, k) for s in range(n) for k in range(K[s])]
    heapq.heapify(events)
    arrivals_end = max(e[0] for e in events)
    pending: dict[int, list] = {}  # stream -> FIFO of (arrival, k)
    ready_order: list = []  # heap of (arrival of the stream's oldest pending chunk, stream)
    arrival, dispatch, done_t, bsz, bcomp = [], [], [], [], []
    hyps: list[list[str]] = [[] for _ in range(n)]  # per stream, per finished segment
    backlog_at_end = None
    busy = 0.0
    aborted, served = None, 0
    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    t0 = clock_s() + 0.05
    while events or ready_order:
        now = clock_s() - t0
        while events and events[0][0] <= now:
            a, s, k = heapq.heappop(events)
            q = pending.setdefault(s, [])
            q.append((a, k))
            if len(q) == 1:
                heapq.heappush(ready_order, (a, s))
        if backlog_at_end is None and now >= arrivals_end:
            backlog_at_end = sum(len(q) for q in pending.values())
        if not ready_order:
            time.sleep(max(0.0, min(events[0][0] - now, 0.01)) if events else 0.0)
            continue
        oldest = ready_order[0][0]
        if give_up_s > 0 and now - oldest > give_up_s:
            aborted = now
            if backlog_at_end is None:  # what had arrived and was not served yet
                backlog_at_end = sum(len(q) for q in pending.values())
            break
        if len(ready_order) < max_batch and now - oldest < max_wait_s and events:
            time.sleep(max(0.0, min(oldest + max_wait_s - now, events[0][0] - now, 0.005)))
            continue
        take = [heapq.heappop(ready_order) for _ in range(min(max_batch, len(ready_order)))]
        ss = [s for _, s in take]
        items = [pending[s].pop(0) for s in ss]
        t_dispatch = clock_s() - t0
        lp, ln = streams.chunk(ss, [k for _, k in items])
        with watch:
            for s, (_, k) in zip(ss, items):  # a new utterance (segment) opens a decoder stream
                if streams.first_of_segment(s, k):
                    handles[s] = dec.create_stream()
            dec.decode_chunk([handles[s] for s in ss], lp.to(device, non_blocking=True), ln)
            fin = [s for s, (_, k) in zip(ss, items) if streams.last_of_segment(s, k)]
            if fin:  # the end of an utterance: endpoint, final result
                res = dec.finalize([handles[s] for s in fin])
                for s, w in zip(fin, res.word_strings):
                    hyps[s].append(" ".join(w))
                    handles[s] = None
            sync()
        t_done = clock_s() - t0
        busy += t_done - t_dispatch
        bsz.append(len(ss))
        bcomp.append(t_done - t_dispatch)
        served += int(ln.sum())
        for (a, _), s in zip(items, ss):
            arrival.append(a)
            dispatch.append(t_dispatch)
            done_t.append(t_done)
            if pending[s]:
                heapq.heappush(ready_order, (pending[s][0][0], s))
    wall = clock_s() - t0
    for h in handles:  # streams still open after an abort
        if h is not None and aborted is not None:
            dec.close(h)
    return ServeResult(arrival, dispatch, done_t, bsz, bcomp, [" ".join(x for x in h if x) for h in hyps], wall,
                       arrivals_end, backlog_at_end if backlog_at_end is not None else 0, busy, aborted, served, hyps)


# ---- Flashlight workers (spawned processes: each owns every P-th stream) ----------------------------------------
def _fl_serve(fl, decs_factory, streams: StreamSet, mine: list[int], sched: list[list[float]], t0: float,
              give_up_s: float, stop) -> dict:
    """One worker's share of one serving run: its streams' chunks first come first served, one at a time."""
    decs = {s: decs_factory() for s in mine}
    K = {s: streams.num_chunks(s) for s in mine}
    events = sorted((sched[s][k], s, k) for s in mine for k in range(K[s]))
    arrival, dispatch, done_t, hyps = [], [], [], {s: [] for s in mine}
    arrivals_end = max((e[0] for e in events), default=0.0)
    backlog_at_end, busy, i, aborted, served = None, 0.0, 0, None, 0
    for a, s, k in events:  # FIFO by arrival; one chunk at a time
        now = clock_s() - t0
        if now < a:
            time.sleep(a - now)
        now = clock_s() - t0
        if give_up_s > 0 and (now - a > give_up_s or stop.is_set()):  # this worker (or another) is that far behind
            stop.set()
            aborted = now
            if backlog_at_end is None:
                backlog_at_end = sum(1 for e in events[i:] if e[0] <= now)
            break
        if backlog_at_end is None and now >= arrivals_end:
            backlog_at_end = sum(1 for e in events[i:] if e[0] <= now)
        t_dispatch = now
        lp, ln = streams.chunk([s], [k])
        em = lp[0, : int(ln[0])].contiguous()
        served += int(ln[0])
        d = decs[s]
        if streams.first_of_segment(s, k):  # a new utterance
            d.decode_begin()
        d.decode_step(em.data_ptr(), int(ln[0]), em.shape[1])
        if streams.last_of_segment(s, k):  # its end: final result
            d.decode_end()
            best = d.get_best_hypothesis()
            hyps[s].append(" ".join(fl.word_dict.get_entry(w) for w in best.words if w >= 0))
        t_done = clock_s() - t0
        busy += t_done - t_dispatch
        arrival.append(a)
        dispatch.append(t_dispatch)
        done_t.append(t_done)
        i += 1
    return dict(arrival=arrival, dispatch=dispatch, done=done_t, hyps=hyps, busy=busy, arrivals_end=arrivals_end,
                backlog=backlog_at_end or 0, wall=clock_s() - t0, aborted=aborted, served=served)


def _fl_worker(conn, cfg: dict, ctx, stop):
    """A pool worker: loads Flashlight's lexicon decoder state (trie, KenLM) once, then serves one job per message
    ((streams, mine, sched, give_up_s) -> "armed"; the shared start time -> "done" with its timings); None ends it."""
    torch.set_num_threads(1)
    try:
        from flashlight.lib.text.decoder import LexiconDecoder

        from eval.adapters.flashlight import FlashlightDecoder

        fl = FlashlightDecoder(cfg, ctx)
        factory = lambda: LexiconDecoder(fl.options, fl.trie, fl.kenlm, fl.sil_idx, fl.tokens.blank_id,  # noqa: E731
                                         fl.unk_idx, [], False)
        conn.send(("ready", None))
    except Exception as e:  # noqa: BLE001 - reported to the parent
        conn.send(("error", describe_error(e)))
        return
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            streams, mine, sched, give_up_s = job
            conn.send(("armed", None))
            t0 = conn.recv()
            conn.send(("done", _fl_serve(fl, factory, streams, mine, sched, t0, give_up_s, stop)))
        except Exception as e:  # noqa: BLE001
            conn.send(("error", describe_error(e)))


class FlashlightPool:
    """P worker processes (spawned), each holding its own Flashlight decoder state, loaded once and reused for
    every serving run of a sweep (loading KenLM and the lexicon trie costs far more than a short run at bench
    scale). The streams' log-probs reach the workers through shared memory (torch.multiprocessing), not copies."""

    def __init__(self, ctx, processes: int, fl_cfg: dict):
        import torch.multiprocessing as tmp

        mp = tmp.get_context("spawn")
        self.stop = mp.Event()  # --give-up-s: the first worker that far behind ends every worker's run
        self.procs, self.conns = [], []
        t = clock_s()
        print(f"flashlight pool: starting {processes} processes (each loads the lexicon and the LM once) ...",
              flush=True)
        try:
            for _ in range(processes):
                parent, child = mp.Pipe()
                p = mp.Process(target=_fl_worker, args=(child, fl_cfg, ctx, self.stop), daemon=True)
                p.start()
                self.procs.append(p)
                self.conns.append(parent)
            for c in self.conns:
                kind, msg = c.recv()
                if kind != "ready":
                    raise RuntimeError(f"flashlight worker: {msg}")
        except BaseException:
            self.close()
            raise
        self.load_s = clock_s() - t
        print(f"flashlight pool: ready in {self.load_s:.1f} s", flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except (OSError, EOFError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self.procs, self.conns = [], []

    def serve(self, streams: StreamSet, sched, give_up_s: float = 0.0):
        """One run: streams dealt round-robin to the workers; -> (ServeResult, per-worker (chunks, busy, window))."""
        n, P = len(streams), len(self.conns)
        streams.share_memory_()
        self.stop.clear()
        jobs = [(w, list(range(w, n, P))) for w in range(P)]
        jobs = [(w, mine) for w, mine in jobs if mine]
        for w, mine in jobs:
            self.conns[w].send((streams, mine, sched, give_up_s))
        for w, _ in jobs:
            kind, msg = self.conns[w].recv()
            if kind != "armed":
                raise RuntimeError(f"flashlight worker: {msg}")
        t0 = clock_s() + 0.5
        for w, _ in jobs:
            self.conns[w].send(t0)
        parts, errors = [], []
        for w, _ in jobs:  # every worker answers (a failed one with its error), so the pool stays in step
            kind, msg = self.conns[w].recv()
            (parts if kind == "done" else errors).append(msg)
        if errors:
            raise RuntimeError(f"flashlight worker: {errors[0]}")
        return _merge_parts(parts, n)


def _merge_parts(parts: list[dict], n: int):
    hyps, seg_hyps = [""] * n, [[] for _ in range(n)]
    for part in parts:
        for s, h in part["hyps"].items():
            hyps[s] = " ".join(x for x in h if x)
            seg_hyps[s] = h
    cat = lambda key: [x for part in parts for x in part[key]]  # noqa: E731
    return ServeResult(cat("arrival"), cat("dispatch"), cat("done"), [1] * len(cat("done")),
                       [d - s for d, s in zip(cat("done"), cat("dispatch"))], hyps,
                       max(part["wall"] for part in parts), max(part["arrivals_end"] for part in parts),
                       sum(part["backlog"] for part in parts), sum(part["busy"] for part in parts),
                       min((part["aborted"] for part in parts if part.get("aborted") is not None), default=None),
                       sum(part["served"] for part in parts), seg_hyps), \
        [(len(part["done"]), part["busy"], part["arrivals_end"] if part.get("aborted") is None else
          min(part["arrivals_end"], part["aborted"])) for part in parts]


def serve_flashlight(streams: StreamSet, sched, ctx, processes: int, fl_cfg: dict, give_up_s: float = 0.0,
                     pool: Optional[FlashlightPool] = None):
    """One serving run on `pool` (a sweep's), or on a pool of its own."""
    if pool is not None:
        return pool.serve(streams, sched, give_up_s)
    with FlashlightPool(ctx, processes, fl_cfg) as own:
        return own.serve(streams, sched, give_up_s)


def latency_timeline(r: ServeResult, windows: int = 30) -> dict:
    """Total latency over the run: the chunks bucketed by arrival time into `windows` equal windows of the arrival
    span (at least 1 s each), per window the start (s), the chunks, and their mean and p99 total latency (ms) --
    a growing queue is a rising curve (serving_timeline.json, plotted by reports.streaming.plot_serving_timeline).
    Only answered chunks count (a run ended early answered fewer than arrived: zip stops at the shorter list)."""
    total = [(a, d - a) for a, d in zip(r.arrival, r.done)]
    if not total:
        return {"window_s": 0.0, "t_s": [], "chunks": [], "mean_ms": [], "p99_ms": []}
    t0 = min(a for a, _ in total)
    span = max(max(a for a, _ in total) - t0, 1e-9)
    width = max(span / windows, 1.0)
    buckets: dict[int, list] = {}
    for a, lat in total:
        buckets.setdefault(min(int((a - t0) / width), windows - 1), []).append(lat)
    keys = sorted(buckets)
    summ = [latency_summary(buckets[k], "total") for k in keys]  # the rows' definitions (nearest-rank p99)
    return {"window_s": width, "t_s": [k * width for k in keys], "chunks": [len(buckets[k]) for k in keys],
            "mean_ms": [x["total_mean_ms"] for x in summ], "p99_ms": [x["total_p99_ms"] for x in summ]}


def serving_stats(r: ServeResult, n_streams: int, audio_s: float, servers: Optional[list] = None) -> dict:
    """Latency summaries, utilisation, the M/D/1 prediction, sustained RTFx and whether the server kept up.
    servers: Flashlight's per-worker (chunks, busy s, arrival window s); None = one batching server."""
    compute = [d - s for d, s in zip(r.done, r.dispatch)]
    queue = [s - a for s, a in zip(r.dispatch, r.arrival)]
    total = [d - a for d, a in zip(r.done, r.arrival)]
    st = {**latency_summary(compute, "compute"), **latency_summary(queue, "queue"), **latency_summary(total, "total")}
    if servers is None:  # one server; a request is a dispatched batch
        D = sum(r.batch_compute) / max(len(r.batch_compute), 1)
        lam = len(r.batch_compute) / max(r.arrivals_end_s, 1e-9)
        wq = md1_queue_wait_s(lam, D)
        st["utilisation"] = lam * D
        st["md1_total_ms"] = 1000.0 * (D + wq)
        st["mean_batch"] = sum(r.batch_sizes) / max(len(r.batch_sizes), 1)
    else:  # per-worker M/D/1, averaged over chunks
        preds, utils, weights = [], [], []
        for chunks, busy, window in servers:
            D = busy / max(chunks, 1)
            lam = chunks / max(window, 1e-9)
            preds.append(D + md1_queue_wait_s(lam, D))
            utils.append(lam * D)
            weights.append(chunks)
        tot = sum(weights)
        st["md1_total_ms"] = 1000.0 * sum(p * w for p, w in zip(preds, weights)) / max(tot, 1)
        st["utilisation"] = max(utils or [0.0])
    if r.aborted_at_s is None:
        st["sustained_rtfx"] = audio_s / max(r.wall_s, 1e-9)
        st["capacity_rtfx"] = audio_s / max(r.busy_s, 1e-9)
    else:  # ended early (--give-up-s): it did not keep up; only part of the audio was served
        st["aborted_at_s"] = r.aborted_at_s
    # kept up: at the end of the arrivals at most one chunk per stream was waiting, and the run ended within one
    # chunk period + the p99 compute latency of the last arrival (a growing queue fails both)
    st["backlog_at_end"] = r.backlog_at_end
    st["drain_after_arrivals_s"] = r.wall_s - r.arrivals_end_s
    st["kept_up"] = int(r.aborted_at_s is None and r.backlog_at_end <= n_streams and st["drain_after_arrivals_s"]
                        <= 1.0 + 2 * st.get("compute_p99_ms", 0.0) / 1000.0)
    # queues growing: total latency of the last quarter of chunks vs the second quarter (by arrival)
    order = sorted(range(len(total)), key=lambda i: r.arrival[i])
    q = len(order) // 4
    if q:
        early = sum(total[i] for i in order[q : 2 * q]) / q
        late = sum(total[i] for i in order[3 * q :]) / len(order[3 * q :])
        st["late_over_early_latency"] = late / max(early, 1e-9)
    return st


def run_serve(run: BenchRun, args, data: LogProbSet, graph, n_streams: int, duration_s: float,
              decoders: Sequence[str], fl_pool: Optional[FlashlightPool] = None) -> dict:
    """One serving run per configuration in `decoders`; fl_pool: a Flashlight pool to reuse (a sweep's)."""
    frames = int(round(duration_s / FRAME_S))
    C = args.chunk_frames
    streams = build_streams(data, n_streams, frames, C)
    period = C * FRAME_S
    sched = arrival_times(streams, period, args.arrivals, args.seed)
    kept = {}
    labels = {"wfst": f"wfst_stream@{args.device.split(':')[0]}[N={n_streams}, {args.arrivals}]",
              "flashlight": f"flashlight_stream@cpu[P={args.fl_processes}, N={n_streams}, {args.arrivals}]"}
    for name in decoders:
        lab = labels[name]
        params = {"mode": "serve", "streams": n_streams, "arrivals": args.arrivals, "chunk_ms": int(1000 * period),
                  "duration_s": duration_s}
        if args.give_up_s > 0:
            params["give_up_s"] = args.give_up_s
        device = args.device if name == "wfst" else "cpu"
        try:
            if name == "wfst":
                params.update(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms)
                watch = Stopwatch(device)
                probe = MemoryProbe(device)
                with probe:
                    r = serve_wfst(streams, sched, device, graph, C, args.max_batch or n_streams,
                                   args.max_wait_ms / 1000.0, watch, args.give_up_s)
                servers = None
                dec_s, cuda_s, mem = watch.wall_seconds, watch.cuda_seconds, probe.stats
            else:
                params.update(processes=args.fl_processes, fl_weights="matched" if args.fl_matched else "harness")
                ctx = flashlight_context(args, data) if fl_pool is None else None
                probe = MemoryProbe("cpu")
                with probe:
                    r, servers = serve_flashlight(streams, sched, ctx, args.fl_processes, flashlight_cfg(args),
                                                  args.give_up_s, pool=fl_pool)
                dec_s, cuda_s, mem = r.busy_s, None, probe.stats
        except Exception as e:  # noqa: BLE001
            run.unavailable(decoder=lab, decoder_name=f"{name}_stream", device=device, reason=describe_error(e),
                            params=params)
            continue
        finally:
            release_device_memory()
        st = serving_stats(r, n_streams, streams.audio_seconds(), servers)
        run.extra.setdefault("serving_timeline.json", {})[lab] = latency_timeline(r)  # every N of a sweep
        wer = word_error_stats(streams.refs, r.hyps)  # an aborted run's is over the utterances it finished
        frames = sum(streams.frames(s) for s in range(n_streams))
        if r.aborted_at_s is not None:  # served audio only (the RTFx of the row is what it did decode)
            frames = max(1, int(r.served_frames or 0))
            refs, hyps = _finished(streams, r.segment_hyps)
            # the WER of the utterances it finished; none finished: every stream's, unserved words as deletions
            st["wer_scope"] = "finished utterances" if refs else "all streams (unserved words are deletions)"
            wer = word_error_stats(refs, hyps) if refs else wer
        run.measured(decoder=lab, decoder_name=f"{name}_stream", device=device, dataset=data.dataset, wer=wer,
                     audio_seconds=FRAME_S * frames, decoder_seconds=dec_s, decoder_cuda_seconds=cuda_s,
                     frames=frames, memory=mem, stats=st, batch_size=0,
                     decoder_config=_cfg_dict() if name == "wfst" else flashlight_cfg(args), params=params)
        kept[name] = bool(st["kept_up"])
        rtfx = st.get("sustained_rtfx")
        end = f"ENDED at {st['aborted_at_s']:.1f} s (a chunk waited > {args.give_up_s:g} s)" \
            if r.aborted_at_s is not None else f"sustained RTFx {rtfx:.1f}"
        print(f"{lab}: total latency mean {st.get('total_mean_ms', 0):.1f} ms (p99 {st.get('total_p99_ms', 0):.1f}), "
              f"compute mean {st.get('compute_mean_ms', 0):.1f} ms, M/D/1 {st['md1_total_ms']:.1f} ms, "
              f"utilisation {st['utilisation']:.2f}, {end}, kept up {bool(st['kept_up'])}, WER {100 * wer.wer:.2f} %",
              flush=True)
        run.checkpoint()
    return kept


def _finished(streams: StreamSet, segment_hyps: list[list[str]]) -> tuple[list[str], list[str]]:
    """(refs, hyps) of the utterances (segments) an aborted run finished, in stream order."""
    refs, out = [], []
    for s, hs in enumerate(segment_hyps):
        for j, h in enumerate(hs):
            refs.append(streams.segment_refs[s][j])
            out.append(h)
    return refs, out


def run_sweep(run: BenchRun, args, data: LogProbSet, graph, start_s: Optional[float] = None) -> dict:
    """`serve` over increasing stream counts per configuration, stopping at the first N that does not keep up.
    --fl-streams: Flashlight's counts (default --streams). --time-budget-s: a run is skipped (and said so) when it
    could not end within the budget counted from start_s (default: now), estimated as 1.5 x its duration + the
    setup the previous run of the configuration took (10 s before the first)."""
    t_start = clock_s() if start_s is None else start_s
    largest = {}
    for name in args.decoders:  # stops at the first N that does not keep up
        counts = sorted(args.fl_streams or args.streams) if name == "flashlight" else sorted(args.streams)
        largest[name] = {"largest_sustained": 0, "first_not_sustained": None, "tried": [], "skipped": []}
        setup = 10.0
        pool = None
        try:
            for n in counts:
                left = args.time_budget_s - (clock_s() - t_start) if args.time_budget_s > 0 else math.inf
                if 1.5 * args.duration + setup > left:
                    largest[name]["skipped"].append(n)
                    print(f"sweep: {name} N={n} skipped ({left:.0f} s left of --time-budget-s {args.time_budget_s:g})",
                          flush=True)
                    continue
                if name == "flashlight" and pool is None:  # loaded once for every N
                    try:
                        pool = FlashlightPool(flashlight_context(args, data), args.fl_processes, flashlight_cfg(args))
                    except Exception as e:  # noqa: BLE001 - the row says why
                        run.unavailable(decoder=f"flashlight_stream@cpu[P={args.fl_processes}]",
                                        decoder_name="flashlight_stream", device="cpu", reason=describe_error(e),
                                        params={"mode": "serve", "streams": n})
                        largest[name]["unavailable_at"] = n
                        break
                t = clock_s()
                kept = run_serve(run, args, data, graph, n, args.duration, [name], fl_pool=pool)
                setup = max(0.0, clock_s() - t - args.duration)
                if name not in kept:  # could not run (its row says why): no limit to report
                    largest[name]["unavailable_at"] = n
                    break
                largest[name]["tried"].append(n)
                if not kept[name]:
                    largest[name]["first_not_sustained"] = n
                    break
                largest[name]["largest_sustained"] = n
        finally:
            if pool is not None:
                pool.close()
    if {"wfst", "flashlight"} <= set(largest):  # the paper's claim: how many times Flashlight-P's streams
        g, f = largest["wfst"], largest["flashlight"]
        largest["ratio"] = {
            # point estimate over the grid tried, and a bound that holds whatever lies between grid points
            "largest_over_largest": g["largest_sustained"] / f["largest_sustained"] if f["largest_sustained"] else None,
            "at_least": g["largest_sustained"] / f["first_not_sustained"] if f["first_not_sustained"] else None,
            "note": "at_least = wfst largest sustained / flashlight first N not sustained (a lower bound on the ratio "
                    "of the true limits); wfst first_not_sustained None: its limit lies above every N tried",
        }
    return largest


def flashlight_cfg(args) -> dict:
    """Flashlight's search settings. Default: the harness's (conf/decoder/flashlight.yaml: LM weight 0.5, word score
    2, tuned on the tiny workload). --fl-matched: the WFST decoder's operating point instead -- its objective is
    acoustic_scale * acoustic + LM (graph weights) with no word bonus, i.e. LM weight 1 / acoustic_scale and word
    score 0 -- so the two decoders search the same objective (the CPU check of the WER gap: README, streaming)."""
    lm_weight, word_score = (1.0 / SETTINGS["acoustic_scale"], 0.0) if getattr(args, "fl_matched", False) else \
        (args.fl_lm_weight, args.fl_word_score)
    return {"beam_size": args.fl_beam_size, "beam_threshold": SEARCH_BEAM, "lm_weight": float(lm_weight),
            "word_score": float(word_score)}


def flashlight_context(args, data: LogProbSet):
    from eval.adapters.base import DecodingContext
    from recipes.workload import prepare_workload

    wl = prepare_workload(args.scale)
    gdir = Path(args.graph_dir)
    return DecodingContext(tokens=data.token_set(), device="cpu", graph_dir=gdir, arpa_path=wl.arpa_path,
                           lexicon_path=gdir / "lexicon.txt" if (gdir / "lexicon.txt").is_file() else None,
                           words_path=wl.words_path)


# ---------------------------------------------------------------------------------------------------------
# throughput: streaming vs offline at equal batch
# ---------------------------------------------------------------------------------------------------------
def run_throughput(run: BenchRun, args, data: LogProbSet, graph) -> None:
    from decoders.wfst import WfstDecoder
    from decoders.wfst_stream import WfstStreamingDecoder

    device = args.device
    lp_all = data.log_probs.to(device)
    for B in args.batches:
        n = min(B, len(data))
        sub = data.head(n)
        lp, ln = lp_all[:n], sub.lengths
        C = args.chunk_frames
        rtfx = {}
        for mode in ("offline", "streaming"):
            lab = f"wfst_{mode}@{device.split(':')[0]}[b={n}, chunk={C}]"
            params = {"mode": "throughput", "decode": mode, "chunk_frames": C}
            try:
                watch = Stopwatch(device)
                if mode == "offline":
                    dec = WfstDecoder(graph, wfst_config(), device)
                    dec.decode(lp, ln)  # warm-up
                    with watch:
                        res = dec.decode(lp, ln)
                    hyps = [" ".join(w) for w in res.word_strings]
                else:
                    dec = WfstStreamingDecoder(graph, wfst_config(), device, max_streams=n, max_chunk_frames=C)
                    for warm in (True, False):
                        hs = [dec.create_stream() for _ in range(n)]
                        T = int(ln.max())
                        with (watch if not warm else _Null()):
                            for a in range(0, T, C):
                                live = [b for b in range(n) if int(ln[b]) > a]
                                lens = torch.tensor([min(C, int(ln[b]) - a) for b in live])
                                x = lp[live, a : a + C] if len(live) < n else lp[:, a : a + C]
                                dec.decode_chunk([hs[b] for b in live], x.contiguous(), lens)
                            res = dec.finalize(hs)
                    hyps = [" ".join(w) for w in res.word_strings]
            except Exception as e:  # noqa: BLE001
                run.unavailable(decoder=lab, decoder_name=f"wfst_{mode}", device=device, reason=describe_error(e),
                                params=params)
                continue
            finally:
                dec = None  # noqa: F841
                release_device_memory()
            wer = word_error_stats(sub.refs, hyps)
            row = run.measured(decoder=lab, decoder_name=f"wfst_{mode}", device=device, dataset=data.dataset, wer=wer,
                               audio_seconds=sub.audio_seconds(), decoder_seconds=watch.wall_seconds,
                               decoder_cuda_seconds=watch.cuda_seconds, frames=int(ln.sum()), batch_size=n,
                               decoder_config=_cfg_dict(), params=params,
                               run_mate=f"wfst_{'streaming' if mode == 'offline' else 'offline'}@"
                                        f"{device.split(':')[0]}[b={n}, chunk={C}]")
            rtfx[mode] = row.rtfx_decoder
            print(f"{lab}: RTFx {row.rtfx_decoder}, WER {100 * wer.wer:.2f} %", flush=True)
        if len(rtfx) == 2:
            print(f"batch {n}: streaming / offline throughput = {rtfx['streaming'] / rtfx['offline']:.2f}")
        run.checkpoint()


# ---------------------------------------------------------------------------------------------------------
# weights: the WER gap between the two serving configurations, utterance by utterance
# ---------------------------------------------------------------------------------------------------------
def run_weights(run: BenchRun, args, data: LogProbSet, graph) -> None:
    """The same utterances (one stream each, whole) through our decoder offline, our decoder streamed in chunks
    (--chunk-frames) and Flashlight's incremental decoder (decode_begin / decode_step per chunk / decode_end: the
    serving path), at each "lm_weight,word_score" of --weight-grid in Flashlight's convention (acoustic +
    lm_weight x LM + word_score x words). Our decoder's objective is acoustic_scale x acoustic + LM + boosts, so
    the same objective is acoustic_scale = 1 / lm_weight and a boost of word_score / lm_weight on every word of
    the graph (per-utterance boosting doing the work of a word-insertion bonus; slow on big vocabularies)."""
    from decoders.wfst import WfstDecoder, WfstDecoderConfig
    from decoders.wfst_stream import WfstStreamingDecoder
    from eval.adapters.flashlight import FlashlightDecoder
    from flashlight.lib.text.decoder import LexiconDecoder

    device, C, n = args.device, args.chunk_frames, len(data)
    lp, ln = data.log_probs, data.lengths
    words = None
    ctx = flashlight_context(args, data)
    for pair in args.weight_grid:
        lm_weight, word_score = (float(x) for x in pair.split(","))
        if not lm_weight > 0:
            raise ValueError(f"--weight-grid: lm_weight must be > 0, got {pair!r}")
        scale, bonus = 1.0 / lm_weight, word_score / lm_weight
        cfg = WfstDecoderConfig(search_beam=SEARCH_BEAM, max_active=MAX_ACTIVE, acoustic_scale=scale)
        if bonus and words is None:
            table = graph.words or (Path(args.graph_dir) / "words.txt").read_text(encoding="utf-8").split()[::2]
            words = [w for w in table if w and not w.startswith(("<", "#"))]  # not <eps>, <unk>, #0 ...
        boosts = [{w: bonus for w in words}] * n if bonus else None
        params = {"mode": "weights", "lm_weight": lm_weight, "word_score": word_score, "chunk_frames": C}
        tag = f"lm={lm_weight:g}, ws={word_score:g}"
        hyps_by = {}
        for what in ("offline", "streamed", "flashlight"):
            lab = {"offline": f"wfst_offline@{device.split(':')[0]}[{tag}]",
                   "streamed": f"wfst_stream@{device.split(':')[0]}[{tag}, chunk={C}]",
                   "flashlight": f"flashlight_stream@cpu[{tag}, chunk={C}]"}[what]
            dev = "cpu" if what == "flashlight" else device
            watch = Stopwatch(dev)
            try:
                if what == "offline":
                    dec = WfstDecoder(graph, replace_online(cfg), device)
                    with watch:
                        res = dec.decode(lp.to(device), ln, boosts=boosts)
                    hyps = [" ".join(w) for w in res.word_strings]
                elif what == "streamed":
                    dec = WfstStreamingDecoder(graph, cfg, device, max_streams=n, max_chunk_frames=C)
                    with watch:
                        hs = [dec.create_stream(boosts=boosts[b] if boosts else None) for b in range(n)]
                        for a in range(0, int(ln.max()), C):
                            live = [b for b in range(n) if int(ln[b]) > a]
                            lens = torch.tensor([min(C, int(ln[b]) - a) for b in live])
                            dec.decode_chunk([hs[b] for b in live], lp[live, a : a + C].contiguous().to(device), lens)
                        hyps = [" ".join(w) for w in dec.finalize(hs).word_strings]
                else:
                    fcfg = {**flashlight_cfg(args), "lm_weight": lm_weight, "word_score": word_score}
                    fl = FlashlightDecoder(fcfg, ctx)
                    d = LexiconDecoder(fl.options, fl.trie, fl.kenlm, fl.sil_idx, fl.tokens.blank_id, fl.unk_idx, [],
                                       False)
                    hyps = []
                    with watch:
                        for b in range(n):
                            em = lp[b, : int(ln[b])].float().contiguous()
                            d.decode_begin()
                            for a in range(0, em.shape[0], C):
                                x = em[a : a + C].contiguous()
                                d.decode_step(x.data_ptr(), x.shape[0], x.shape[1])
                            d.decode_end()
                            best = d.get_best_hypothesis()
                            hyps.append(" ".join(fl.word_dict.get_entry(w) for w in best.words if w >= 0))
            except Exception as e:  # noqa: BLE001
                run.unavailable(decoder=lab, decoder_name=f"{what}_weights", device=dev, reason=describe_error(e),
                                params=params)
                continue
            finally:
                dec = None  # noqa: F841
                release_device_memory()
            hyps_by[what] = hyps
            wer = word_error_stats(data.refs, hyps)
            for uid, ref, hyp in zip(data.ids, data.refs, hyps):
                run.hyps.append({"decoder": lab, "dataset": data.dataset, "id": uid, "ref": ref, "hyp": hyp})
            stats = {}
            if what != "offline" and "offline" in hyps_by:  # utterances whose words differ from ours offline
                stats["differs_from_wfst_offline"] = sum(a != b for a, b in zip(hyps, hyps_by["offline"]))
            run.measured(decoder=lab, decoder_name="flashlight" if what == "flashlight" else "wfst", device=dev,
                         dataset=data.dataset, wer=wer, audio_seconds=data.audio_seconds(),
                         decoder_seconds=watch.wall_seconds, decoder_cuda_seconds=watch.cuda_seconds,
                         frames=int(ln.sum()), stats=stats, batch_size=n, params=params,
                         decoder_config={"search_beam": SEARCH_BEAM, "max_active": MAX_ACTIVE, "acoustic_scale": scale,
                                         "word_boost_all": bonus} if what != "flashlight" else
                         {**flashlight_cfg(args), "lm_weight": lm_weight, "word_score": word_score})
            print(f"{lab}: WER {100 * wer.wer:.2f} % (S/D/I {wer.substitutions}/{wer.deletions}/{wer.insertions})"
                  + (f", {stats['differs_from_wfst_offline']} of {n} utterances differ from wfst offline"
                     if "differs_from_wfst_offline" in stats else ""), flush=True)
        run.checkpoint()


def replace_online(cfg):
    """The offline decoder with k2's online semantics (what the streaming decoder equals exactly)."""
    from dataclasses import replace

    return replace(cfg, online=True)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    t_start = clock_s()  # --time-budget-s counts from here (loading the set and the graph included)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["memory", "serve", "sweep", "throughput", "weights"])
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--kind", default="bpe")
    ap.add_argument("--set", default="other")
    ap.add_argument("--max-utts", type=int, default=200)
    ap.add_argument("--lp-file", default=None, help="log-probs written by eval.bench.wfst_bench --dump-lp")
    ap.add_argument("--graph-dir", default=DEFAULT_GRAPH_DIR)
    ap.add_argument("--graph", default="TLG", choices=["TLG", "HLG"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--chunk-frames", type=int, default=10, help="frames per chunk (10 x 40 ms = the 400 ms chunk)")
    ap.add_argument("--hour-frames", type=int, default=90000, help="memory: frames of the long stream")
    ap.add_argument("--streams", type=int, nargs="+", default=[256])
    ap.add_argument("--fl-streams", type=int, nargs="+", default=None,
                    help="sweep: Flashlight's stream counts (default: --streams)")
    ap.add_argument("--time-budget-s", type=float, default=0.0,
                    help="sweep: skip runs that could not end within this many seconds of the sweep's start; 0 = none")
    ap.add_argument("--stream-frames", type=int, default=15000, help="memory: frames of each concurrent stream")
    ap.add_argument("--duration", type=float, default=60.0, help="serve/sweep: seconds of audio per stream")
    ap.add_argument("--arrivals", choices=["periodic", "poisson"], default="periodic")
    ap.add_argument("--decoders", nargs="+", default=["wfst"], choices=["wfst", "flashlight"])
    ap.add_argument("--max-batch", type=int, default=0, help="dynamic batcher: largest batch (0: all streams)")
    ap.add_argument("--max-wait-ms", type=float, default=5.0, help="dynamic batcher: longest wait for a fuller batch")
    ap.add_argument("--fl-processes", type=int, default=16)
    ap.add_argument("--fl-beam-size", type=int, default=32)
    ap.add_argument("--fl-lm-weight", type=float, default=0.5, help="Flashlight LM weight (natural log; the harness's)")
    ap.add_argument("--fl-word-score", type=float, default=2.0, help="Flashlight word score (the harness's)")
    ap.add_argument("--fl-matched", action="store_true",
                    help="Flashlight at the WFST's objective: LM weight 1/acoustic_scale, word score 0")
    ap.add_argument("--give-up-s", type=float, default=0.0,
                    help="serve/sweep: end a run once a chunk has waited this long (it cannot be keeping up; "
                         "the row says aborted_at_s); 0 = never")
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--acoustic-scale", type=float, default=SETTINGS["acoustic_scale"])
    ap.add_argument("--weight-grid", nargs="+", default=["0.3333333,0", "0.5,2"],
                    help="weights: 'lm_weight,word_score' pairs (Flashlight's convention)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output-dir", default="runs/bench")
    ap.add_argument("--experiment", default="wfst_stream")
    ap.add_argument("--run", default=None)
    args = ap.parse_args(argv)
    SETTINGS["acoustic_scale"] = float(args.acoustic_scale)
    if args.chunk_frames < 1 or min(args.streams + (args.fl_streams or [])) < 1 or args.duration <= 0:
        ap.error("--chunk-frames, --streams and --duration must be positive")
    if args.mode == "serve" and len(args.streams) != 1:
        ap.error("serve takes one --streams value (sweep takes several)")

    data = LogProbSet.load(args.lp_file) if args.lp_file else workload_set(args.scale, args.kind, args.set,
                                                                           args.max_utts)
    graph = load_graph(Path(args.graph_dir), args.graph)
    run = BenchRun(args.experiment, args.run or f"{args.mode}_{args.device.split(':')[0]}", config={
        "benchmark": "eval.bench.wfst_stream_bench", **{k: v for k, v in vars(args).items()},
        "search_beam": SEARCH_BEAM, "max_active": MAX_ACTIVE, "frame_s": FRAME_S,
    }, output_dir=args.output_dir)
    if args.mode == "memory":
        args.streams = args.streams[0]
        run_memory(run, args, data, graph)
    elif args.mode == "serve":
        run_serve(run, args, data, graph, args.streams[0], args.duration, args.decoders)
    elif args.mode == "sweep":
        largest = run_sweep(run, args, data, graph, t_start)
        run.extra["largest_sustained.json"] = largest
        print(f"largest N sustained in real time (first_not_sustained None: every N tried kept up, the limit is "
              f"higher): {largest}")
    elif args.mode == "weights":
        run_weights(run, args, data, graph)
    else:
        run_throughput(run, args, data, graph)
    path = run.close()
    if getattr(run, "memory_series", None):
        print(f"plot: {plot_memory_over_time(run.memory_series, path / 'memory_over_time.png')}")
    print_rows(run.rows)
    if args.mode in ("serve", "sweep"):
        table = serving_table(run.rows)
        (path / "serving.md").write_text(table + "\n", encoding="utf-8")
        print()
        print(table)
    if not any(r.ok for r in run.rows):
        print(f"no configuration measured (see the unavailable rows in {path})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
