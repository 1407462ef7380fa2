"""Per-kernel GPU profile tables (eval/bench/wfst_profile.py writes `kernel_profile.json` into its run directory).

Pure functions over that JSON (no torch): a profile is a list of entries
    {"decoder": label, "graph": str, "batch": int, "utterances": int, "lane_steps": int, "wall_us": float,
     "gpu_busy_us": float, "kernels": {name: {"launches": int, "us": float}}}
where `wall_us` is the pass's eval.metrics.Stopwatch wall time and the kernel times are CUPTI's (torch.profiler).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

PROFILE_FILE = "kernel_profile.json"


def load_profile(path: str | Path) -> list[dict]:
    """Entries of a kernel_profile.json (or of the run directory holding one); one-line errors."""
    path = Path(path)
    if path.is_dir():
        path = path / PROFILE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a kernel profile ({e})") from None
    if not isinstance(data, list) or not all(isinstance(e, dict) and isinstance(e.get("kernels"), dict) for e in data):
        raise ValueError(f"{path}: expected a list of profile entries with a 'kernels' mapping")
    return data


def kernel_profile_table(entry: dict[str, Any]) -> str:
    """Markdown for one (decoder, graph, batch) pass: per kernel launches, total ms, µs per launch, share of the
    GPU busy time and µs per decoded lane-step, heaviest first; a caption line with wall vs kernel time."""
    busy = float(entry.get("gpu_busy_us") or 0.0) or 1.0
    steps = max(int(entry.get("lane_steps") or 0), 1)
    caption = (f"{entry.get('decoder', '?')} on {entry.get('graph', '?')}, batch {entry.get('batch')}: "
               f"{entry.get('utterances')} utts, {steps} lane-steps, wall {entry['wall_us'] / 1e3:.1f} ms, kernels "
               f"{entry['gpu_busy_us'] / 1e3:.1f} ms ({entry['wall_us'] / steps:.2f} µs wall per lane-step)")
    lines = [caption, "", "| kernel | launches | total ms | µs/launch | share | µs/lane-step |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, k in sorted(entry["kernels"].items(), key=lambda kv: -kv[1]["us"]):
        lines.append(f"| {name} | {k['launches']} | {k['us'] / 1e3:.2f} | {k['us'] / max(k['launches'], 1):.1f} | "
                     f"{k['us'] / busy:.1%} | {k['us'] / steps:.3f} |")
    return "\n".join(lines)


def kernel_profile_report(entries: Sequence[dict]) -> str:
    return "\n\n".join(kernel_profile_table(e) for e in entries)


def stats_table(rows: Sequence[Any], keys: Sequence[str]) -> str:
    """Markdown: one line per successful row (its label and params), one column per `decoder_stats` key (a
    nested dict value such as {"p50": .., "max": ..} prints as "p50 / ... / max")."""
    from reports.tables import ok_rows

    lines = ["| decoder | params | utts | " + " | ".join(keys) + " |", "|---|---|---:|" + "---:|" * len(keys)]
    for r in ok_rows(rows):
        cells = []
        for k in keys:
            v = r.decoder_stats.get(k)
            if isinstance(v, dict):
                cells.append(" / ".join(_num(x) for x in v.values()))
            else:
                cells.append("–" if v is None else _num(v))
        params = ", ".join(f"{k}={v}" for k, v in r.params.items())
        lines.append(f"| {r.decoder} | {params} | {r.utterances} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}"
    return str(v)


# ---------------------------------------------------------------------------------------------------
# The stall ledger: Nsight Compute's source page (`ncu --import R --page source --csv --print-source cuda|sass`, PC
# sampling from the SourceCounters section) summed per source line or SASS instruction, heaviest first.
STALL_ALL = "Warp Stall Sampling (All Samples)"
STALL_NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"


def sample_count(cell: str) -> float:
    """A count cell of an ncu CSV ("1,234", "", "-") as a number (0 when empty)."""
    try:
        return float(cell.replace(",", "").strip() or 0)
    except ValueError:
        return 0.0


def source_page(csv_text: str) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows (dicts by column, in the page's order) of an ncu source-page CSV with PC sampling (`ncu
    --import R --page source --csv --print-source sass|cuda`). Every header line (a row holding the all-samples
    column) starts a section; other lines (kernel names, files) are skipped; a one-line ValueError when no such header
    is found."""
    import csv
    import io

    header: list[str] | None = None
    rows: list[dict[str, str]] = []
    for rec in csv.reader(io.StringIO(csv_text)):
        if STALL_ALL in rec:
            header = rec
        elif header is not None and len(rec) == len(header):
            rows.append(dict(zip(header, rec)))
    if header is None:
        raise ValueError(f"not an ncu source page with PC sampling: no '{STALL_ALL}' column")
    return header, rows


