"""Where a small batch's decode call spends its wall time outside the CUDA kernels (a probe, not a benchmark row).

Per call of the CUDA WFST decoder on the first --utts utterances at --batch, the benchmark's settings (beam 17,
max_active 10000, acoustic scale 1), each region between device synchronisations as eval.metrics.Stopwatch times
the benchmark's decode calls:
  api         WfstDecoder.decode (what the benchmark's adapter calls; its Hypothesis wrapping is not included)
  api_nocheck the same with check_finite=False (the input check's share)
  check       WfstDecoder._check alone (the input checks: shapes, lengths, NaN / +inf)
  check_masked  the NaN / +inf check in its form before session 34 (a length mask and seven tensor ops, two reads
              back) where the check now is one max over the tensor
  op          the extension op on prepared inputs (WfstDecoder._run: capacities, workspace, memsets, launches, the
              result's copy to the host)
  op_gpu      the op's CUDA event time (from its first memset to the result copy)
so api - op is the Python around the op and op - op_gpu the host's enqueue and copy latency.

    python -m eval.bench.probes.wfst_host_overhead data/graphs/bench/char_blanklast/compact/HLG.bin \\
        data/lp/bench_other_char_200.pt --utts 30 --batch 1
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph")
    ap.add_argument("lp_file")
    ap.add_argument("--utts", type=int, default=30)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cuda", help="cpu: the same regions on the CPU reference (no op_gpu)")
    args = ap.parse_args(argv)
    # the WFST part of the extension only (its first build on a device takes ~45 s instead of minutes for all of it;
    # session 34's first run of this probe, without it, spent its time limit building)
    os.environ.setdefault("BEAMDEC_COMPONENTS", "wfst")

    import torch

    from decoders.graph import WfstGraph
    from decoders.wfst import WfstDecoder, WfstDecoderConfig

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("wfst_host_overhead: no CUDA here (--device cpu times the CPU reference)")
        return 2
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    d = torch.load(args.lp_file, weights_only=False)
    lp, lengths = d["lp"][: args.utts].to(args.device), d["len"][: args.utts]
    graph = WfstGraph.load(args.graph)
    cfg = dict(search_beam=17.0, max_active=10000, acoustic_scale=1.0)
    dec = WfstDecoder(graph, WfstDecoderConfig(**cfg), args.device)
    nocheck = WfstDecoder(graph, WfstDecoderConfig(**cfg, check_finite=False), args.device)
    batches = [(lp[i : i + args.batch], lengths[i : i + args.batch]) for i in range(0, len(lengths), args.batch)]
    prepared = [dec._prepare(x, n, None) for x, n in batches]

    def timed(fn) -> list[float]:
        out = []
        for _ in range(args.repeats):
            for i in range(len(batches)):
                sync()
                t0 = time.perf_counter()
                fn(i)
                sync()
                out.append((time.perf_counter() - t0) * 1e6)
        return out

    def masked_check(x, n) -> bool:
        T = x.shape[1]
        valid = torch.arange(T, device=x.device)[None, :] < torch.as_tensor(n).to(x.device)[:, None]
        return bool(((x < math.inf).all(dim=2) | ~valid).all())

    def op_gpu(i: int) -> float:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        x, n, k, v, _ = prepared[i]
        a.record()
        dec._run(x, n, k, v, dec.config)
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b) * 1e3

    for x, n in batches:  # warm-up: extension, graph upload, arenas
        dec.decode(x, n)
        nocheck.decode(x, n)
    regions = {
        "api": timed(lambda i: dec.decode(*batches[i])),
        "api_nocheck": timed(lambda i: nocheck.decode(*batches[i])),
        "check": timed(lambda i: dec._check(*batches[i])),
        "check_masked": timed(lambda i: masked_check(*batches[i])),
        "op": timed(lambda i: dec._run(*prepared[i][:4], dec.config)),
    }
    if cuda:
        regions["op_gpu"] = [op_gpu(i) for _ in range(args.repeats) for i in range(len(batches))]
    api = statistics.mean(regions["api"])
    where = torch.cuda.get_device_name() if cuda else "the CPU"
    print(f"{len(batches)} calls of batch {args.batch} x {args.repeats} repeats on {where}")
    print("| region | mean us per call | median | share of api |")
    print("|---|---:|---:|---:|")
    for name, v in regions.items():
        print(f"| {name} | {statistics.mean(v):,.1f} | {statistics.median(v):,.1f} | {statistics.mean(v) / api:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
