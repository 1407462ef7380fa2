"""WFST decoder benchmark: ours vs riva-asrlib-decoder and the seed system's decoder (OASR), and k2py on the CPU,
on the same graphs and log-probs.

Every decoder runs through its harness adapter (eval.adapters: "wfst", "riva", "k2py"; OASR through
eval.bench.oasr_wfst, which writes our graph in OASR's graph image and calls OASR's C API) on the same cached
log-probs, per graph (compact / normal topology; TLG, and HLG where built: Riva only takes the TLG) and batch
size. Timing, WER and memory come from eval.metrics (Stopwatch around each decode call after one untimed
warm-up pass; word_error_stats; MemoryProbe: the CUDA allocator peak over warm-up and timed passes, so it
includes the input log-probs on the device — Riva allocates its pools outside torch's allocator, which the
probe does not see). Overflow / rescued counts come from the adapter's counters.

One run directory (default runs/bench/wfst_vs_riva/<scale>): one row per (decoder, graph, batch size), labels
like "wfst@cuda[compact TLG, b=32]"; ours and Riva on the same TLG and batch size name each other in
`run_mate` and carry the same `params` ({"graph": "compact TLG", "scale": "small"}) and `batch_size`, so
`reports.tables.side_by_side_table(rows, "wfst", "riva", by=["graph", "batch_size"])` pairs them.

The OASR column (`--decoders wfst riva oasr`; TLG and HLG) is measured in the same process, on the same inputs and
across the same boundary ("api"), right after ours and Riva in each configuration. A row names one run mate and the
reports pair rows that name each other, so OASR's rows go to a second run directory (default
runs/bench/wfst_vs_oasr/<scale>) together with a copy of ours' row of the same configuration naming OASR as its
mate (the same measurement, not a second one; hyps copied likewise): `reports.cli` on each directory renders
ours vs Riva and ours vs OASR. Without CUDA, tvm_ffi or the OASR source (.anchors/oasr, OASR_ROOT) its rows are
unavailable rows with the reason.

    python -m eval.bench.wfst_bench --scale small --set other --max-utts 200 \
        --graph-dir compact=data/graphs/small/char_blanklast/compact \
        --graph-dir normal=data/graphs/small/char_blanklast/normal
    python -m eval.bench.wfst_bench --scale small --dump-lp data/lp/small_other_char_200.pt   # log-probs only
    python -m eval.bench.wfst_bench --lp-file data/lp/small_other_char_200.pt --decoders k2py --graph-dir ...
    python -m eval.bench.wfst_bench --lp-file ... --graph-dir ... --decoders wfst riva oasr   # + the OASR column
    SCALE=small bash eval/bench/wfst_gpu_run.sh        # on the GPU host: workload, graphs, this benchmark

Without a CUDA device the GPU decoders are rows marked unavailable and ours runs its CPU reference when
`--device cpu` is given. Measured numbers: the committed run directories under reports/ (see the README).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Optional

import torch

from eval.bench.common import (
    BenchRun, LogProbSet, MeasuredDecoder, add_isolation_options, describe_error, graph_dirs_arg, isolation_default,
    print_rows, run_isolated, workload_set,
)

# The paper's settings, shared by ours and Riva so both search the same beam (Riva: default_beam/lattice_beam)
SEARCH_BEAM, OUTPUT_BEAM, MAX_ACTIVE = 17.0, 8.0, 10000
# Stated, not inherited from conf/decoder/*.yaml (which tune it for the harness's WER tables): the benchmark's
# earlier H200 measurements ran both decoders at 1.0, and a speed comparison must keep the search identical.
ACOUSTIC_SCALE = 1.0
GRAPH_FILES = {"wfst": {"TLG": "TLG.bin", "HLG": "HLG.bin"}, "riva": {"TLG": "TLG.fst"}, "k2py": {"HLG": "HLG.k2.txt"},
               "oasr": {"TLG": "TLG.bin", "HLG": "HLG.bin"}}  # OASR: exported to <graph>.oasr.img beside it
DEFAULT_DEVICE = {"wfst": None, "riva": "cuda", "k2py": "cpu", "oasr": "cuda"}  # None: --device
DECODERS = ("wfst", "riva", "oasr", "k2py")


def decoder_config(name: str, graph: str, batch: int) -> dict:
    """The plain config dict the adapter is built from (recorded in the row's decoder_config)."""
    if name == "wfst":
        return {"graph": graph, "search_beam": SEARCH_BEAM, "output_beam": OUTPUT_BEAM, "max_active": MAX_ACTIVE,
                "acoustic_scale": ACOUSTIC_SCALE}
    if name == "riva":
        return {"default_beam": SEARCH_BEAM, "lattice_beam": OUTPUT_BEAM, "max_active": MAX_ACTIVE,
                "max_batch_size": max(batch, 1), "acoustic_scale": ACOUSTIC_SCALE}
    if name == "k2py":
        return {"search_beam": SEARCH_BEAM, "output_beam": OUTPUT_BEAM, "max_active_states": MAX_ACTIVE,
                "acoustic_scale": ACOUSTIC_SCALE}
    if name == "oasr":
        # what ours searches with, read from ours' resolved config (conf/decoder/wfst.yaml) where the benchmark
        # does not state it: min_active, allow_partial and ours' epsilon-pass limit
        from eval.adapters.base import typed_config

        ours = typed_config("wfst", decoder_config("wfst", graph, batch))
        return {"graph": graph, "search_beam": SEARCH_BEAM, "output_beam": OUTPUT_BEAM, "max_active": MAX_ACTIVE,
                "acoustic_scale": ACOUSTIC_SCALE, "min_active": int(ours.min_active),
                "allow_partial": bool(ours.allow_partial), "max_eps_iterations": int(ours.eps_iterations),
                "max_lanes": max(batch, 1)}
    raise ValueError(f"--decoders: unknown decoder {name!r}; expected one of {list(DECODERS)}")


def label(name: str, device: str, graph: str, batch: int) -> str:
    return f"{name}@{device.split(':')[0]}[{graph}, b={batch}]"


def build(name: str, cfg: dict, ctx):
    """The decoder `name` on `ctx`: a harness adapter, or OASR's decoder (eval.bench.oasr_wfst)."""
    if name == "oasr":
        from eval.bench.oasr_wfst import build_oasr_decoder

        return build_oasr_decoder(cfg, ctx)
    from eval.adapters.base import build_decoder

    return build_decoder(name, cfg, ctx)


def run_one(run: BenchRun, name: str, device: str, data: LogProbSet, graph_dir: Path, graph_name: str, kind: str,
            batch: int, repeats: int, scale: str, run_mate: Optional[str]):
    """Build one decoder, measure it, add its row (or an unavailable row). Returns the row when it measured."""
    graph = f"{graph_name} {kind}"
    lab = label(name, device, graph, batch)
    params = {"graph": graph, "scale": scale}
    cfg = decoder_config(name, kind, batch)
    try:
        with MeasuredDecoder(lambda ctx: build(name, cfg, ctx), data, device, graph_dir) as m:
            cfg = getattr(m.decoder, "resolved_config", cfg)  # OASR: the epsilon passes and capacities it was built with
            result = m.decode(batch, repeats)
    except Exception as e:  # noqa: BLE001 - a decoder this machine lacks is a row, not a crash
        run.unavailable(decoder=lab, decoder_name=name, device=device, reason=describe_error(e), params=params)
        return None
    row = run.scored(decoder=lab, decoder_name=name, device=device, data=data, result=result, batch_size=batch,
                     decoder_config=cfg, run_mate=run_mate, params=params)
    print(f"{lab}: RTFx {row.rtfx_decoder}, WER {100 * row.wer:.2f} %, CUDA peak {row.cuda_peak_bytes}, "
          f"device used {row.cuda_device_used_bytes}, "
          f"rescued {row.rescued_count}, overflow {row.overflow_count}", flush=True)
    return row


def copy_row(src: BenchRun, row, dst: BenchRun, run_mate: Optional[str]) -> None:
    """Ours' row (and hypotheses) of one configuration into the OASR pairing run, naming OASR as its mate: the
    same measurement, so reports pair ours with OASR as with Riva (a row names one run mate)."""
    dst.rows.append(dataclasses.replace(row, experiment=dst.experiment, run=dst.run, run_mate=run_mate))
    dst.hyps += [h for h in src.hyps if h["decoder"] == row.decoder]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="tiny", help="workload scale (log-probs from its simulator; a params field)")
    ap.add_argument("--kind", default="char")
    ap.add_argument("--set", default="other")
    ap.add_argument("--max-utts", type=int, default=200)
    ap.add_argument("--lp-file", default=None, help="log-probs written by --dump-lp (skips the workload)")
    ap.add_argument("--dump-lp", default=None, help="write the set's log-probs + references here and exit")
    ap.add_argument("--graph-dir", action="append", default=[],
                    help="NAME=DIR holding TLG.bin / HLG.bin / TLG.fst / words.txt / HLG.k2.txt (repeatable)")
    ap.add_argument("--graphs", nargs="+", default=["TLG", "HLG"], choices=["TLG", "HLG"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32, 200])
    ap.add_argument("--b1-utts", type=int, default=30, help="utterances decoded at batch 1 (time budget)")
    ap.add_argument("--decoders", nargs="+", default=["wfst", "riva"], choices=list(DECODERS),
                    help="oasr: the seed system's decoder (eval/bench/oasr_wfst.py), rows in --oasr-experiment")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="device of ours")
    ap.add_argument("--k2py-utts", type=int, default=None, help="utterances k2py decodes (CPU; default: all)")
    ap.add_argument("--repeats", type=int, default=1, help="timed passes per configuration (mean reported)")
    add_isolation_options(ap, "configuration")
    ap.add_argument("--output-dir", default="runs/bench")
    ap.add_argument("--experiment", default="wfst_vs_riva")
    ap.add_argument("--oasr-experiment", default="wfst_vs_oasr", help="run directory of the OASR pairing")
    ap.add_argument("--run", default=None, help="run name (default: the scale)")
    args = ap.parse_args(argv)
    for b in args.batches:
        if b <= 0:
            ap.error(f"--batches must be positive, got {b}")
    isolation_default(args)

    data = LogProbSet.load(args.lp_file) if args.lp_file else workload_set(args.scale, args.kind, args.set,
                                                                           args.max_utts)
    if args.dump_lp:
        data.save(args.dump_lp)
        print(f"wrote {args.dump_lp} ({len(data)} utterances, V={data.vocab_size})")
        return 0
    graph_dirs = graph_dirs_arg(ap, args.graph_dir)
    data = data.head(min(args.max_utts, len(data)))
    run = BenchRun(args.experiment, args.run or args.scale, config={
        "benchmark": "eval.bench.wfst_bench", "scale": args.scale, "set": data.dataset, "utterances": len(data),
        "lp_file": args.lp_file, "graph_dirs": {n: str(p) for n, p in graph_dirs}, "batches": args.batches,
        "b1_utts": args.b1_utts, "decoders": args.decoders, "device": args.device, "repeats": args.repeats,
        "search_beam": SEARCH_BEAM, "output_beam": OUTPUT_BEAM, "max_active": MAX_ACTIVE, "isolate": args.isolate,
    }, output_dir=args.output_dir)

    def measure(target: BenchRun, d: str, *rest):
        if not args.isolate:
            return run_one(target, d, *rest)
        device, sub_, gdir_, graph_name_, kind_, b_ = rest[:6]
        return run_isolated(target, run_one, d, *rest, crash_row=dict(
            decoder=label(d, device, f"{graph_name_} {kind_}", b_), decoder_name=d, device=device,
            params={"graph": f"{graph_name_} {kind_}", "scale": args.scale}))

    oasr_run = None
    if "oasr" in args.decoders:
        oasr_run = BenchRun(args.oasr_experiment, run.run, config={
            **run.config, "decoders": [d for d in args.decoders if d in ("wfst", "oasr")],
            "wfst_rows": f"copies of the rows of {args.experiment}/{run.run} (the same measurements, same process)",
        }, output_dir=args.output_dir)

    for graph_name, gdir in graph_dirs:
        for kind in args.graphs:
            for b in args.batches:
                n = min(len(data), args.b1_utts) if b == 1 else len(data)
                sub = data.head(n)
                present = [d for d in args.decoders if d != "k2py"
                           and kind in GRAPH_FILES[d] and (gdir / GRAPH_FILES[d][kind]).is_file()]
                devices = {d: DEFAULT_DEVICE[d] or args.device for d in present}
                labels = {d: label(d, devices[d], f"{graph_name} {kind}", b) for d in present}
                ours_row = None
                for d in present:
                    # ours and Riva on the same graph file and batch size name each other; OASR names ours (its
                    # pairing run holds a copy of ours' row naming OASR)
                    mate = [labels[o] for o in present if o != d and "oasr" not in (d, o)]
                    if d == "oasr":
                        mate = [labels["wfst"]] if "wfst" in labels else []
                    row = measure(oasr_run if d == "oasr" else run, d, devices[d], sub, gdir, graph_name, kind, b,
                                  args.repeats, args.scale, mate[0] if mate else None)
                    if d == "wfst":
                        ours_row = row
                if oasr_run is not None and ours_row is not None:
                    copy_row(run, ours_row, oasr_run, labels.get("oasr"))
                run.checkpoint()
                if oasr_run is not None:
                    oasr_run.checkpoint()
        if "k2py" in args.decoders and (gdir / GRAPH_FILES["k2py"]["HLG"]).is_file():
            n = len(data) if args.k2py_utts is None else min(len(data), args.k2py_utts)
            measure(run, "k2py", "cpu", data.head(n), gdir, graph_name, "HLG", 1, 1, args.scale, None)
            run.checkpoint()
    path = run.close()
    print_rows(run.rows, pairs=[("wfst", "riva", ["graph", "batch_size"])])
    if oasr_run is not None:
        oasr_run.close()
        print()
        print_rows(oasr_run.rows, pairs=[("wfst", "oasr", ["graph", "batch_size"])])
    if not any(r.ok for r in run.rows + (oasr_run.rows if oasr_run else [])):
        print(f"no configuration measured (see the unavailable rows in {path})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
