"""A Hydra sweep as one table: `python -m reports.sweeps SWEEP_DIR [...] [--out DIR]`.

`python -m eval.run -m decoder.search_beam=8,17 ...` writes one run directory per job under the sweep directory
(`<hydra.sweep.dir>/<experiment>/<job overrides>/`), each recording its job's overrides in config.yaml (`sweep:
{dir, job, launcher, overrides}`). `sweep_table` puts every job's rows in one markdown table whose first columns are
the swept values (the override keys whose values differ between jobs), sorted by them; overrides every job shares
are stated once beneath. Run directories without sweep provenance (runs made one by one) are told apart by the
settings that differ between them (decoder config, batch size, hardware), as `reports.tables.row_labels` does.
Pure functions over files; no torch.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from reports.schema import ResultRow, load_rows, one_line
from reports.tables import (_cer_pct, _descriptor, _fmt_rtfx, _table, _value, _wer_pct, ok_rows,
                            unavailable_table, utterance_counts)


@dataclass
class SweepJob:
    """One run directory of a sweep: its job number and overrides (from config.yaml) and its result rows."""

    run_dir: Path
    rows: list[ResultRow]
    job: Optional[int] = None
    overrides: dict[str, str] = field(default_factory=dict)  # key -> value as typed on the command line
    launcher: Optional[str] = None


def parse_override(text: str) -> tuple[str, str]:
    """"decoder.search_beam=8" -> ("decoder.search_beam", "8"); Hydra's +/++/~ prefixes are dropped."""
    key, sep, value = str(text).partition("=")
    if not sep or not key.lstrip("+~"):
        raise ValueError(f"sweep override {text!r} is not key=value")
    return key.lstrip("+~"), value


def _read_sweep_provenance(config_path: Path) -> dict:
    import yaml

    if not config_path.is_file():
        return {}
    try:
        doc = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"{config_path}: not YAML ({one_line(e)})") from None
    sweep = doc.get("sweep") if isinstance(doc, dict) else None
    if sweep is None:
        return {}
    if not isinstance(sweep, dict) or not isinstance(sweep.get("overrides", []), list):
        raise ValueError(f"{config_path}: `sweep` must be a mapping with an `overrides` list")
    return sweep


def load_sweep(paths: Iterable[str | Path]) -> list[SweepJob]:
    """Every run directory (a folder holding results.jsonl) under `paths`, with its sweep provenance."""
    run_dirs: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_file() and p.name == "results.jsonl":
            run_dirs.append(p.parent)
        elif p.is_dir():
            found = sorted(f.parent for f in p.rglob("results.jsonl"))
            if not found:
                raise FileNotFoundError(f"no results.jsonl under {p}")
            run_dirs += found
        else:
            raise FileNotFoundError(f"sweep directory or results.jsonl not found: {p}")
    jobs = []
    for d in dict.fromkeys(run_dirs):
        sweep = _read_sweep_provenance(d / "config.yaml")
        overrides = dict(parse_override(o) for o in sweep.get("overrides", []))
        job = sweep.get("job")
        jobs.append(SweepJob(run_dir=d, rows=load_rows(d / "results.jsonl"), job=job if isinstance(job, int) else None,
                             overrides=overrides, launcher=sweep.get("launcher")))
    return jobs


def _coordinates(jobs: Sequence[SweepJob]) -> tuple[list[dict], list[str], dict]:
    """Per job its coordinates, the keys that vary between jobs (the table's first columns, first-seen order) and
    the ones every job shares. Coordinates are the job's overrides when the sweep recorded them, else the settings
    of its first row (decoder config, batch size, hardware, ...)."""
    if any(j.overrides for j in jobs):
        coords = [dict(j.overrides) for j in jobs]
    else:
        coords = [_descriptor(ok_rows(j.rows)[0]) if ok_rows(j.rows) else {} for j in jobs]
    names = list(dict.fromkeys(k for c in coords for k in c))
    varying = [k for k in names if len({c.get(k) for c in coords}) > 1]
    fixed = {k: coords[0][k] for k in names if k not in varying and all(k in c for c in coords)}
    return coords, varying, fixed


def _sort_key(value: Any) -> tuple:
    """Numbers in numeric order before text in text order; absent last."""
    if value is None:
        return (2, "")
    try:
        return (0, float(value))
    except (TypeError, ValueError):
        return (1, str(value))


