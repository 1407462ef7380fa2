"""What the WFST search needs per utterance, per (graph, search_beam, max_active), against the GPU decoder's
default capacities — from the CPU reference, no GPU needed. Also the beam sweep: WER per setting.

The CPU reference runs the same search as the CUDA decoder (k2 semantics, same dynamic beam); through the
"wfst" adapter built on the CPU, `WfstDecoder.decode_with_stats` decodes and counts, per utterance, the peak /
mean frontier (distinct states of a step after its epsilon closure: the GPU's frontier_capacity), the admitted
candidates per step (an upper bound of the GPU's candidate count) and the word links (the GPU arena's
entries), in one search. One row per setting in a run directory (default runs/bench/wfst_capacity/<timestamp>):
WER (eval.metrics), the CPU time of the search (eval.metrics.Stopwatch), and in decoder_stats the distribution
of those peaks and how many utterances the default capacities would send to the rescue path; the
per-utterance numbers go to `search_stats.json` beside the rows.

    python -m eval.bench.wfst_capacity_stats --lp-file data/lp/small_other_char_200.pt \
        --graph-dir compact=data/graphs/small/char_blanklast/compact \
        --graph-dir normal=data/graphs/small/char_blanklast/normal --search-beam 17 20 --max-active 10000 20000

(`--lp-file` comes from `python -m eval.bench.wfst_bench --scale S --kind char --set other --dump-lp F`.)
This replaces eval/bench/wfst_beam_sweep.py. A WER-only sweep needs no script at all: the harness does it,
e.g. `python -m eval.run -m decoder=wfst decoder.search_beam=13,17,20 model=cache ...` over cached log-probs.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from eval.bench.common import BenchRun, LogProbSet, Pass, graph_dirs_arg
from eval.metrics import MemoryProbe, Stopwatch


def quantiles(a) -> dict:
    a = np.asarray(a, dtype=np.float64)
    if a.size == 0:
        return {}
    return {f"p{p}": float(np.percentile(a, p)) for p in (50, 90, 99)} | {"max": float(a.max())}


def search_pass(adapter, data: LogProbSet, chunk: int) -> tuple[Pass, dict]:
    """Decode + search stats of every utterance in chunks of `chunk` (threads split a call)."""
    watch, probe = Stopwatch("cpu"), MemoryProbe("cpu")
    hyps: list[str] = []
    per: dict = {}
    with probe:
        for i in range(0, len(data), chunk):
            lp, ln = data.log_probs[i : i + chunk].contiguous(), data.lengths[i : i + chunk]
            with watch:
                result, st = adapter.decoder.decode_with_stats(lp, ln)
            hyps += [" ".join(w) for w in result.word_strings]
            for k, v in st.items():
                per.setdefault(k, []).extend(v)
    return Pass(hyps=hyps, watch=watch, memory=probe.stats), per


def summarize(per: dict, frontier_capacity: int, candidate_capacity: int, what_if: Sequence[int] = ()) -> dict:
    """Distribution of the per-utterance peaks and what the default capacities would do with them; `what_if`: other
    frontier capacities F, each with how many utterances it would rescue (peak frontier > F or peak candidates >
    candidate_factor x F, the factor of the capacities given: `rescued_at_frontier` {F: count})."""
    factor = candidate_capacity // max(frontier_capacity, 1)
    pf, pc = np.asarray(per.get("peak_frontier", [])), np.asarray(per.get("peak_candidates", []))
    links, steps = np.asarray(per.get("word_links", [0])), np.maximum(np.asarray(per.get("steps", [1])), 1)
    return dict(
        peak_frontier=quantiles(pf), mean_frontier=float(np.mean(per.get("mean_frontier", [0.0]))),
        peak_candidates=quantiles(pc), word_links_per_step=float(links.sum() / steps.sum()),
        word_links_per_step_max_utt=float((links / steps).max()),
        frontier_capacity=int(frontier_capacity), over_frontier=int((pf > frontier_capacity).sum()),
        candidate_capacity=int(candidate_capacity), over_candidates=int((pc > candidate_capacity).sum()),
    ) | ({"rescued_at_frontier": {str(int(f)): int(((pf > f) | (pc > factor * f)).sum()) for f in what_if}}
         if what_if else {})


def main(argv=None) -> int:
    from decoders.wfst import gpu_capacities
    from eval.adapters.base import DecodingContext, build_decoder
    from reports.profile import stats_table

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lp-file", required=True, help="log-probs written by wfst_bench --dump-lp")
    ap.add_argument("--graph-dir", action="append", required=True, help="NAME=DIR holding TLG.bin (and/or HLG.bin)")
    ap.add_argument("--graphs", nargs="+", default=["TLG", "HLG"], choices=["TLG", "HLG"])
    ap.add_argument("--max-utts", type=int, default=200)
    ap.add_argument("--search-beam", type=float, nargs="+", default=[17.0])
    ap.add_argument("--max-active", type=int, nargs="+", default=[10000])
    ap.add_argument("--acoustic-scale", type=float, default=None,
                    help="log-prob scale (default: the harness YAML's, 3; the GPU benchmarks wfst_bench / "
                         "wfst_mbr_bench decode at 1.0, where the search is wider)")
    ap.add_argument("--what-if-frontier", type=int, nargs="*", default=[],
                    help="frontier capacities to count rescues at (peak frontier > F or peak candidates > candidate_factor F)")
    ap.add_argument("--chunk", type=int, default=8, help="utterances per CPU call (threads split a call)")
    ap.add_argument("--output-dir", default="runs/bench")
    ap.add_argument("--experiment", default="wfst_capacity")
    ap.add_argument("--run", default=None)
    args = ap.parse_args(argv)
    if args.chunk <= 0:
        ap.error(f"--chunk must be positive, got {args.chunk}")
    if args.acoustic_scale is not None and not args.acoustic_scale > 0:
        ap.error(f"--acoustic-scale must be > 0, got {args.acoustic_scale}")
    if any(f < 1 for f in args.what_if_frontier):
        ap.error(f"--what-if-frontier values must be positive, got {args.what_if_frontier}")
    data = LogProbSet.load(args.lp_file)
    data = data.head(min(args.max_utts, len(data)))
    run = BenchRun(args.experiment, args.run, config={
        "benchmark": "eval.bench.wfst_capacity_stats", "lp_file": args.lp_file, "graph_dirs": args.graph_dir,
        "graphs": args.graphs, "search_beams": args.search_beam, "max_active": args.max_active,
        "utterances": len(data), "chunk": args.chunk, "acoustic_scale": args.acoustic_scale,
        "what_if_frontier": args.what_if_frontier}, output_dir=args.output_dir)
    per_utt: dict = {}
    run.extra["search_stats.json"] = per_utt
    for name, path in graph_dirs_arg(ap, args.graph_dir):
        for kind in args.graphs:
            if not (Path(path) / f"{kind}.bin").is_file():
                continue
            for beam, max_active in itertools.product(args.search_beam, args.max_active):
                cfg = {"graph": kind, "search_beam": beam, "output_beam": 8.0, "max_active": max_active}
                if args.acoustic_scale is not None:
                    cfg["acoustic_scale"] = args.acoustic_scale
                adapter = build_decoder("wfst", cfg, DecodingContext(tokens=data.token_set(), device="cpu",
                                                                     graph_dir=Path(path)))
                result, per = search_pass(adapter, data, args.chunk)
                caps = gpu_capacities(adapter.decoder.config, 1, int(data.lengths.max()))
                graph = f"{name} {kind}"
                label = f"wfst@cpu[{graph}, beam={beam:g}, max_active={max_active}]"
                result.stats = summarize(per, caps["frontier_capacity"], caps["candidate_capacity"],
                                         args.what_if_frontier)
                row = run.scored(decoder=label, decoder_name="wfst", device="cpu", data=data, result=result,
                                 batch_size=args.chunk, decoder_config=cfg,
                                 params={"graph": graph, "search_beam": beam, "max_active": max_active})
                per_utt[label] = per
                run.checkpoint()
                what = result.stats.get("rescued_at_frontier")
                print(f"{label}: WER {100 * row.wer:.2f} %, mean frontier {result.stats['mean_frontier']:.0f}, "
                      f"over frontier capacity {result.stats['over_frontier']}"
                      + (f", rescued at frontier {what}" if what else ""), flush=True)
    run.close()
    print(stats_table(run.rows, ["peak_frontier", "mean_frontier", "peak_candidates", "word_links_per_step",
                                 "frontier_capacity", "over_frontier", "candidate_capacity", "over_candidates"]))
    from reports.tables import results_table

    print()
    print(results_table(run.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
