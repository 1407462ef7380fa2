"""Where the CTC public calls spend their time on the GPU host: torch.profiler over a few calls of
`ctc_beam_search` (offline, through the API), the raw op (`ctc_decode_offline`) and `decode_chunk` (one stream,
16-frame chunks), printing per call: the host operators (self CPU time), the kernels (CUDA time) and how much of the
call's span the GPU sat idle.

A diagnostic, not a benchmark: it writes no result rows (the figures of record are `eval.bench.ctc_bench`'s); it
says which host operations to remove. Run on the device host (needs CUDA):

    python -m eval.bench.ctc_api_profile --out $OUT/api_profile      # ~30 s after the extension is built
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch


def _cases(ops, CtcBeamSearchConfig, ctc_beam_search, CtcStreamingDecoder):
    g = torch.Generator(device="cuda").manual_seed(0)
    cases = {}
    for B, T, V, beam in ((1, 200, 5000, 10), (16, 50, 1000, 10), (64, 200, 5000, 10)):
        lp = torch.log_softmax(torch.randn(B, T, V, device="cuda", generator=g), dim=-1)
        lens = torch.full((B,), T, dtype=torch.int32, device="cuda")
        seq = T + (T & 1)
        cfg = CtcBeamSearchConfig(beam_size=beam, blank_skip_threshold=1.0, max_seq_len=seq)
        store = cfg.storage_args(seq)
        tag = f"B={B} T={T} V={V} beam={beam}"
        cases[f"api {tag}"] = (lambda lp=lp, lens=lens, cfg=cfg: ctc_beam_search(lp, lens, cfg))
        cases[f"kernel {tag}"] = (lambda lp=lp, lens=lens, beam=beam, seq=seq, store=store:
                                  ops.ctc_decode_offline(lp, lens, beam, 0, 1.0, 1, seq, *store))
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=10, blank_skip_threshold=1.0, max_seq_len=2048))
    st = dec.create_state(1, 5000, device="cuda")
    chunk = torch.log_softmax(torch.randn(1, 16, 5000, device="cuda", generator=g), dim=-1)
    cases["decode_chunk 1 stream, 16 frames, V=5000 beam=10"] = lambda: dec.decode_chunk(chunk, state=st)
    return cases


def _timeline(prof, calls: int) -> str:
    """GPU busy vs the span from the first host op to the last kernel's end, per call (microseconds)."""
    evs = [e for e in prof.events()
           if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0]
    host = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    if not evs or not host:
        return "no CUDA events recorded"
    busy = sum(e.time_range.elapsed_us() for e in evs)
    start = min(e.time_range.start for e in host)
    end = max(max(e.time_range.end for e in evs), max(e.time_range.end for e in host))
    return (f"per call: span {(end - start) / calls:.1f} us, kernels busy {busy / calls:.1f} us, "
            f"{len(evs) / calls:.1f} kernels / copies")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for the Chrome traces (optional)")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rows", type=int, default=22, help="operators listed per case")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("ctc_api_profile: needs a CUDA device (this is a GPU-host diagnostic)", file=sys.stderr)
        return 2
    from torch.profiler import ProfilerActivity, profile

    from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder, ctc_beam_search, load_ops

    print("building / loading the extension ...", flush=True)
    ops = load_ops()
    cases = _cases(ops, CtcBeamSearchConfig, ctc_beam_search, CtcStreamingDecoder)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    print(f"BEAMDEC_* = { {k: v for k, v in os.environ.items() if k.startswith('BEAMDEC_')} }")
    for name, fn in cases.items():
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.calls):
                fn()
            torch.cuda.synchronize()
        print(f"\n=== {name}: {_timeline(prof, args.calls)}", flush=True)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows,
                                          max_name_column_width=60)
        print(table, flush=True)
        if args.out:
            prof.export_chrome_trace(str(args.out / (name.split(",")[0].replace(" ", "_").replace("=", "") + ".json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