def sweep_table(jobs: Sequence[SweepJob], datasets: Optional[Sequence[str]] = None) -> str:
    """Markdown: one line per (job, decoder) with the swept values as the first columns, then WER % and
    decoder-only RTFx per dataset; sorted by the swept values. Beneath: what every job shares, the utterance
    counts, and a warning when jobs ran concurrently on one machine (their RTFx shared its cores)."""
    if not jobs:
        raise ValueError("sweep_table: no run directories")
    coords, varying, fixed = _coordinates(jobs)
    rows = [r for j in jobs for r in ok_rows(j.rows)]
    if not rows:
        return "(no successful results)"
    if datasets is None:
        datasets = [d for d in dict.fromkeys(str(r.dataset) for r in rows) if d != "all"] or ["all"]
    lines = []
    for job, c in zip(jobs, coords):
        cells: dict[tuple, dict[str, ResultRow]] = {}
        for r in ok_rows(job.rows):
            cells.setdefault((r.label, r.device), {}).setdefault(str(r.dataset), r)
        for (label, device), by_ds in cells.items():
            lines.append((tuple(_sort_key(c.get(k)) for k in varying), c, label, device, by_ds))
    lines.sort(key=lambda x: x[0])  # stable: within equal coordinates, jobs and decoders keep their order
    with_cer = any(r.cer is not None for r in rows)
    counts = utterance_counts(rows)
    mixed = {d for d in datasets if len(counts.get(d, [])) > 1}  # jobs decoded different subsets: say so per line
    header = [*varying, "decoder", "device"]
    for d in datasets:
        header += ([f"{d} utts"] if d in mixed else []) + [f"{d} WER %"] + ([f"{d} CER %"] if with_cer else []) + [
            f"{d} RTFx"]
    body = []
    for _, c, label, device, by_ds in lines:
        cells = [_value(c.get(k)) for k in varying] + [label, device]
        for d in datasets:
            r = by_ds.get(d)
            if r is None:
                cells += ["–"] * (2 + with_cer + (d in mixed))
                continue
            cells += ([str(r.utterances)] if d in mixed else []) + [_wer_pct(r)] + (
                [_cer_pct(r)] if with_cer else []) + [_fmt_rtfx(r.rtfx_decoder)]
        body.append(cells)
    out = [_table(header, body, n_text=len(varying) + 2), ""]
    if fixed:
        out.append("Every job: " + ", ".join(f"{k}={_value(v)}" for k, v in fixed.items()) + ".")
    out.append("Utterances: " + ", ".join(f"{d} {'/'.join(map(str, counts[d]))}" for d in datasets if d in counts)
               + ".")
    if any(j.launcher and "joblib" in j.launcher.lower() for j in jobs):
        out.append("Jobs ran concurrently on one machine (joblib): their RTFx shared its cores; time with "
                   "hydra.launcher.n_jobs=1 for comparable speed.")
    return "\n".join(out)


def sweep_report(paths: Iterable[str | Path], title: str = "Sweep") -> str:
    """The markdown `python -m reports.sweeps` prints: the sweep table and the decoders that did not run."""
    jobs = load_sweep(paths)
    parts = [f"# {title}", "", sweep_table(jobs), ""]
    extra = unavailable_table([r for j in jobs for r in j.rows])
    if extra:
        parts += ["Not run:", "", extra, ""]
    return "\n".join(parts)


def is_sweep(paths: Iterable[str | Path]) -> bool:
    """Whether any run directory under `paths` was written by a sweep job (reports.cli can add the sweep table)."""
    try:
        return any(j.overrides for j in load_sweep(paths))
    except (OSError, ValueError):
        return False


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m reports.sweeps", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", help="sweep directories (hydra.sweep.dir) or results.jsonl files")
    p.add_argument("--out", default=None, help="directory for sweep.md (default: the first path)")
    p.add_argument("--title", default="Sweep")
    args = p.parse_args(argv)
    try:
        report = sweep_report(args.paths, title=args.title)
    except (OSError, ValueError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    print(report)
    from reports.cli import write_report

    print(f"wrote {write_report(report, args.paths, args.out, 'sweep.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
