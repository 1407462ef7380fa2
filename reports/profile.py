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