def stall_reasons(cell: dict[str, str]) -> dict[str, float]:
    """A row's samples per stall reason (the SASS view's `stall_*` columns, the "(Not Issued)" ones left out)."""
    return {k[6:]: sample_count(v) for k, v in cell.items() if k.startswith("stall_") and "(" not in k}


def stall_samples(csv_text: str) -> tuple[list[tuple[float, float, str, str, str]], dict[str, float]]:
    """The rows of an ncu source page (source_page) as (all samples, not-issued samples, location -- the first column:
    the line or the address --, source text, main stall reason), and the samples summed per stall reason."""
    header, cells = source_page(csv_text)
    rows: list[tuple[float, float, str, str, str]] = []
    reasons: dict[str, float] = {}
    for cell in cells:
        counts = stall_reasons(cell)
        for k, v in counts.items():
            reasons[k] = reasons.get(k, 0.0) + v
        main = max(counts, key=counts.get) if counts and max(counts.values()) > 0 else ""
        rows.append((sample_count(cell[STALL_ALL]), sample_count(cell.get(STALL_NOT_ISSUED, "0")),
                     cell[header[0]].strip(), " ".join(cell.get("Source", "").split()), main))
    return rows, reasons


def stall_ledger(csv_text: str, top: int = 40) -> str:
    """Markdown: the samples by stall reason (where exported), then the rows with the most warp stall samples, until
    `top` rows, each with its share, the cumulative share, the not-issued samples and its main reason."""
    rows, reasons = stall_samples(csv_text)
    total = sum(r[0] for r in rows) or 1.0
    rows.sort(key=lambda r: -r[0])
    lines = [f"{len(rows)} rows, {total:,.0f} warp stall samples", ""]
    if reasons:
        lines += ["| stall reason | samples | share |", "|---|---:|---:|"]
        lines += [f"| {k} | {v:,.0f} | {v / total:.1%} |" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])
                  if v > 0]
        lines.append("")
    lines += ["| row | samples | share | cumulative | not issued | main reason | source |",
              "|---|---:|---:|---:|---:|---|---|"]
    cum = 0.0
    for all_, ni, loc, text, main in rows[:top]:
        cum += all_
        src = text.replace("|", "\\|")[:120]
        lines.append(f"| {loc} | {all_:,.0f} | {all_ / total:.1%} | {cum / total:.1%} | {ni:,.0f} | {main} | `{src}` |")
    return "\n".join(lines)


def plot_stall_reasons(csv_text: str, out_path: str | Path, title: str = "Warp stall samples by reason") -> Path:
    """A horizontal bar chart of the samples' shares by stall reason (reasons under 0.5 % folded into 'other')."""
    from reports.plots import _pyplot, _save

    rows, reasons = stall_samples(csv_text)
    if not reasons:
        raise ValueError("the page has no per-reason columns (the SASS view has them: --print-source sass)")
    total = sum(reasons.values()) or 1.0
    items = sorted(((k, v / total) for k, v in reasons.items()), key=lambda kv: -kv[1])
    shown = [(k, f) for k, f in items if f >= 0.005]
    rest = sum(f for k, f in items if f < 0.005)
    if rest > 0:
        shown.append(("other", rest))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(shown) + 1.2))
    ax.barh([k for k, _ in shown][::-1], [100 * f for _, f in shown][::-1], color="#4878a8")
    for y, (_, f) in enumerate(shown[::-1]):
        ax.text(100 * f + 0.5, y, f"{100 * f:.1f} %", va="center", fontsize=8)
    ax.set_xlabel(f"share of {total:,.0f} warp stall samples, %")
    ax.set_xlim(0, max(100 * f for _, f in shown) * 1.15 + 1)
    ax.set_title(title, fontsize=10)
    return _save(fig, out_path)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m reports.profile", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stalls", help="the stall ledger of an ncu source-page CSV (--page source --csv)")
    st.add_argument("csv")
    st.add_argument("--top", type=int, default=40)
    st.add_argument("--png", help="also a bar chart of the stall reasons (the SASS view)")
    st.add_argument("--title", default="Warp stall samples by reason")
    args = ap.parse_args(argv)
    try:
        text = Path(args.csv).read_text(encoding="utf-8", errors="replace")
        print(stall_ledger(text, top=max(1, args.top)))
        if args.png:
            plot_stall_reasons(text, args.png, args.title)
    except (OSError, ValueError) as e:
        print(f"error: {args.csv}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
