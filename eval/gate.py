"""Regression gate: a results file against committed baseline results, under tolerances.

    python -m eval.gate runs/demo/tiny/results.jsonl reports/baselines/demo_tiny.json [--metrics wer,rtfx]
    python -m eval.gate RESULTS BASELINE --write-baseline      # (re)create a baseline from a run

Rules (per baseline row, matched on (decoder, dataset)):
- a missing or failed row fails (a decoder that stopped working is a regression, not a skip);
- rows are comparable only when the utterance count matches (otherwise: fail, "not comparable");
- WER fails when it rose by more than `wer_abs` (absolute, as a fraction: 0.005 = 0.5 points);
- RTFx (decoder-only and end-to-end) fails when it dropped by more than `rtfx_rel_drop` (relative),
  and is compared only when the hardware key matches (same GPU, or same CPU model and core count);
  otherwise it is reported as skipped.
Current rows without a baseline are listed as new (informational). Exit status 1 on any failure.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

DEFAULT_TOLERANCES = {"wer_abs": 0.005, "rtfx_rel_drop": 0.25}
VALID_METRICS = ("wer", "rtfx")
BASELINE_FIELDS = (
    "decoder", "dataset", "device", "utterances", "audio_seconds", "wer", "substitutions", "deletions",
    "insertions", "ref_words", "rtfx_decoder", "rtfx_end_to_end", "hardware_key",
)


@dataclass
class Check:
    decoder: str
    dataset: str
    metric: str
    status: str  # "pass" | "FAIL" | "skip" | "new"
    baseline: Optional[float] = None
    current: Optional[float] = None
    note: str = ""


@dataclass
class GateReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "FAIL"]

    @property
    def passed(self) -> bool:
        return not self.failures

    def render(self) -> str:
        def num(metric: str, v: Optional[float]) -> str:
            if v is None:
                return "–"
            return f"{100 * v:.2f}%" if metric == "wer" else f"{v:.1f}"

        lines = ["| decoder | dataset | metric | baseline | current | status | note |", "|---|---|---|---:|---:|---|---|"]
        order = {"FAIL": 0, "new": 2, "skip": 3, "pass": 1}
        for c in sorted(self.checks, key=lambda c: order.get(c.status, 9)):
            lines.append(
                f"| {c.decoder} | {c.dataset} | {c.metric} | {num(c.metric, c.baseline)} | "
                f"{num(c.metric, c.current)} | {c.status} | {c.note} |"
            )
        n_fail = len(self.failures)
        verdict = "GATE PASSED" if n_fail == 0 else f"GATE FAILED: {n_fail} regression(s)"
        counts = {s: sum(1 for c in self.checks if c.status == s) for s in ("pass", "FAIL", "skip", "new")}
        return "\n".join(lines) + f"\n\n{verdict} ({', '.join(f'{k} {v}' for k, v in counts.items())})"


def _load_rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"results file not found: {path}")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_baseline(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"baseline not found: {path} (create one with --write-baseline)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if "rows" not in data:
        raise ValueError(f"{path}: a baseline needs a 'rows' list")
    return data


def compare(
    current_rows: Sequence[dict],
    baseline: dict,
    metrics: Sequence[str] = VALID_METRICS,
    tolerances: Optional[dict] = None,
) -> GateReport:
    """Pure comparison of results rows with a baseline dict (see module docstring for the rules)."""
    bad = [m for m in metrics if m not in VALID_METRICS]
    if bad:
        raise ValueError(f"unknown gate metric(s) {bad}; valid choices: {list(VALID_METRICS)}")
    tol = {**DEFAULT_TOLERANCES, **(baseline.get("tolerances") or {}), **(tolerances or {})}
    current = {(r["decoder"], r["dataset"]): r for r in current_rows if r.get("status", "ok") == "ok"}
    failed = {r["decoder"]: r.get("reason", "") for r in current_rows if r.get("status", "ok") != "ok"}
    report = GateReport()
    seen = set()
    for b in baseline["rows"]:
        key = (b["decoder"], b["dataset"])
        seen.add(key)
        cur = current.get(key)
        if cur is None:
            why = failed.get(b["decoder"])
            note = f"missing from results ({why})" if why else "missing from results"
            report.checks.append(Check(*key, "row", "FAIL", note=note))
            continue
        if b.get("utterances") is not None and cur.get("utterances") != b["utterances"]:
            report.checks.append(
                Check(*key, "row", "FAIL", note=f"not comparable: {cur.get('utterances')} utterances vs baseline {b['utterances']}")
            )
            continue
        if "wer" in metrics:
            delta = cur["wer"] - b["wer"]
            if delta > tol["wer_abs"]:
                status, note = "FAIL", f"WER +{100 * delta:.2f} points > tolerance {100 * tol['wer_abs']:.2f}"
            elif delta < -tol["wer_abs"]:
                status, note = "pass", f"improved by {-100 * delta:.2f} points: consider updating the baseline"
            else:
                status, note = "pass", f"Δ {100 * delta:+.2f} points"
            report.checks.append(Check(*key, "wer", status, b["wer"], cur["wer"], note))
        if "rtfx" in metrics:
            for m in ("rtfx_decoder", "rtfx_end_to_end"):
                if b.get(m) is None or cur.get(m) is None:
                    continue
                if b.get("hardware_key") != cur.get("hardware_key"):
                    report.checks.append(
                        Check(*key, m, "skip", b[m], cur[m], f"hardware differs: {cur.get('hardware_key')} vs baseline {b.get('hardware_key')}")
                    )
                    continue
                drop = 1.0 - cur[m] / b[m] if b[m] > 0 else 0.0
                status = "FAIL" if drop > tol["rtfx_rel_drop"] else "pass"
                report.checks.append(
                    Check(*key, m, status, b[m], cur[m], f"{-100 * drop:+.1f}% (tolerance -{100 * tol['rtfx_rel_drop']:.0f}%)")
                )
    for key, cur in current.items():
        if key not in seen:
            report.checks.append(Check(*key, "row", "new", None, cur.get("wer"), "no baseline for this row"))
    return report


def gate_files(
    results_path: str | Path,
    baseline_path: str | Path,
    metrics: Sequence[str] = VALID_METRICS,
    tolerances: Optional[dict] = None,
) -> GateReport:
    return compare(_load_rows(Path(results_path)), load_baseline(baseline_path), metrics, tolerances)


def make_baseline(rows: Sequence[dict], description: str = "", tolerances: Optional[dict] = None) -> dict:
    ok = [r for r in rows if r.get("status", "ok") == "ok"]
    if not ok:
        raise ValueError("no successful rows to make a baseline from")
    env = ok[0].get("environment") or {}
    return {
        "description": description,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": {"experiment": ok[0].get("experiment"), "run": ok[0].get("run"), "git_commit": env.get("git_commit"),
                   "torch_version": env.get("torch_version"), "gpu_name": env.get("gpu_name"), "cpu_model": env.get("cpu_model")},
        "tolerances": {**DEFAULT_TOLERANCES, **(tolerances or {})},
        "rows": [{k: r.get(k) for k in BASELINE_FIELDS} for r in ok],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="decode-gate", description="Compare a results file with a committed baseline.")
    p.add_argument("results", help="results.jsonl of a run (or its run directory)")
    p.add_argument("baseline", help="baseline JSON (reports/baselines/*.json)")
    p.add_argument("--metrics", default="wer,rtfx", help=f"comma-separated subset of {','.join(VALID_METRICS)}")
    p.add_argument("--wer-abs-tol", type=float, default=None, help="allowed absolute WER rise (fraction; 0.005 = 0.5 points)")
    p.add_argument("--rtfx-rel-drop", type=float, default=None, help="allowed relative RTFx drop (0.25 = 25 %%)")
    p.add_argument("--write-baseline", action="store_true", help="write BASELINE from RESULTS instead of comparing")
    p.add_argument("--description", default="")
    args = p.parse_args(argv)
    results = Path(args.results)
    if results.is_dir():
        results = results / "results.jsonl"
    tol = {}
    if args.wer_abs_tol is not None:
        tol["wer_abs"] = args.wer_abs_tol
    if args.rtfx_rel_drop is not None:
        tol["rtfx_rel_drop"] = args.rtfx_rel_drop
    try:
        if args.write_baseline:
            base = make_baseline(_load_rows(results), args.description, tol)
            Path(args.baseline).parent.mkdir(parents=True, exist_ok=True)
            Path(args.baseline).write_text(json.dumps(base, indent=1) + "\n", encoding="utf-8")
            print(f"wrote baseline {args.baseline} ({len(base['rows'])} rows)")
            return 0
        report = gate_files(results, args.baseline, [m.strip() for m in args.metrics.split(",") if m.strip()], tol)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report.render())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
