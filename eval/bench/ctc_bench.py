"""Benchmark of the CUDA CTC prefix beam search (a script, not a test).

Offline shapes (B, T, V, beam) and streaming configs (V, beam, streams) of issue 4, random log-probs,
blank skipping off. Timing: CUDA events around the op call (GPU tensors out, nothing copied back),
warm-up calls first, median over repeats, explicit synchronisation. torchaudio's cuda_ctc_decoder runs
each configuration in its own subprocess (it crashed with illegal memory accesses before, which kills the
CUDA context); a crash is reported as a result.

    python -m eval.bench.ctc_bench --out runs/bench/ctc_bench.json [--repeats 20] [--no-torchaudio]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

OFFLINE_SHAPES = [  # (B, T, V, beam)
    (1, 200, 100, 10), (16, 200, 100, 10), (1, 200, 1000, 10), (16, 200, 1000, 10), (1, 200, 5000, 10),
    (4, 200, 5000, 10), (16, 200, 5000, 10), (64, 200, 5000, 10), (16, 50, 1000, 10), (16, 500, 1000, 10),
    (16, 200, 5000, 4), (16, 200, 5000, 20),
]
# ms per batch measured on the same H200 for the CUDA decoder our design documents describe (issue 4)
REFERENCE_OFFLINE_MS = [1.55, 2.87, 1.64, 2.98, 1.46, 1.67, 2.34, 7.47, 0.67, 13.25, 1.83, 6.65]
STREAMING = [(5000, 10, 1), (5000, 10, 8), (1000, 10, 8), (5000, 10, 128)]  # (V, beam, streams)
REFERENCE_STREAMING_US = [8.3, 7.9, 7.7, None]
CHUNK_FRAMES = 16
STREAM_CHUNKS = 16  # 256 frames per stream


def _log_probs(B: int, T: int, V: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(B, T, V, device="cuda", generator=g) * 2.0).log_softmax(-1)  # (B, T, V)


def _time_ms(fn, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bench_offline(warmup: int, repeats: int, variant: str = "") -> list[dict]:
    """variant: "" (defaults), "paged" (paged token storage), "block" / "warp" (kernel forced; the caller sets
    BEAMDEC_CTC_KERNEL)."""
    from decoders.ctc import load_ops, CtcBeamSearchConfig, ctc_beam_search

    ops = load_ops()
    rows = []
    for (B, T, V, beam), ref in zip(OFFLINE_SHAPES, REFERENCE_OFFLINE_MS):
        lp = _log_probs(B, T, V)
        lengths = torch.full((B,), T, dtype=torch.int32, device="cuda")
        cfg = CtcBeamSearchConfig(beam_size=beam, blank_skip_threshold=1.0, paged=variant.startswith("paged"))
        store = cfg.storage_args(T)
        fn = lambda: ops.ctc_decode_offline(lp, lengths, beam, 0, 1.0, 1, T, *store)  # noqa: E731
        ms = _time_ms(fn, warmup, repeats)
        e2e = _time_ms(lambda: ctc_beam_search(lp, lengths, cfg), 1, max(3, repeats // 4))
        rows.append(dict(kind="offline" + (f"_{variant}" if variant else ""), B=B, T=T, V=V, beam=beam,
                         ms_per_batch=ms, us_per_frame=1e3 * ms / T,
                         ms_with_lists=e2e, reference_ms=ref, speedup_vs_reference=ref / ms))
        print(f"offline{variant and '_' + variant} B={B:3d} T={T:4d} V={V:5d} beam={beam:3d}: {ms:8.3f} ms  (ref {ref:6.2f} ms, "
              f"x{ref / ms:5.2f}; with python lists {e2e:.3f} ms)", flush=True)
    return rows


def bench_streaming(warmup: int, repeats: int, variant: str = "") -> list[dict]:
    from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder

    rows = []
    for (V, beam, streams), ref in zip(STREAMING, REFERENCE_STREAMING_US):
        dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=beam, blank_skip_threshold=1.0,
                                                      paged=variant.startswith("paged")))
        lp = _log_probs(streams, CHUNK_FRAMES * STREAM_CHUNKS, V, seed=1)
        chunks = [lp[:, c * CHUNK_FRAMES:(c + 1) * CHUNK_FRAMES] for c in range(STREAM_CHUNKS)]

        def run_utterance():
            if streams == 1:
                st = dec.create_state(1, V, device="cuda")
                for ch in chunks:
                    dec.decode_chunk(ch, state=st)
            else:
                sts = [dec.create_state(1, V, device="cuda") for _ in range(streams)]
                for ch in chunks:
                    dec.decode_chunk_batch(ch, sts)

        # time only the chunk calls: states are created outside the timed region
        def timed() -> float:
            if streams == 1:
                sts = dec.create_state(1, V, device="cuda")
                call = lambda ch: dec.decode_chunk(ch, state=sts)  # noqa: E731
            else:
                sts = [dec.create_state(1, V, device="cuda") for _ in range(streams)]
                call = lambda ch: dec.decode_chunk_batch(ch, sts)  # noqa: E731
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for ch in chunks:
                call(ch)
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end)

        for _ in range(warmup):
            run_utterance()
        ms = statistics.median(timed() for _ in range(repeats))
        frames = CHUNK_FRAMES * STREAM_CHUNKS
        us_frame = 1e3 * ms / frames  # per frame of audio time, all streams advanced
        rows.append(dict(kind="streaming" + (f"_{variant}" if variant else ""), V=V, beam=beam, streams=streams,
                         chunk_frames=CHUNK_FRAMES,
                         ms_per_chunk=ms / STREAM_CHUNKS, us_per_frame=us_frame,
                         us_per_stream_frame=us_frame / streams, state_bytes_per_stream=dec.state_bytes_per_stream,
                         max_seq_len=dec.max_seq_len, reference_us_per_frame=ref))
        print(f"streaming{variant and '_' + variant} V={V:5d} beam={beam:3d} streams={streams:4d}: {us_frame:7.2f} us/frame "
              f"({us_frame / streams:6.3f} us/stream-frame, {ms / STREAM_CHUNKS:.3f} ms/chunk), "
              f"state {dec.state_bytes_per_stream} B/stream (max_seq_len {dec.max_seq_len}); ref {ref}", flush=True)
    return rows


def torchaudio_one(B: int, T: int, V: int, beam: int, warmup: int, repeats: int) -> dict:
    """Runs inside the subprocess: time torchaudio's decoder on one shape (blank at 0, skipping off)."""
    from eval.adapters.torchaudio_ctc import build_torchaudio_decoder

    dec = build_torchaudio_decoder(V, beam, blank_skip_threshold=1.0)
    lp = _log_probs(B, T, V)
    lengths = torch.full((B,), T, dtype=torch.int32, device="cuda")
    ms = _time_ms(lambda: dec(lp, lengths), warmup, repeats)
    return dict(ms_per_batch=ms)


