"""Regression gate: a results file against committed baseline results, under tolerances.

    python -m eval.gate runs/demo/tiny/results.jsonl reports/baselines/demo_tiny.json          # WER only
    python -m eval.gate runs/demo/tiny reports/baselines/demo_tiny.json --metrics wer,rtfx_ratio --rtfx-reference wfst
    python -m eval.gate RUN_DIR BASELINE --metrics wer,rtfx       # absolute RTFx (a dedicated GPU benchmark host)
    python -m eval.gate RESULTS BASELINE --write-baseline         # (re)create a baseline from a run

Both sides are `reports.schema.ResultRow`s: results lines are read with the strict schema loader, baseline rows
are the `BASELINE_FIELDS` subset of a row, validated by the same rules. Rows are matched on `ResultRow.key`,
(decoder, dataset, params): a runner row has no params, a benchmark's per-shape rows differ only there.

Rules (per baseline row):
- a missing or unavailable row fails (a decoder that stopped working is a regression, not a skip);
- rows are comparable only when the utterance count and the timing boundary match (otherwise: fail,
  "not comparable");
- WER fails when it rose by more than `wer_abs` (absolute, as a fraction: 0.005 = 0.5 points); a benchmark
  row without references (`wer: null` on both sides) is reported as "n/a" and only its RTFx is gated;
- throughput is gated only when asked for (`--metrics`, or the baseline's own `metrics` list), two ways:
  `rtfx`: absolute RTFx (decoder-only and end-to-end) fails when it dropped by more than `rtfx_rel_drop`
  (relative), compared only when the hardware key matches (same GPU, or same CPU model and core count); meant for
  a dedicated machine (a GPU benchmark host), where nothing else runs beside the benchmark.
  `rtfx_ratio`: each decoder's decoder-only RTFx change since the baseline relative to the machine's speed change
  in the same run: the median change over the run's decoders (3 or more, same dataset), or the change of a
  reference decoder (`--rtfx-reference`, or the baseline's `rtfx_reference`); fails when it dropped by more than
  `rtfx_ratio_rel_drop` (default 50 %). This is the throughput check for shared machines (CI, a laptop): the
  runner decodes every batch with every decoder in turn, so load that comes and goes reaches every decoder of the
  run, and one decoder that got slower stands out from the others' median. Noise model, measured on this project's
  loaded 2-core machine (six runs of one commit, every pair of runs, simulator, 100 + 100 utterances, five
  decoders): the absolute RTFx of one decoder moved by up to 5.9x between runs, its change relative to the median
  of the five by at most -42 % (a decoder's speed also depends on how many cores are free, so load does not reach
  every decoder alike); kaldi slowed 3x on purpose moved by -53 % to -72 %. So 50 % catches a ~3x slowdown of one
  decoder, not a 20 % one: on a shared machine no throughput check can. Compared on a matching hardware key only.
- Why absolute RTFx is not gated by default: on a shared machine absolute RTFx measures the machine's load as much
  as the code (the demo's greedy row fell by 68 % between two runs of one commit), so a default throughput check
  fails where the demo passed.
Current rows without a baseline are listed as new (informational).

Exit status: 0 passed, 1 a regression, 2 bad input (unreadable or malformed results or baseline, duplicate
rows, an empty baseline, a tolerance that is not a finite non-negative number, an unknown metric) with one
line on stderr. Bad input never passes and is never confused with a regression.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from reports.schema import (
    SCHEMA_VERSION,
    ResultRow,
    baseline_row_from_dict,
    baseline_subset,
    load_rows,
    one_line,
)

DEFAULT_TOLERANCES = {"wer_abs": 0.005, "rtfx_rel_drop": 0.25, "rtfx_ratio_rel_drop": 0.5}
VALID_METRICS = ("wer", "rtfx", "rtfx_ratio")
DEFAULT_METRICS = ("wer",)  # throughput is opt-in: see the module docstring
RTFX_FIELDS = ("rtfx_decoder", "rtfx_end_to_end")
# top-level keys of a baseline file; "rows" and "schema_version" are required. "metrics" (the metrics gated when
# the command line names none) and "rtfx_reference" (the reference decoder of rtfx_ratio) are optional.
BASELINE_KEYS = ("schema_version", "description", "created", "source", "tolerances", "metrics", "rtfx_reference",
                 "rows")


@dataclass
class Check:
    decoder: str  # the row's label: decoder, plus its params when it has any
    dataset: str
    metric: str
    status: str  # "pass" | "FAIL" | "skip" | "new" | "n/a"
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
        """The diff table and verdict line, rendered by reports/ (the one place tables are drawn)."""
        from reports.tables import gate_table

        return gate_table(self.checks)


@dataclass
class Baseline:
    rows: list[ResultRow]
    tolerances: dict
    description: str = ""
    source: dict = field(default_factory=dict)
    metrics: Optional[list[str]] = None  # what the baseline's author chose to gate (None: DEFAULT_METRICS)
    rtfx_reference: Optional[str] = None


# ---------------------------------------------------------------------------------------------------------
# Input checks (every failure here is bad input: ValueError, exit 2)
# ---------------------------------------------------------------------------------------------------------


def check_tolerances(tol: Any, where: str) -> dict:
    """Tolerances are finite, non-negative numbers under known names (a NaN tolerance would pass anything)."""
    if not isinstance(tol, dict):
        raise ValueError(f"{where}: tolerances must be an object, got {type(tol).__name__}")
    unknown = sorted(str(k) for k in set(tol) - set(DEFAULT_TOLERANCES))
    if unknown:
        raise ValueError(f"{where}: unknown tolerance(s) {unknown[:5]}; valid: {list(DEFAULT_TOLERANCES)}")
    for k, v in tol.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{where}: tolerance {k} must be a number, got {type(v).__name__}")
        try:
            finite = math.isfinite(v)
        except OverflowError:  # an integer beyond float range
            finite = False
        if not finite or v < 0:
            raise ValueError(f"{where}: tolerance {k} must be a finite non-negative number, got {v!r:.40}")
    return {k: float(v) for k, v in tol.items()}


def check_metrics(metrics: Iterable[str]) -> list[str]:
    metrics = list(metrics)
    bad = [m for m in metrics if m not in VALID_METRICS]
    if bad:
        raise ValueError(f"unknown gate metric(s) {bad}; valid choices: {list(VALID_METRICS)}")
    if not metrics:
        raise ValueError(f"no gate metric selected; valid choices: {list(VALID_METRICS)}")
    return metrics


def index_rows(rows: Sequence[ResultRow], where: str) -> dict[tuple, ResultRow]:
    """Rows by key; a duplicate key is bad input (a later copy would otherwise mask a regressed earlier one)."""
    out: dict[tuple, ResultRow] = {}
    for r in rows:
        if not isinstance(r, ResultRow):
            raise ValueError(f"{where}: expected ResultRow objects, got {type(r).__name__}")
        if r.key in out:
            ds = f", params {r.params_label}" if r.params else ""
            raise ValueError(f"{where}: duplicate row for decoder {r.decoder!r:.80}, dataset {r.dataset!r:.80}{ds}")
        out[r.key] = r
    return out


def parse_baseline(data: Any, where: str = "baseline") -> Baseline:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a baseline must be a JSON object, got {type(data).__name__}")
    unknown = sorted(str(k) for k in set(data) - set(BASELINE_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown baseline key(s) {unknown[:5]}; valid: {list(BASELINE_KEYS)}")
    if data.get("schema_version") != SCHEMA_VERSION or isinstance(data.get("schema_version"), bool):
        raise ValueError(f"{where}: schema_version {data.get('schema_version')!r:.40} is not {SCHEMA_VERSION} "
                         f"(regenerate the baseline with --write-baseline)")
    rows = data.get("rows")
    if not isinstance(rows, list):
        raise ValueError(f"{where}: 'rows' must be a list of rows, got {type(rows).__name__}")
    if not rows:
        raise ValueError(f"{where}: the baseline has no rows (it would gate nothing)")
    parsed = []
    for i, d in enumerate(rows):
        try:
            parsed.append(baseline_row_from_dict(d))
        except ValueError as e:
            raise ValueError(f"{where}: row {i}: {one_line(e)}") from None
    index_rows(parsed, where)
    tol = check_tolerances(data.get("tolerances", {}), where)
    for k in ("description",):
        if not isinstance(data.get(k, ""), str):
            raise ValueError(f"{where}: {k} must be a string")
    if not isinstance(data.get("source", {}), dict):
        raise ValueError(f"{where}: source must be an object")
    metrics = data.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
            raise ValueError(f"{where}: metrics must be a list of metric names")
        try:
            metrics = check_metrics(metrics)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    reference = data.get("rtfx_reference")
    if reference is not None and (not isinstance(reference, str) or not reference):
        raise ValueError(f"{where}: rtfx_reference must be a decoder label")
    return Baseline(parsed, tol, data.get("description", ""), data.get("source", {}), metrics, reference)


def load_baseline(path: str | Path) -> Baseline:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"baseline not found: {path} (create one with --write-baseline)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path}: not a JSON baseline ({one_line(e)})") from None
    return parse_baseline(data, str(path))


def load_results(path: str | Path) -> list[ResultRow]:
    rows = load_rows(path)
    if not rows:
        raise ValueError(f"{path}: no result rows (nothing to gate)")
    index_rows(rows, str(path))
    return rows


# ---------------------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------------------


def compare(
    current_rows: Sequence[ResultRow],
    baseline: Baseline,
    metrics: Optional[Sequence[str]] = None,
    tolerances: Optional[dict] = None,
    rtfx_reference: Optional[str] = None,
) -> GateReport:
    """Pure comparison of result rows with a baseline (see the module docstring for the rules). `metrics`: None =
    the baseline's own list, else DEFAULT_METRICS (WER only). `rtfx_reference`: the reference decoder label of
    `rtfx_ratio` (default: the baseline's `rtfx_reference`)."""
    if metrics is None:
        metrics = baseline.metrics or DEFAULT_METRICS
    metrics = check_metrics(metrics)
    reference = rtfx_reference or baseline.rtfx_reference
    tol = {**DEFAULT_TOLERANCES, **baseline.tolerances, **check_tolerances(tolerances or {}, "tolerances")}
    current = index_rows(current_rows, "results")
    baseline_index = index_rows(baseline.rows, "baseline")
    if "rtfx_ratio" in metrics and reference and not any(b.decoder == reference for b in baseline.rows):
        raise ValueError(f"rtfx_ratio reference decoder {reference!r} has no row in the baseline; decoders there: "
                         f"{sorted({b.decoder for b in baseline.rows})[:12]}")
    factors = machine_factors(current, baseline_index, reference) if "rtfx_ratio" in metrics else {}
    failed = {r.decoder: r.reason for r in current_rows if not r.ok}
    report = GateReport()
    seen = set()
    for b in baseline.rows:
        seen.add(b.key)
        label, ds = b.label, str(b.dataset)
        cur = current.get(b.key)
        if cur is None:
            why = failed.get(b.decoder)
            note = f"missing from results ({why})" if why else "missing from results"
            report.checks.append(Check(label, ds, "row", "FAIL", note=note))
            continue
        if cur.utterances != b.utterances:
            report.checks.append(Check(label, ds, "row", "FAIL",
                                       note=f"not comparable: {cur.utterances} utterances vs baseline {b.utterances}"))
            continue
        if cur.boundary != b.boundary:
            report.checks.append(Check(label, ds, "row", "FAIL",
                                       note=f"not comparable: timed at the {cur.boundary} boundary vs baseline {b.boundary}"))
            continue
        if "wer" in metrics:
            report.checks.append(_wer_check(label, ds, b.wer, cur.wer, tol["wer_abs"]))
        if "rtfx" in metrics:
            for m in RTFX_FIELDS:
                bv, cv = getattr(b, m), getattr(cur, m)
                if bv is None:
                    continue  # nothing measured in the baseline (e.g. a kernel benchmark has no end-to-end time)
                if cv is None:
                    report.checks.append(Check(label, ds, m, "skip", bv, None, "no value in the results"))
                elif b.hardware_key is None or b.hardware_key != cur.hardware_key:
                    report.checks.append(Check(label, ds, m, "skip", bv, cv,
                                               f"hardware differs: {cur.hardware_key} vs baseline {b.hardware_key}"))
                else:
                    drop = 1.0 - cv / bv if bv > 0 else 0.0
                    status = "FAIL" if drop > tol["rtfx_rel_drop"] else "pass"
                    report.checks.append(Check(label, ds, m, status, bv, cv,
                                               f"{-100 * drop:+.1f}% (tolerance -{100 * tol['rtfx_rel_drop']:.0f}%)"))
        if "rtfx_ratio" in metrics and b.decoder != reference:
            report.checks.append(_ratio_check(b, cur, reference, factors, tol["rtfx_ratio_rel_drop"]))
    for key, cur in current.items():
        if key not in seen and cur.ok:
            report.checks.append(Check(cur.label, str(cur.dataset), "row", "new", None, cur.wer, "no baseline for this row"))
    return report


def machine_factors(current: dict, baseline_index: dict, reference: Optional[str]) -> dict[tuple, tuple]:
    """Per (dataset, params) group: how much faster (>1) or slower this run's machine was than the baseline's, as
    (factor, what). With a reference decoder, its RTFx change; else the median RTFx change over the group's decoders
    (needs 3 or more: a median of two is their mean, which one slowed decoder drags along). Only rows on the
    baseline's hardware key count."""
    changes: dict[tuple, dict[str, float]] = {}
    for key, b in baseline_index.items():
        cur = current.get(key)
        if cur is None or not cur.ok or b.hardware_key is None or b.hardware_key != cur.hardware_key:
            continue
        if not b.rtfx_decoder or not cur.rtfx_decoder:
            continue
        changes.setdefault((str(b.dataset), b.params_label), {})[b.decoder] = cur.rtfx_decoder / b.rtfx_decoder
    out = {}
    for group, by_decoder in changes.items():
        if reference is not None:
            if reference in by_decoder:
                out[group] = (by_decoder[reference], f"{reference} x{by_decoder[reference]:.2f}")
        elif len(by_decoder) >= 3:
            factor = statistics.median(by_decoder.values())
            out[group] = (factor, f"median of {len(by_decoder)} decoders x{factor:.2f}")
    return out


def _ratio_check(b: ResultRow, cur: ResultRow, reference: Optional[str], factors: dict, tol: float) -> Check:
    """rtfx_ratio of one row: its decoder-only RTFx change since the baseline, divided by the machine's (the
    reference decoder's change, or the median change of the run's decoders: `machine_factors`)."""
    label, ds, metric = b.label, str(b.dataset), "rtfx_ratio"
    if b.hardware_key is None or b.hardware_key != cur.hardware_key:
        return Check(label, ds, metric, "skip", note=f"hardware differs: {cur.hardware_key} vs baseline {b.hardware_key}")
    if not b.rtfx_decoder or not cur.rtfx_decoder:
        return Check(label, ds, metric, "skip", note="no decoder-only RTFx on one side")
    group = factors.get((ds, b.params_label))
    if group is None:
        why = (f"reference decoder {reference} missing from the results or the baseline" if reference else
               "fewer than 3 decoders to take the machine's median speed change from (name one: --rtfx-reference)")
        return Check(label, ds, metric, "FAIL" if reference else "skip", b.rtfx_decoder, cur.rtfx_decoder, why)
    factor, what = group
    change = cur.rtfx_decoder / b.rtfx_decoder
    drop = 1.0 - change / factor
    status = "FAIL" if drop > tol else "pass"
    return Check(label, ds, metric, status, b.rtfx_decoder, cur.rtfx_decoder,
                 f"x{change:.2f} vs machine ({what}): {-100 * drop:+.1f}% (tolerance -{100 * tol:.0f}%)")


def _wer_check(label: str, ds: str, bw: Optional[float], cw: Optional[float], tol: float) -> Check:
    if bw is None and cw is None:
        return Check(label, ds, "wer", "n/a", note="WER n/a (no references); only RTFx is gated")
    if bw is None:
        return Check(label, ds, "wer", "new", None, cw, "baseline has no WER for this row")
    if cw is None:
        return Check(label, ds, "wer", "FAIL", bw, None, "the results have no WER (the baseline has one)")
    delta = cw - bw
    if delta > tol:
        return Check(label, ds, "wer", "FAIL", bw, cw, f"WER +{100 * delta:.2f} points > tolerance {100 * tol:.2f}")
    if delta < -tol:
        return Check(label, ds, "wer", "pass", bw, cw, f"improved by {-100 * delta:.2f} points: consider updating the baseline")
    return Check(label, ds, "wer", "pass", bw, cw, f"Δ {100 * delta:+.2f} points")


def gate_files(
    results_path: str | Path,
    baseline_path: str | Path,
    metrics: Optional[Sequence[str]] = None,
    tolerances: Optional[dict] = None,
    rtfx_reference: Optional[str] = None,
) -> GateReport:
    return compare(load_results(results_path), load_baseline(baseline_path), metrics, tolerances, rtfx_reference)


def make_baseline(rows: Sequence[ResultRow], description: str = "", tolerances: Optional[dict] = None,
                  metrics: Optional[Sequence[str]] = None, rtfx_reference: Optional[str] = None) -> dict:
    """A baseline dict (the JSON written by --write-baseline) from a run's successful rows. `metrics` and
    `rtfx_reference`, when given, are recorded as what this baseline gates by default."""
    index_rows(rows, "results")
    ok = [r for r in rows if r.ok]
    if not ok:
        raise ValueError("no successful rows to make a baseline from")
    env = ok[0].environment
    return {
        "schema_version": SCHEMA_VERSION,
        "description": description,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": {"experiment": ok[0].experiment, "run": ok[0].run, "git_commit": env.get("git_commit"),
                   "torch_version": env.get("torch_version"), "gpu_name": env.get("gpu_name"),
                   "cpu_model": env.get("cpu_model")},
        "tolerances": {**DEFAULT_TOLERANCES, **check_tolerances(tolerances or {}, "tolerances")},
        **({"metrics": check_metrics(metrics)} if metrics else {}),
        **({"rtfx_reference": rtfx_reference} if rtfx_reference else {}),
        "rows": [baseline_subset(r) for r in ok],
    }


# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------


class _UsageError(ValueError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse prints usage + message and exits; we want one line and exit 2
        raise _UsageError(message)


def main(argv=None) -> int:
    p = _Parser(prog="decode-gate", description="Compare a results file with a committed baseline.")
    p.add_argument("results", help="results.jsonl of a run (or its run directory)")
    p.add_argument("baseline", help="baseline JSON (reports/baselines/*.json)")
    p.add_argument("--metrics", default=None,
                   help=f"comma-separated subset of {','.join(VALID_METRICS)} (default: the baseline's own list, else "
                        f"{','.join(DEFAULT_METRICS)}; throughput is opt-in)")
    p.add_argument("--rtfx-reference", default=None, metavar="LABEL",
                   help="reference decoder of rtfx_ratio (each decoder's RTFx over this decoder's, same run)")
    p.add_argument("--wer-abs-tol", type=float, default=None, help="allowed absolute WER rise (fraction; 0.005 = 0.5 points)")
    p.add_argument("--rtfx-rel-drop", type=float, default=None, help="allowed relative RTFx drop (0.25 = 25 %%)")
    p.add_argument("--rtfx-ratio-rel-drop", type=float, default=None,
                   help="allowed relative drop of RTFx / reference RTFx (0.3 = 30 %%)")
    p.add_argument("--write-baseline", action="store_true", help="write BASELINE from RESULTS instead of comparing")
    p.add_argument("--description", default="")
    try:
        args = p.parse_args(argv)
        tol = {}
        if args.wer_abs_tol is not None:
            tol["wer_abs"] = args.wer_abs_tol
        if args.rtfx_rel_drop is not None:
            tol["rtfx_rel_drop"] = args.rtfx_rel_drop
        if args.rtfx_ratio_rel_drop is not None:
            tol["rtfx_ratio_rel_drop"] = args.rtfx_ratio_rel_drop
        tol = check_tolerances(tol, "command line")
        metrics = None if args.metrics is None else \
            check_metrics(m.strip() for m in args.metrics.split(",") if m.strip())
        if args.write_baseline:
            base = make_baseline(load_results(args.results), args.description, tol, metrics, args.rtfx_reference)
            Path(args.baseline).parent.mkdir(parents=True, exist_ok=True)
            Path(args.baseline).write_text(json.dumps(base, indent=1, allow_nan=False) + "\n", encoding="utf-8")
            print(f"wrote baseline {args.baseline} ({len(base['rows'])} rows)")
            return 0
        report = gate_files(args.results, args.baseline, metrics, tol, args.rtfx_reference)
    except (OSError, ValueError, RecursionError) as e:  # bad input of any kind: one line, exit 2
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    print(report.render())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
