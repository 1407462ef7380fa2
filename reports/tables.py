"""Results rows (eval/runner.py's results.jsonl) -> markdown comparison tables.

Pure functions over plain dicts/pandas: a table can be regenerated from files alone, on any machine.
Table layout: one row per decoder; per dataset, WER %, decoder-only RTFx and memory. Memory is the
CUDA allocator peak for decoders on a GPU, the host RSS rise during decoding for CPU decoders.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Optional, Sequence

import pandas as pd

MIB = 2.0**20


def load_results(paths: Iterable[str | Path]) -> list[dict]:
    """Read results rows from results.jsonl files or directories containing them (searched recursively)."""
    rows: list[dict] = []
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(p.rglob("results.jsonl"))
            if not found:
                raise FileNotFoundError(f"no results.jsonl under {p}")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"results file or run directory not found: {p}")
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{f}:{lineno}: not JSON ({e})") from None
    return rows


def ok_rows(rows: Sequence[dict]) -> list[dict]:
    return [r for r in rows if r.get("status", "ok") == "ok"]


def memory_mib(row: dict) -> Optional[float]:
    if str(row.get("device", "cpu")).startswith("cuda") and row.get("cuda_peak_bytes") is not None:
        return row["cuda_peak_bytes"] / MIB
    v = row.get("rss_increase_bytes")
    return None if v is None else v / MIB


def results_frame(rows: Sequence[dict]) -> pd.DataFrame:
    """Long table: one line per (decoder, dataset) with the numbers the reports use."""
    recs = []
    for r in ok_rows(rows):
        recs.append(
            {
                "run": r.get("run"),
                "decoder": r["decoder"],
                "device": r.get("device", "cpu"),
                "dataset": r["dataset"],
                "utterances": r.get("utterances"),
                "audio_seconds": r.get("audio_seconds"),
                "wer_pct": 100.0 * r["wer"],
                "substitutions": r.get("substitutions"),
                "deletions": r.get("deletions"),
                "insertions": r.get("insertions"),
                "rtfx_decoder": r.get("rtfx_decoder"),
                "rtfx_end_to_end": r.get("rtfx_end_to_end"),
                "memory_mib": memory_mib(r),
                "overflow_count": r.get("overflow_count", 0),
            }
        )
    return pd.DataFrame.from_records(recs)


def _fmt_rtfx(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _fmt(v, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return format(v, spec)


def results_table(rows: Sequence[dict], datasets: Optional[Sequence[str]] = None, include_all: bool = False) -> str:
    """Markdown table: rows = decoders (first-seen order), columns = WER % / RTFx / memory per dataset."""
    df = results_frame(rows)
    if df.empty:
        return "(no successful results)"
    if datasets is None:
        datasets = [d for d in dict.fromkeys(df["dataset"]) if include_all or d != "all"] or ["all"]
    multi_run = df["run"].nunique() > 1
    decoders = list(dict.fromkeys(zip(df["run"], df["decoder"]) if multi_run else df["decoder"]))
    header = ["decoder", "device"]
    for d in datasets:
        header += [f"{d} WER %", f"{d} S/D/I", f"{d} RTFx", f"{d} mem MiB"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|"]
    for key in decoders:
        sel = df[(df["run"] == key[0]) & (df["decoder"] == key[1])] if multi_run else df[df["decoder"] == key]
        label = f"{key[1]} ({key[0]})" if multi_run else key
        cells = [str(label), str(sel["device"].iloc[0])]
        for d in datasets:
            r = sel[sel["dataset"] == d]
            if r.empty:
                cells += ["–"] * 4
                continue
            r = r.iloc[0]
            sdi = f"{int(r['substitutions'])}/{int(r['deletions'])}/{int(r['insertions'])}"
            cells += [_fmt(r["wer_pct"], ".2f"), sdi, _fmt_rtfx(r["rtfx_decoder"]), _fmt(r["memory_mib"], ".1f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def unavailable_table(rows: Sequence[dict]) -> str:
    """Markdown list of decoders that could not run here, with the reason (empty string if none)."""
    bad = [r for r in rows if r.get("status") not in (None, "ok")]
    if not bad:
        return ""
    lines = ["| decoder | not run here because |", "|---|---|"]
    seen = set()
    for r in bad:
        if r["decoder"] in seen:
            continue
        seen.add(r["decoder"])
        reason = str(r.get("reason", "")).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['decoder']} | {reason} |")
    return "\n".join(lines)


def environment_summary(rows: Sequence[dict]) -> str:
    envs = [r.get("environment") or {} for r in ok_rows(rows)]
    if not envs:
        return ""
    e = envs[0]
    gpu = e.get("gpu_name") or "no GPU"
    return (
        f"torch {e.get('torch_version')} (CUDA {e.get('cuda_version')}), {gpu}, "
        f"CPU {e.get('cpu_model')} x{e.get('cpu_count')}, commit {e.get('git_commit')}"
    )


def markdown_report(rows: Sequence[dict], title: str = "Decoder comparison") -> str:
    parts = [f"# {title}", "", results_table(rows), ""]
    extra = unavailable_table(rows)
    if extra:
        parts += ["Not run:", "", extra, ""]
    env = environment_summary(rows)
    if env:
        parts += [f"Environment: {env}", ""]
    parts += [
        "WER: corpus WER after text normalisation (jiwer); S/D/I: substitutions/deletions/insertions. "
        "RTFx: audio seconds / decoder wall seconds (warm-up excluded). mem: CUDA allocator peak on GPU, "
        "host RSS rise during decoding on CPU.",
        "",
    ]
    return "\n".join(parts)
