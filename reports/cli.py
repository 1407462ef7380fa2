"""`python -m reports.cli RUN_DIR_OR_RESULTS [...] [--out DIR] [--no-plots] [--format md|csv]` (console script
`decode-report`).

Prints every table of the rows (results, side by side for each run-mate pair, not run, environment) and writes
report.md and the plots next to the results (or into --out). `--format csv` prints and writes results.csv instead:
one line per successful row, every scalar field of the row plus label, wer_pct and cer_pct (pandas). Exit status 2
with one line for bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from reports.schema import one_line
from reports.sweeps import is_sweep, load_sweep, sweep_table
from reports.tables import load_results, markdown_report, run_mate_pairs


def serving_timeline(paths) -> dict:
    """The serving_timeline.json of the given run directories (searched recursively), merged; {} if none."""
    import json

    merged: dict = {}
    for p in paths:
        p = Path(p)
        for f in sorted(p.rglob("serving_timeline.json")) if p.is_dir() else []:
            try:
                merged.update(json.loads(f.read_text(encoding="utf-8")))
            except (OSError, ValueError) as e:
                raise ValueError(f"{f}: not a serving timeline ({one_line(e)})") from None
    return merged


def write_report(text: str, paths, out: Optional[str], name: str) -> Path:
    """Write `text` as `name` into `out`, or beside the first input (the run/sweep directory, or a results file's
    folder); returns the file written."""
    first = Path(paths[0])
    folder = Path(out) if out else (first if first.is_dir() else first.parent)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")
    return folder / name


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="decode-report", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", help="results.jsonl files or run directories (searched recursively)")
    p.add_argument("--out", default=None, help="directory for report.md and plots (default: the first path)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--title", default="Decoder comparison")
    p.add_argument("--format", choices=("md", "csv"), default="md",
                   help="md: markdown report + plots (default); csv: results.csv, one line per row (pandas)")
    args = p.parse_args(argv)
    try:
        rows = load_results(args.paths)
        if not rows:
            raise ValueError(f"no result rows in {', '.join(args.paths)}")
        if args.format == "csv":
            from reports.tables import results_frame

            text = results_frame(rows).to_csv(index=False)
            print(text, end="")
            print(f"wrote {write_report(text, args.paths, args.out, 'results.csv')}", file=sys.stderr)
            return 0
        report = markdown_report(rows, title=args.title)
        if is_sweep(args.paths):  # a Hydra sweep: one table with the swept values as columns
            report += "\n## Sweep\n\n" + sweep_table(load_sweep(args.paths)) + "\n"
        pairs = run_mate_pairs(rows)
    except (OSError, ValueError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    print(report)
    out = write_report(report, args.paths, args.out, "report.md").parent
    if not args.no_plots:
        from reports.plots import plot_boost_sweep, plot_side_by_side, plot_wer_vs_rtfx

        plots = [("wer_vs_rtfx.png", lambda path: plot_wer_vs_rtfx(rows, path))]
        if any(r.boost_value is not None for r in rows):
            plots.append(("boost_sweep.png", lambda path: plot_boost_sweep(rows, path)))
        from reports.streaming import is_serving, plot_serving_latency

        if is_serving(rows):
            plots.append(("serving_latency.png", lambda path: plot_serving_latency(rows, path)))
        timeline = serving_timeline(args.paths)
        if timeline:
            from reports.streaming import plot_serving_timeline

            plots.append(("serving_timeline.png", lambda path: plot_serving_timeline(timeline, path)))
        for ours, theirs in pairs:
            plots.append((f"{ours}_vs_{theirs}.png",
                          lambda path, o=ours, t=theirs: plot_side_by_side(rows, o, t, path)))
        for name, make in plots:
            try:
                print(f"wrote {make(out / name)}")
            except ValueError as e:  # e.g. a kernel benchmark has no WER to plot: say so, keep the rest
                print(f"no {name}: {one_line(e)}", file=sys.stderr)
    print(f"wrote {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
