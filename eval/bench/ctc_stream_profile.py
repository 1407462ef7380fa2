"""Where one CTC stream's chunk call spends its time (issue 16's one-stream goal), on a GPU host.

For each chunk length: one stream (V, beam as ctc_bench's stream rows), prefilled, then `--calls` decode_chunk calls
    * wall per call: synchronised before and after the calls (what ctc_bench's per-stream rows see);
    * host per call: the same calls without a synchronisation, while the GPU keeps up (the host's launch path);
    * device per call, per kernel: torch.profiler's CUDA activity (CUPTI), the kernels' own durations;
and a least-squares line wall = fixed + per_frame x frames over the chunk lengths: `fixed` is what every call pays
whatever its length (launches, the state check and seal, the pre-pass's floor), `per_frame` the decode's own cost.
A diagnostic, not a benchmark: it writes no result rows (ctc_bench's stream rows are the measurement).

    python -m eval.bench.ctc_stream_profile [--chunk-frames 1 4 16 64] [--calls 50] [--prefill 1000]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--V", type=int, default=5000)
    p.add_argument("--beam", type=int, default=10)
    p.add_argument("--chunk-frames", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--prefill", type=int, default=1000)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("ctc_stream_profile: needs a CUDA device", file=sys.stderr)
        return 2
    from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder

    g = torch.Generator(device="cuda").manual_seed(0)
    max_len = args.prefill + (args.calls * 3 + 8) * max(args.chunk_frames) + 8
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=args.beam, blank_skip_threshold=1.0, max_seq_len=max_len))
    print(f"one stream, V={args.V} beam={args.beam}, prefill {args.prefill} frames, {args.calls} calls per "
          f"measurement, {torch.cuda.get_device_name()}")
    rows = []
    for F in args.chunk_frames:
        st = dec.create_state(1, args.V, device="cuda")
        pre = torch.log_softmax(torch.randn(1, args.prefill, args.V, device="cuda", generator=g), dim=-1)
        dec.decode_chunk(pre, state=st)
        chunk = torch.log_softmax(torch.randn(1, F, args.V, device="cuda", generator=g), dim=-1)
        for _ in range(5):
            dec.decode_chunk(chunk, state=st)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            dec.decode_chunk(chunk, state=st)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / args.calls * 1e6
        t0 = time.perf_counter()
        for _ in range(args.calls):
            dec.decode_chunk(chunk, state=st)
        host = (time.perf_counter() - t0) / args.calls * 1e6
        torch.cuda.synchronize()
        kern: dict[str, float] = defaultdict(float)
        try:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    dec.decode_chunk(chunk, state=st)
                torch.cuda.synchronize()
            for e in prof.events():
                if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
                    kern[e.name.split("(")[0].split("<")[0].replace("void ", "").strip()] += e.device_time / args.calls
        except Exception as e:  # the profiler is a diagnostic's extra: say so and keep the wall / host figures
            print(f"  (torch.profiler unavailable: {type(e).__name__}: {e})")
        dev = sum(kern.values())
        rows.append((F, wall, host, dev))
        print(f"chunk {F:4d} frames: wall {wall:8.1f} us/call ({wall / F:6.2f} us/frame), host {host:7.1f} us/call, "
              f"kernels {dev:7.1f} us/call ({100 * dev / wall if wall else 0:4.0f} % of wall)")
        for name, us in sorted(kern.items(), key=lambda kv: -kv[1]):
            print(f"    {us:8.1f} us  {name}")
    if len(rows) >= 2:
        n = len(rows)
        xs, ys = [r[0] for r in rows], [r[1] for r in rows]
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
        a = my - b * mx
        kd = [r[3] for r in rows]
        mk = sum(kd) / n
        bk = sum((x - mx) * (y - mk) for x, y in zip(xs, kd)) / sxx if sxx else 0.0
        print(f"fit wall = {a:.1f} us + {b:.2f} us x frames; kernels = {mk - bk * mx:.1f} us + {bk:.2f} us x frames")
    return 0


if __name__ == "__main__":
    sys.exit(main())
