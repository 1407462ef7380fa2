"""Where the CUDA WFST decoder's time goes (a profile, not a benchmark): per-kernel GPU time of one decode pass.

Decodes the first N utterances of a log-prob file (`wfst_bench --dump-lp`) through the "wfst" adapter on CUDA
in batches of each size: one warm-up pass, then one pass under torch.profiler (CUPTI kernel timestamps) inside
an eval.metrics.Stopwatch. The run directory (default runs/bench/wfst_profile/<timestamp>) holds one row per
(graph, batch) — its RTFx is that of the PROFILED pass (params "profiled": true; profiling slows it), WER from
eval.metrics — and `kernel_profile.json` (per kernel: launches, total GPU µs), rendered by
reports.profile.kernel_profile_table: launches, total ms, µs per launch, share of the GPU busy time, µs per
decoded lane-step (sum of lengths + 1), with the pass's wall time beside the summed kernel time (the gap is
launch overhead and host work).

    python -m eval.bench.wfst_profile --lp-file data/lp/small_other_char_200.pt \
        --graph-dir compact=data/graphs/small/char_blanklast/compact --batch 1 32 200 --utts 200 --b1-utts 10
    python -m eval.bench.wfst_profile --scale tiny --kind bpe --output lattice \
        --graph-dir compact=data/graphs/tiny/bpe_blanklast/compact --batch 1 200     # lattice mode (issue 14)
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import torch

from decoders.lattice import lattice_knobs
from eval.adapters.base import pop_stats
from eval.bench.common import BenchRun, LogProbSet, Pass, graph_dirs_arg, release_device_memory
from eval.metrics import MemoryProbe, Stopwatch


def kernel_name(name: str) -> str:
    """'void wfst::(anonymous namespace)::ExpandKernel<float>(...)' -> 'ExpandKernel<float>'."""
    name = name.replace("(anonymous namespace)::", "").replace("void ", "")
    name = re.sub(r"\(.*\)$", "", name)  # the argument list
    return name.split("::")[-1] or name


def kernel_totals(events) -> dict:
    """{kernel: {"launches", "us"}} over the CUDA events of a torch.profiler trace."""
    kernels: dict = {}
    for ev in events:
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        k = kernels.setdefault(kernel_name(ev.name), {"launches": 0, "us": 0.0})
        k["launches"] += 1
        k["us"] += ev.time_range.elapsed_us()
    return kernels


def profile_pass(decoder, lp: torch.Tensor, lengths: torch.Tensor, batch: int) -> tuple[Pass, dict]:
    from torch.profiler import ProfilerActivity, profile

    def run() -> list[str]:
        out = []
        for i in range(0, lp.shape[0], batch):
            out += [" ".join(h.words) for h in decoder.decode(lp[i : i + batch], lengths[i : i + batch])]
        return out

    run()  # warm-up
    pop_stats(decoder)
    watch, probe = Stopwatch("cuda"), MemoryProbe("cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        with probe, watch:
            hyps = run()
    kernels = kernel_totals(prof.events())
    return Pass(hyps=hyps, watch=watch, memory=probe.stats, stats=pop_stats(decoder)), kernels


def main(argv=None) -> int:
    from eval.adapters.base import DecodingContext, build_decoder
    from eval.bench.wfst_bench import ACOUSTIC_SCALE

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lp-file", type=Path, default=None, help="log-probs from wfst_bench --dump-lp (else the workload's)")
    ap.add_argument("--scale", default="tiny", help="without --lp-file: the workload's simulator log-probs")
    ap.add_argument("--kind", default="bpe")
    ap.add_argument("--set", default="other")
    ap.add_argument("--output", default="best", choices=["best", "lattice", "mbr"],
                    help="what is decoded: the 1-best search, decode_lattice + its best path, or + MBR")
    ap.add_argument("--graph-dir", action="append", required=True, help="NAME=DIR with TLG.bin (repeatable)")
    ap.add_argument("--graph", default="TLG", choices=["TLG", "HLG"])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32, 200])
    ap.add_argument("--utts", type=int, default=200)
    ap.add_argument("--b1-utts", type=int, default=10, help="utterances for batch sizes below 8")
    ap.add_argument("--search-beam", type=float, default=17.0)
    ap.add_argument("--max-active", type=int, default=10000)
    ap.add_argument("--acoustic-scale", type=float, default=ACOUSTIC_SCALE,
                    help="log-prob scale (eval.bench.wfst_bench's and wfst_mbr_bench's 1.0, so a profile explains "
                         "their rows; the harness YAML's 3.0 gives ~5x smaller lattices on the simulator)")
    ap.add_argument("--output-dir", default="runs/bench")
    ap.add_argument("--experiment", default="wfst_profile")
    ap.add_argument("--run", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("wfst_profile: profiling the CUDA kernels needs a CUDA device; nothing run", file=sys.stderr)
        return 2
    if args.lp_file is not None:
        data = LogProbSet.load(args.lp_file)
    else:
        from eval.bench.common import workload_set

        data = workload_set(args.scale, args.kind, args.set, args.utts)
    cfg = {"graph": args.graph, "search_beam": args.search_beam, "output_beam": 8.0, "max_active": args.max_active,
           "acoustic_scale": args.acoustic_scale, "output": "mbr" if args.output == "mbr" else "best"}
    run = BenchRun(args.experiment, args.run, config={"benchmark": "eval.bench.wfst_profile", "lp_file": str(args.lp_file),
                                                      "graph_dirs": args.graph_dir, "batches": args.batch,
                                                      "decoder": cfg}, output_dir=args.output_dir)
    profiles: list[dict] = []
    run.extra["kernel_profile.json"] = profiles
    from reports.profile import kernel_profile_table

    # the knobs in effect go in the rows' config: the lattice kernels' arc walk and state map (decoders/lattice.py
    # LATTICE_WALK_ENV, LATTICE_MAP_ENV), the 1-best walk grid's blocks per SM (decoders/csrc/wfst_launch.cu)
    # (unset: "adaptive" and "default", the size rule of decoders/csrc/wfst_lattice_cuda.cpp lattice_map_slots; the
    # 1-best's persistent step loop "1" unless BEAMDEC_WFST_PERSISTENT=0)
    walk = lattice_knobs() if args.output != "best" else \
        {"persistent": "0" if os.environ.get("BEAMDEC_WFST_PERSISTENT") == "0" else "1",
         **({"blocks_per_sm": os.environ["BEAMDEC_WFST_BLOCKS_PER_SM"]}
            if os.environ.get("BEAMDEC_WFST_BLOCKS_PER_SM") else {})}
    for name, d in graph_dirs_arg(ap, args.graph_dir):
        dec = build_decoder("wfst", cfg, DecodingContext(tokens=data.token_set(), device="cuda", graph_dir=d))
        if args.output == "lattice":
            from eval.bench.wfst_mbr_bench import WfstLatticeBestAdapter

            dec = WfstLatticeBestAdapter(dec)
        for b in args.batch:
            sub = data.head(min(args.utts if b >= 8 else args.b1_utts, len(data)))
            result, kernels = profile_pass(dec, sub.log_probs.cuda(), sub.lengths, b)
            graph = f"{name} {args.graph}"
            label = f"wfst@cuda[{graph}, {args.output}, b={b}]" if args.output != "best" else f"wfst@cuda[{graph}, b={b}]"
            run.scored(decoder=label, decoder_name="wfst", device="cuda", data=sub, result=result, batch_size=b,
                       decoder_config={**cfg, "output": args.output, **walk},
                       params={"graph": graph, "profiled": True, "output": args.output})
            profiles.append(dict(decoder=label, graph=graph, batch=b, utterances=len(sub),
                                 lane_steps=int((sub.lengths + 1).sum()), wall_us=result.seconds * 1e6,
                                 gpu_busy_us=sum(k["us"] for k in kernels.values()), kernels=kernels))
            print(kernel_profile_table(profiles[-1]) + "\n", flush=True)
            run.checkpoint()
        dec = None
        release_device_memory()
    run.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