def bench_torchaudio(warmup: int, repeats: int, timeout_s: int) -> list[dict]:
    rows = []
    for B, T, V, beam in OFFLINE_SHAPES:
        cmd = [sys.executable, "-m", "eval.bench.ctc_bench", "--torchaudio-one", f"{B},{T},{V},{beam}",
               "--warmup", str(warmup), "--repeats", str(repeats)]
        t0 = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired:
            rc, out, err = "timeout", "", ""
        row = dict(kind="torchaudio", B=B, T=T, V=V, beam=beam, wall_s=time.time() - t0)
        lines = [ln for ln in out.splitlines() if ln.startswith("TORCHAUDIO_RESULT ")]
        if rc == 0 and lines:
            row.update(json.loads(lines[-1].split(" ", 1)[1]), status="ok")
        else:
            tail = (err or out).strip().splitlines()[-3:]
            row.update(status=f"crashed (rc={rc})", error=" | ".join(tail)[-400:])
        print(f"torchaudio B={B:3d} T={T:4d} V={V:5d} beam={beam:3d}: "
              f"{row.get('ms_per_batch', float('nan')):8.3f} ms  {row['status']} {row.get('error', '')}", flush=True)
        rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    from tabulate import tabulate

    ta = {(r["B"], r["T"], r["V"], r["beam"]): r for r in rows if r["kind"] == "torchaudio"}
    for kind in dict.fromkeys(r["kind"] for r in rows if r["kind"].startswith("offline")):
        table = []
        for r in rows:
            if r["kind"] != kind:
                continue
            t = ta.get((r["B"], r["T"], r["V"], r["beam"]))
            t_cell = "-" if t is None else (f"{t['ms_per_batch']:.3f}" if t["status"] == "ok" else t["status"])
            table.append([r["B"], r["T"], r["V"], r["beam"], f"{r['ms_per_batch']:.3f}", f"{r['us_per_frame']:.2f}",
                          r["reference_ms"], f"{r['speedup_vs_reference']:.2f}x", t_cell])
        print(kind)
        print(tabulate(table, headers=["B", "T", "V", "beam", "ours ms/batch", "us/frame", "reference ms",
                                       "speedup", "torchaudio ms"], tablefmt="github"))
    for kind in dict.fromkeys(r["kind"] for r in rows if r["kind"].startswith("streaming")):
        st = [[r["V"], r["beam"], r["streams"], f"{r['us_per_frame']:.2f}", f"{r['us_per_stream_frame']:.3f}",
               f"{r['ms_per_chunk']:.3f}", r["state_bytes_per_stream"], r["reference_us_per_frame"]]
              for r in rows if r["kind"] == kind]
        print(kind)
        print(tabulate(st, headers=["V", "beam", "streams", "us/frame", "us/stream-frame", "ms/chunk(16)",
                                    "state B/stream", "reference us/frame"], tablefmt="github"))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/bench/ctc_bench.json"), help="JSON results path")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--no-torchaudio", action="store_true", help="skip the torchaudio comparison")
    p.add_argument("--variants", default="paged,block,warp,paged_smem",
                   help="also time these variants: paged (paged token storage), block (the block kernel at every "
                        "beam), warp (the one-warp kernel at every beam <= 32 and row count), paged_smem (paged, "
                        "opt-in shared-memory page metadata); comma-separated, '' for none")
    p.add_argument("--torchaudio-timeout-s", type=int, default=120)
    p.add_argument("--torchaudio-one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("ctc_bench needs a CUDA device")
    if args.torchaudio_one:
        B, T, V, beam = (int(x) for x in args.torchaudio_one.split(","))
        res = torchaudio_one(B, T, V, beam, args.warmup, args.repeats)
        print("TORCHAUDIO_RESULT " + json.dumps(res), flush=True)
        return
    env = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda)
    print(env, flush=True)
    rows = bench_offline(args.warmup, args.repeats) + bench_streaming(args.warmup, args.repeats)
    for variant in [v for v in args.variants.split(",") if v]:
        if variant in ("block", "warp"):
            os.environ["BEAMDEC_CTC_KERNEL"] = variant
        if variant == "paged_smem":
            os.environ["BEAMDEC_CTC_PAGED_SMEM"] = "1"
        rows += bench_offline(args.warmup, args.repeats, variant) + bench_streaming(args.warmup, args.repeats, variant)
        os.environ.pop("BEAMDEC_CTC_KERNEL", None)
        os.environ.pop("BEAMDEC_CTC_PAGED_SMEM", None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(environment=env, rows=rows), indent=1))  # ours, before torchaudio
    print_table(rows)
    if not args.no_torchaudio:
        rows += bench_torchaudio(args.warmup, args.repeats, args.torchaudio_timeout_s)
    print_table(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(environment=env, rows=rows), indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
