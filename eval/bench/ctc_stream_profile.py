"""Where one CTC stream's chunk call spends its time (issue 16's one-stream goal), on a GPU host.

For each chunk length: one stream (V, beam, state width as ctc_bench's stream rows), prefilled, then up to `--calls`
decode_chunk calls (fewer for long chunks: every frame fed fits the state's width)
    * wall per call: synchronised before and after the calls (what ctc_bench's per-stream rows see);
    * host per call: the same calls without a synchronisation, while the GPU keeps up (the host's launch path);
    * isolated per call: the median of single calls, each synchronised before and after (a lone call's latency:
      the host's path to its first launch is not hidden behind an earlier call's kernels);
    * device per call, per kernel: torch.profiler's CUDA activity (CUPTI), the kernels' own durations;
and a least-squares line wall = fixed + per_frame x frames over the chunk lengths: `fixed` is what every call pays
whatever its length (launches, the state check and seal, the pre-pass's floor), `per_frame` the decode's own cost.
Then the same figures for offline shapes (`--offline B:T:V:beam ...`, the raw op as ctc_bench's kernel rows).
With --host-breakdown N: N more 16-frame calls under cProfile, the Python functions (the op call among them) by own
time per call, and the same under torch.profiler's CPU activity (the ops' host time): where the host's path goes.
A diagnostic, not a benchmark: it writes no result rows (ctc_bench's rows are the measurement).

    python -m eval.bench.ctc_stream_profile [--chunk-frames 1 4 16 64] [--calls 50] [--offline 16:50:1000:10]
                                            [--host-breakdown 200]
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--V", type=positive, default=5000)
    p.add_argument("--beam", type=positive, default=10)
    p.add_argument("--chunk-frames", type=positive, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--calls", type=positive, default=50)
    p.add_argument("--prefill", type=positive, default=32)
    p.add_argument("--max-seq-len", type=positive, default=2048, help="the state's width (ctc_bench's streaming rows: 2048)")
    p.add_argument("--offline", nargs="*", type=shape_arg, default=[(16, 50, 1000, 10), (16, 200, 1000, 10),
                                                                     (1, 200, 5000, 10)],
                   help="offline shapes B:T:V:beam, the raw op as ctc_bench's kernel rows call it")
    p.add_argument("--host-breakdown", type=int, default=0, metavar="N",
                   help="N 16-frame calls of one stream under cProfile and torch.profiler's CPU activity (0: none)")
    args = p.parse_args(argv)
    if args.host_breakdown < 0:
        p.error(f"--host-breakdown must be >= 0, got {args.host_breakdown}")
    if not torch.cuda.is_available():
        print("ctc_stream_profile: needs a CUDA device", file=sys.stderr)
        return 2
    from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder

    g = torch.Generator(device="cuda").manual_seed(0)
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=args.beam, blank_skip_threshold=1.0,
                                                  max_seq_len=args.max_seq_len))
    print(f"one stream, V={args.V} beam={args.beam}, max_seq_len {args.max_seq_len}, prefill {args.prefill} frames, "
          f"up to {args.calls} calls per measurement, {torch.cuda.get_device_name()}")
    rows = []
    for F in args.chunk_frames:
        st = dec.create_state(1, args.V, device="cuda")
        pre = torch.log_softmax(torch.randn(1, args.prefill, args.V, device="cuda", generator=g), dim=-1)
        dec.decode_chunk(pre, state=st)
        chunk = torch.log_softmax(torch.randn(1, F, args.V, device="cuda", generator=g), dim=-1)
        # every frame fed stays within the state's width (3 measurements + the warm-up), so no call overflows
        calls = min(args.calls, ((args.max_seq_len - args.prefill - 16) // F - 5) // 3)
        if calls < 3:
            print(f"chunk {F}: skipped (max_seq_len {args.max_seq_len} leaves fewer than 3 calls)")
            continue
        wall, host, kern, lone = measure(lambda: dec.decode_chunk(chunk, state=st), calls)
        rows.append((F, wall, sum(kern.values())))
        show(f"chunk {F:4d} frames ({calls} calls)", wall, host, kern, F, lone)
    frames = [r[0] for r in rows]
    if len(set(frames)) >= 2:  # least-squares lines over the chunk lengths
        import numpy as np

        b, a = np.polyfit(frames, [r[1] for r in rows], 1)
        bk, ak = np.polyfit(frames, [r[2] for r in rows], 1)
        print(f"fit wall = {a:.1f} us + {b:.2f} us x frames; kernels = {ak:.1f} us + {bk:.2f} us x frames")
    from decoders.ctc import load_ops
    for B, T, V, beam in args.offline:  # ctc_bench's kernel boundary: the raw op on device tensors
        lp = torch.log_softmax(torch.randn(B, T, V, device="cuda", generator=g), dim=-1)
        lens = torch.full((B,), T, dtype=torch.int32, device="cuda")
        seq = T + (T & 1)
        store = CtcBeamSearchConfig(beam_size=beam, blank_skip_threshold=1.0, max_seq_len=seq).storage_args(seq)
        wall, host, kern, lone = measure(
            lambda: load_ops().ctc_decode_offline(lp, lens, beam, 0, 1.0, 1, seq, *store), args.calls)
        show(f"offline B={B} T={T} V={V} beam={beam}", wall, host, kern, T, lone)
    if args.host_breakdown:
        st = dec.create_state(1, args.V, device="cuda")
        chunk = torch.log_softmax(torch.randn(1, 16, args.V, device="cuda", generator=g), dim=-1)
        # the state is refilled from a snapshot every call, so N calls never run past its width
        snap = st.tensor.clone()

        def call():
            st.tensor.copy_(snap)
            dec.decode_chunk(chunk, state=st)
        host_breakdown(call, args.host_breakdown)
    return 0


def host_breakdown(fn, calls: int, top: int = 25) -> None:
    """cProfile's own time per call of the Python functions under `fn` (builtins and the op call among them), then
    torch.profiler's CPU activity: each op's host time per call (self time), so the host's ~45 us splits by name."""
    import cProfile
    import io
    import pstats

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print(f"host breakdown, one stream, 16-frame chunk, {calls} calls (cProfile; its overhead inflates the figures,"
          f" compare them with each other; the copy from a snapshot is part of each call):")
    print(out.getvalue())
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as tp:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    print(tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return int(text)


def shape_arg(text: str) -> tuple[int, int, int, int]:
    """B:T:V:beam, four positive integers (argparse turns the error into one line)."""
    parts = text.split(":")
    if len(parts) == 4:
        try:
            B, T, V, beam = (positive(x) for x in parts)
            return B, T, V, beam
        except argparse.ArgumentTypeError:
            pass
    raise argparse.ArgumentTypeError(f"offline shape must be B:T:V:beam (positive integers), got {text!r}")


def measure(fn, calls: int) -> tuple[float, float, dict[str, float], float]:
    """(wall us per call, synchronised; host us per call, unsynchronised; device us per call per kernel name;
    the median us of single synchronised calls)."""
    from eval.metrics import Stopwatch, clock_s  # the harness's clocks (one measurement path)

    for _ in range(5):
        fn()
    sw = Stopwatch("cuda")
    with sw:  # synchronised on entry and exit
        for _ in range(calls):
            fn()
    wall = sw.wall_seconds / calls * 1e6
    t0 = clock_s()
    for _ in range(calls):
        fn()
    host = (clock_s() - t0) / calls * 1e6
    torch.cuda.synchronize()
    kern: dict[str, float] = defaultdict(float)
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        for e in prof.events():
            if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
                kern[e.name.split("(")[0].split("<")[0].replace("void ", "").strip()] += e.device_time / calls
    except Exception as e:  # the profiler is a diagnostic's extra: say so and keep the wall / host figures
        print(f"  (torch.profiler unavailable: {type(e).__name__}: {e})")
    lone = []
    for _ in range(calls):
        one = Stopwatch("cuda")
        with one:
            fn()
        lone.append(one.wall_seconds * 1e6)
    return wall, host, dict(kern), sorted(lone)[len(lone) // 2]


def show(label: str, wall: float, host: float, kern: dict[str, float], frames: int, lone: float) -> None:
    dev = sum(kern.values())
    print(f"{label}: wall {wall:8.1f} us/call ({wall / frames:6.2f} us/frame), host {host:7.1f} us/call, "
          f"kernels {dev:7.1f} us/call ({100 * dev / wall if wall else 0:4.0f} % of wall), "
          f"isolated {lone:7.1f} us/call")
    for name, us in sorted(kern.items(), key=lambda kv: -kv[1]):
        print(f"    {us:8.1f} us  {name}")


if __name__ == "__main__":
    sys.exit(main())
