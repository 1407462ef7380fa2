"""WFST lattice benchmark: our MBR vs Riva's decode_mbr and our 1-best vs Riva's 1-best (decode_nbest), same
TLG and log-probs, plus lattice-mode throughput against 1-best and lattice memory per utterance.

Rows (one run directory, default runs/bench/wfst_mbr/<scale>), all on the same log-probs and TLG at one batch size:
- wfst@<device>[<graph>, best]: decode() (Viterbi 1-best, the GPU kernels on cuda);
- wfst@<device>[<graph>, lattice]: decode_lattice() + the lattice's best path (lattice generation cost alone);
- wfst@<device>[<graph>, mbr]: decode_lattice() + Kaldi MBR (decoders/lattice.py);
- riva@cuda[<graph>, mbr]: riva-asrlib-decoder decode_mbr (its lattice, determinized, Kaldi MBR);
- riva@cuda[<graph>, best]: riva-asrlib-decoder decode_nbest, first entry (its lattice's best path).
Pairs share `params` {"graph", "output", "scale"} and name each other in `run_mate`, so
`side_by_side_table(rows, "wfst", "riva", by=["graph", "output"])` prints MBR vs MBR and 1-best vs 1-best. Lattice
memory per utterance is the `lattice_bytes` counter (decoder_stats) over the utterances (16 B per state and arc of
the pruned lattice) and, for the GPU's own footprint, the rows' CUDA peak. Timing, WER and memory come from
eval.metrics through eval.bench.common (warm-up pass, then timed passes).

On cuda our lattice comes from the GPU forward pass (decoders/include/wfst_lattice_kernels.cuh) plus the host prune,
n-best and MBR (decoders/lattice.py); `--lattice-backend cpu` (BEAMDEC_WFST_LATTICE_BACKEND=cpu) measures the CPU
reference lattice behind a CUDA 1-best instead. Rows carry `lattice_backend`, `lattice_walk` (BEAMDEC_LATTICE_WALK:
the CUDA kernels' arc walk) and `lattice_map` (BEAMDEC_LATTICE_MAP) in their decoder config.

Isolation (`--isolate`, the default with --device cuda): every row runs in a fresh spawned process, so no
decoder's process-wide state (its worker threads, device flags, allocator pools) acts on another's row. Session 4
suspected such an effect (lattice rows 2.5x slower here than in eval.bench.wfst_profile's process); the cause was the
profiler decoding at the harness YAML's acoustic scale 3 instead of this benchmark's 1.0 (H200, 2026-12-02: the same
rows in-process and isolated agree within 4 %). `--in-process` keeps the one-process behaviour.

    python -m eval.bench.wfst_mbr_bench --scale tiny --kind bpe --set other --max-utts 200 --batch 200 \
        --graph-dir compact=data/graphs/tiny/bpe_blanklast/compact
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional

import torch

from decoders.lattice import count_lattice_stats, lattice_knobs
from decoders.types import Hypothesis
from eval.bench.common import (
    BenchRun, LogProbSet, MeasuredDecoder, add_isolation_options, describe_error, graph_dirs_arg, isolation_default,
    print_rows, run_isolated, workload_set,
)
from eval.bench.wfst_bench import MAX_ACTIVE, OUTPUT_BEAM, SEARCH_BEAM


class RivaBestAdapter:
    """Riva's 1-best: decode_nbest's first entry (its lattice's best path), through the riva adapter's decoder
    (eval/adapters/riva.py: RivaAdapter.decode_best, config nbest 1, word IDs mapped through words.txt)."""

    name = "riva"

    def __init__(self, cfg, ctx):
        from eval.adapters.riva import RivaAdapter

        self.inner = RivaAdapter({**cfg, "nbest": 1}, ctx)

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor, boosts=None) -> list[Hypothesis]:
        if boosts and any(boosts):
            raise NotImplementedError("riva: word boosting is not wired")
        return self.inner.decode_best(log_probs, lengths)


def _build(name: str, output: str, cfg: dict, ctx):
    if name == "riva":
        if output == "best":
            return RivaBestAdapter(cfg, ctx)
        from eval.adapters.riva import RivaAdapter

        return RivaAdapter(cfg, ctx)
    from eval.adapters.wfst import WfstAdapter

    if output == "lattice":
        return WfstLatticeBestAdapter(WfstAdapter({**cfg, "output": "best"}, ctx))
    return WfstAdapter({**cfg, "output": output}, ctx)


class WfstLatticeBestAdapter:
    """Ours in lattice mode without post-processing: decode_lattice() and the lattice's best path (what
    generating the lattice costs on top of the search)."""

    name = "wfst"

    def __init__(self, inner):
        self.inner = inner
        self._stats: dict = {}

    def pop_stats(self) -> dict:
        out, self._stats = {"lattice_bytes": 0, "overflow_count": 0, "rescued_count": 0, **self._stats}, {}
        return out

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor, boosts=None) -> list[Hypothesis]:
        lats = self.inner.decoder.decode_lattice(log_probs.to(self.inner.device), lengths.cpu(), boosts=boosts)
        count_lattice_stats(self._stats, lats)
        return lats.best()


def run_one(run: BenchRun, name: str, output: str, device: str, data: LogProbSet, gdir: Path, graph: str,
            batch: int, repeats: int, scale: str, acoustic_scale: float, run_mate: Optional[str],
            frontier_capacity: Optional[int] = None, mbr_determinize: bool = True) -> bool:
    lab = f"{name}@{device.split(':')[0]}[{graph}, {output}]"
    params = {"graph": graph, "output": output, "scale": scale}
    # the lattice backend goes in the row's decoder config, not its params: the params pair our row with Riva's
    backend = ({"lattice_backend": "cpu" if not device.startswith("cuda") or
                os.environ.get("BEAMDEC_WFST_LATTICE_BACKEND", "").lower() == "cpu" else "cuda", **lattice_knobs()}
               if name == "wfst" and output != "best" else {})
    if name == "wfst":
        cfg = {"graph": "TLG", "search_beam": SEARCH_BEAM, "output_beam": OUTPUT_BEAM, "max_active": MAX_ACTIVE,
               "acoustic_scale": acoustic_scale}
        if frontier_capacity is not None:  # ours' per-lane search frontier (default 4 x max_active)
            cfg["frontier_capacity"] = frontier_capacity
        if output == "mbr":  # over the word-determinized lattice (the default, as Riva's) or summed over alignments
            cfg["mbr_determinize"] = bool(mbr_determinize)
    else:
        cfg = {"default_beam": SEARCH_BEAM, "lattice_beam": OUTPUT_BEAM, "max_active": MAX_ACTIVE,
               "max_batch_size": max(batch, 1), "acoustic_scale": acoustic_scale}
    try:
        with MeasuredDecoder(lambda ctx: _build(name, output, cfg, ctx), data, device, gdir) as m:
            result = m.decode(batch, repeats)
    except Exception as e:  # noqa: BLE001 - a decoder this machine lacks is a row, not a crash
        run.unavailable(decoder=lab, decoder_name=name, device=device, reason=describe_error(e), params=params)
        return False
    row = run.scored(decoder=lab, decoder_name=name, device=device, data=data, result=result, batch_size=batch,
                     decoder_config={**cfg, **backend, "output": output}, run_mate=run_mate, params=params)
    per_utt = result.stats.get("lattice_bytes")
    mem = "" if per_utt is None else f", lattice {per_utt / max(len(data), 1):.0f} B/utt"
    print(f"{lab}: RTFx {row.rtfx_decoder}, WER {100 * row.wer:.2f} %, CUDA peak {row.cuda_peak_bytes}{mem}",
          flush=True)
    return True


def run_one_isolated(run: BenchRun, *args) -> bool:
    """run_one in a fresh spawned process (see Isolation in the module docstring); its rows join `run`."""
    name, output, device, data, gdir, graph = args[:6]
    return bool(run_isolated(run, run_one, *args, crash_row=dict(
        decoder=f"{name}@{device.split(':')[0]}[{graph}, {output}]", decoder_name=name, device=device,
        params={"graph": graph, "output": output, "scale": args[8]})))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--kind", default="bpe")
    ap.add_argument("--set", default="other")
    ap.add_argument("--max-utts", type=int, default=200)
    ap.add_argument("--lp-file", default=None, help="log-probs written by eval.bench.wfst_bench --dump-lp")
    ap.add_argument("--graph-dir", action="append", default=[], help="NAME=DIR with TLG.bin, TLG.fst, words.txt")
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="device of ours")
    ap.add_argument("--decoders", nargs="+", default=["wfst", "riva"], choices=["wfst", "riva"])
    ap.add_argument("--outputs", nargs="+", default=["best", "lattice", "mbr"], choices=["best", "lattice", "mbr"])
    ap.add_argument("--acoustic-scale", type=float, default=1.0,
                    help="log-prob scale for both decoders (eval.bench.wfst_bench's 1.0; the harness YAML uses 3)")
    ap.add_argument("--lattice-backend", choices=["cuda", "cpu"], default="cuda",
                    help="where our lattice is generated when --device is cuda")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--frontier-capacity", type=int, default=None,
                    help="ours' per-lane frontier (WfstDecoderConfig.frontier_capacity; default 4 x max_active): the "
                         "A/B of a frontier that the bench's long utterances do not outgrow")
    ap.add_argument("--mbr-summed", action="store_true",
                    help="ours' MBR over the lattice itself, a word sequence's posterior summed over its alignments "
                         "(WfstLattices.mbr(determinize=False)), instead of over the word-determinized lattice (the "
                         "default: Riva's and Kaldi's recipes' semantics)")
    add_isolation_options(ap)
    ap.add_argument("--output-dir", default="runs/bench")
    ap.add_argument("--experiment", default="wfst_mbr")
    ap.add_argument("--run", default=None)
    args = ap.parse_args(argv)
    if args.lattice_backend == "cpu":
        os.environ["BEAMDEC_WFST_LATTICE_BACKEND"] = "cpu"
    if args.batch <= 0:
        ap.error(f"--batch must be positive, got {args.batch}")
    if args.frontier_capacity is not None and args.frontier_capacity < 1:
        ap.error(f"--frontier-capacity must be positive, got {args.frontier_capacity}")
    isolation_default(args)
    graph_dirs = graph_dirs_arg(ap, args.graph_dir)
    data = LogProbSet.load(args.lp_file) if args.lp_file else workload_set(args.scale, args.kind, args.set,
                                                                           args.max_utts)
    data = data.head(min(args.max_utts, len(data)))
    run = BenchRun(args.experiment, args.run or args.scale, config={
        "benchmark": "eval.bench.wfst_mbr_bench", "scale": args.scale, "set": data.dataset, "utterances": len(data),
        "lp_file": args.lp_file, "graph_dirs": {n: str(p) for n, p in graph_dirs}, "batch": args.batch,
        "device": args.device, "decoders": args.decoders, "outputs": args.outputs, "repeats": args.repeats,
        "search_beam": SEARCH_BEAM, "output_beam": OUTPUT_BEAM, "max_active": MAX_ACTIVE,
        "acoustic_scale": args.acoustic_scale, "lattice_backend": args.lattice_backend, "isolate": args.isolate,
        "frontier_capacity": args.frontier_capacity, "mbr_determinize": not args.mbr_summed,
    }, output_dir=args.output_dir)
    measure = run_one_isolated if args.isolate else run_one
    for graph_name, gdir in graph_dirs:
        graph = f"{graph_name} TLG"
        for output in args.outputs:
            present = [d for d in args.decoders if not (d == "riva" and output == "lattice")]
            devices = {d: ("cuda" if d == "riva" else args.device) for d in present}
            labels = {d: f"{d}@{devices[d].split(':')[0]}[{graph}, {output}]" for d in present}
            for d in present:
                mate = [labels[o] for o in present if o != d]
                measure(run, d, output, devices[d], data, gdir, graph, args.batch, args.repeats, args.scale,
                        args.acoustic_scale, mate[0] if mate else None, args.frontier_capacity,
                        not args.mbr_summed)
            run.checkpoint()
    path = run.close()
    print_rows(run.rows, pairs=[("wfst", "riva", ["graph", "output"])])
    if not any(r.ok for r in run.rows):
        print(f"no configuration measured (see the unavailable rows in {path})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
