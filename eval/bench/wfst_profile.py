"""Where the CUDA WFST decoder's time goes (a profile, not a test): per-kernel GPU time of one decode pass.

Decodes the first N utterances of a log-prob file (made by `wfst_bench --dump-lp`) in batches of each size,
once to warm up, then once under torch.profiler (CUPTI kernel timestamps), and prints per kernel: launches,
total GPU µs, µs per launch, share of the GPU busy time, and µs per decoded lane-step (sum of lengths + 1), with
the pass's wall time beside the summed kernel time (the gap is launch overhead / host work). JSON out.

    python -m eval.bench.wfst_profile --lp-file data/lp/bench_other_char_200.pt \
        --graph-dir compact=data/graphs/bench/char_blanklast/compact --batch 1 32 200 --utts 200 --b1-utts 10
"""
from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import torch


def _kernel_name(name: str) -> str:
    """'void wfst::kernels::ExpandKernel<float>(...)' -> 'ExpandKernel<float>'."""
    name = re.sub(r"\(.*\)$", "", name).replace("void ", "")
    return name.split("::")[-1]


def profile_batches(decoder, lp: torch.Tensor, lengths: torch.Tensor, batch: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    def run():
        for i in range(0, lp.shape[0], batch):
            decoder.decode(lp[i : i + batch], lengths[i : i + batch])
        torch.cuda.synchronize()

    run()  # warm-up
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        run()
        wall = time.perf_counter() - t0
    kernels: dict = {}
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        k = kernels.setdefault(_kernel_name(ev.name), {"launches": 0, "us": 0.0})
        k["launches"] += 1
        k["us"] += ev.time_range.elapsed_us()
    lane_steps = int((lengths + 1).sum())
    busy = sum(k["us"] for k in kernels.values())
    return dict(batch=batch, utterances=int(lp.shape[0]), lane_steps=lane_steps, wall_us=wall * 1e6,
                gpu_busy_us=busy, kernels=kernels)


def table(res: dict) -> str:
    busy = res["gpu_busy_us"] or 1.0
    lines = [f"batch {res['batch']}: {res['utterances']} utts, {res['lane_steps']} lane-steps, wall "
             f"{res['wall_us'] / 1e3:.1f} ms, kernels {busy / 1e3:.1f} ms "
             f"({res['wall_us'] / res['lane_steps']:.2f} µs wall per lane-step)",
             f"  {'kernel':<32} {'launches':>8} {'total ms':>9} {'µs/launch':>9} {'share':>6} {'µs/lane-step':>12}"]
    for name, k in sorted(res["kernels"].items(), key=lambda kv: -kv[1]["us"]):
        lines.append(f"  {name[:32]:<32} {k['launches']:>8} {k['us'] / 1e3:>9.2f} {k['us'] / k['launches']:>9.1f} "
                     f"{k['us'] / busy:>6.1%} {k['us'] / res['lane_steps']:>12.3f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    from decoders.graph import WfstGraph
    from decoders.wfst import WfstDecoder, WfstDecoderConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lp-file", type=Path, required=True)
    ap.add_argument("--graph-dir", action="append", required=True, help="NAME=DIR with TLG.bin (repeatable)")
    ap.add_argument("--graph-file", default="TLG.bin")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32, 200])
    ap.add_argument("--utts", type=int, default=200)
    ap.add_argument("--b1-utts", type=int, default=10, help="utterances for batch sizes below 8")
    ap.add_argument("--search-beam", type=float, default=17.0)
    ap.add_argument("--max-active", type=int, default=10000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    data = torch.load(args.lp_file, weights_only=False)
    rows = []
    for spec in args.graph_dir:
        name, d = spec.split("=", 1)
        graph = WfstGraph.load(Path(d) / args.graph_file)
        dec = WfstDecoder(graph, WfstDecoderConfig(search_beam=args.search_beam, output_beam=8.0,
                                                   max_active=args.max_active), "cuda")
        for b in args.batch:
            n = min(args.utts, data["lp"].shape[0]) if b >= 8 else min(args.b1_utts, data["lp"].shape[0])
            res = profile_batches(dec, data["lp"][:n].cuda(), data["len"][:n], b)
            res["graph"] = name
            print(f"[{name}] " + table(res), flush=True)
            rows.append(res)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
