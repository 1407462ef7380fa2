"""`python -m reports.cli RUN_DIR_OR_RESULTS [...] [--out DIR] [--no-plots]` (console script `decode-report`).

Prints the markdown comparison table and writes report.md + plots next to the results (or into --out).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reports.tables import load_results, markdown_report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="decode-report", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", help="results.jsonl files or run directories (searched recursively)")
    p.add_argument("--out", default=None, help="directory for report.md and plots (default: the first path)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--title", default="Decoder comparison")
    args = p.parse_args(argv)
    try:
        rows = load_results(args.paths)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report = markdown_report(rows, title=args.title)
    print(report)
    first = Path(args.paths[0])
    out = Path(args.out) if args.out else (first if first.is_dir() else first.parent)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(report, encoding="utf-8")
    if not args.no_plots:
        from reports.plots import plot_boost_sweep, plot_wer_vs_rtfx

        try:
            print(f"wrote {plot_wer_vs_rtfx(rows, out / 'wer_vs_rtfx.png')}")
        except ValueError as e:
            print(f"no WER/RTFx plot: {e}", file=sys.stderr)
        if any(r.get("boost_value") is not None for r in rows):
            print(f"wrote {plot_boost_sweep(rows, out / 'boost_sweep.png')}")
    print(f"wrote {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
