"""Diagnostic (not a benchmark row): where the MBR op's time goes on one machine's CPU, and whether a change to it
kept its outputs bit for bit.

The op (`wfst_lattice_mbr`, Kaldi's MinimumBayesRisk per lattice, decoders/csrc/wfst_lattice_cpu.cpp) runs on the
host for both the CPU and the CUDA lattice paths, one lattice per thread, so on a many-core host a batch's MBR time
is bounded by its largest lattice. This decodes the workload's lattices with the CPU reference (cached in
--cache), then times the op on the whole batch (at the torch thread count) and on each lattice alone (one thread;
best of 3 each, after the batch runs warmed the allocator and the thread pool),
and with --save / --compare writes or checks every output tensor exactly (`--op determinize` / `det-mbr`: the
word determinization of mbr(determinize=True) alone / followed by the MBR op, instead of the MBR op):

    python -m eval.bench.mbr_op_timing --save /tmp/mbr_before.pt          # before a change
    python -m eval.bench.mbr_op_timing --compare /tmp/mbr_before.pt       # after it: "identical" or the first diff

Session 7 (this 2-core machine, tiny BPE compact TLG, 200 'other', beam 17, output beam 8, acoustic scale 1: 882k
arcs), the code before and after its two MBR commits, three alternating runs each (both builds cached, so no
rebuild between them): batch op at 2 threads 323-359 ms before, 232-307 ms after; the per-lattice sums (526-662 vs
440-608 ms) and the largest lattice alone (22,943 arcs: 58-83 vs 60-90 ms) vary too much here to separate. Outputs
identical. (The figures in those commits' messages, "0.85-0.91 -> 0.66-0.77 s" and "234-258 -> 187-218 ms", came
from a script that timed each lattice's first call, allocator and thread-pool warm-up included: not comparable.)
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from eval.bench.common import workload_set
from eval.bench.wfst_bench import MAX_ACTIVE, OUTPUT_BEAM, SEARCH_BEAM
from eval.metrics import Stopwatch


def packed_lattices(scale: str, max_utts: int, cache: Path) -> dict:
    if cache.is_file():
        return torch.load(cache, weights_only=True)  # tensors only: this tool's own cache file
    from decoders.graph import WfstGraph
    from decoders.wfst import WfstDecoder, WfstDecoderConfig

    data = workload_set(scale, "bpe", "other", max_utts)
    g = WfstGraph.load(f"data/graphs/{scale}/bpe_blanklast/compact/TLG.bin")
    cfg = WfstDecoderConfig(search_beam=SEARCH_BEAM, output_beam=OUTPUT_BEAM, max_active=MAX_ACTIVE, acoustic_scale=1.0)
    print(f"decoding {len(data)} lattices on the CPU (once; cached in {cache}) ...", flush=True)
    lats = WfstDecoder(g, cfg, "cpu").decode_lattice(data.log_probs, data.lengths)
    d = {"ss": lats.state_splits, "st": lats.states, "asp": lats.arc_splits, "ar": lats.arcs,
         "asc": lats.arc_scores, "lab": lats.mbr_arc_labels()[0]}  # the labels WfstLattices.mbr() gives the op
    torch.save(d, cache)
    return d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--max-utts", type=int, default=200)
    ap.add_argument("--cache", type=Path, default=Path("data/lp/mbr_op_lattices.pt"))
    ap.add_argument("--op", choices=["mbr", "determinize", "det-mbr"], default="mbr",
                    help="the op timed: the MBR op on the lattice (mbr() 's default), the word determinization "
                         "(wfst_lattice_word_determinize, pruned with the output beam) alone, or the determinization "
                         "and then the MBR op on its output (mbr(determinize=True))")
    ap.add_argument("--save", type=Path, help="write the op's outputs here")
    ap.add_argument("--compare", type=Path, help="check the op's outputs against a --save file, exactly")
    args = ap.parse_args(argv)
    from decoders.wfst import _ops

    args.cache.parent.mkdir(parents=True, exist_ok=True)
    d = packed_lattices(args.scale, args.max_utts, args.cache)
    ops = _ops()
    beam = float(OUTPUT_BEAM)
    op = {"mbr": ops.wfst_lattice_mbr,
          "determinize": lambda *a: ops.wfst_lattice_word_determinize(*a, beam),
          "det-mbr": lambda *a: ops.wfst_lattice_mbr(*ops.wfst_lattice_word_determinize(*a, beam))}[args.op]
    full = (d["ss"], d["st"], d["asp"], d["ar"], d["asc"], d["lab"])

    def timed(args_) -> tuple:  # (seconds, outputs) of one call, the harness's clock (eval.metrics)
        sw = Stopwatch("cpu")
        with sw:
            res = op(*args_)
        return sw.wall_seconds, res

    best = float("inf")
    for _ in range(3):
        sec, out = timed(full)
        best = min(best, sec)
    sizes = (d["asp"][1:] - d["asp"][:-1]).numpy()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    alone = []
    for i in range(len(sizes)):
        s0, s1, a0, a1 = (int(d["ss"][i]), int(d["ss"][i + 1]), int(d["asp"][i]), int(d["asp"][i + 1]))
        one = (torch.tensor([0, s1 - s0]), d["st"][s0:s1].contiguous(), torch.tensor([0, a1 - a0]),
               d["ar"][a0:a1].contiguous(), d["asc"][a0:a1].contiguous(), d["lab"][a0:a1].contiguous())
        alone.append(min(timed(one)[0] for _ in range(3)))
    torch.set_num_threads(threads)
    alone = np.asarray(alone)
    top = np.argsort(-alone)[:3]
    print(f"{args.op}: {len(sizes)} lattices, {int(sizes.sum()):,} arcs: batch op {best * 1000:.1f} ms at {threads} threads "
          f"(best of 3); one thread each (best of 3): sum {alone.sum() * 1000:.1f} ms, largest "
          + ", ".join(f"{alone[i] * 1000:.1f} ms ({int(sizes[i]):,} arcs)" for i in top))
    if args.save:
        torch.save(list(out), args.save)
        print(f"outputs written to {args.save}")
    if args.compare:
        ref = torch.load(args.compare, weights_only=True)
        names = (("state_splits", "states", "arc_splits", "arcs", "arc_scores", "labels") if args.op == "determinize"
                 else ("word_splits", "words", "times", "confidences", "arc_posteriors", "totals"))
        diff = [n for n, a, b in zip(names, ref, out) if not torch.equal(a, b)]
        print("outputs identical to", args.compare if not diff else f"outputs DIFFER from {args.compare}: {diff}")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
