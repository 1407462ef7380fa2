"""A/B tables and plots from run directories: one decoder setting against another, each measured in one or more
processes of the same device call.

    python -m reports.ab --arm "candidate form=RUN_A,RUN_B3" --arm "emit slots=RUN_B1,RUN_B4" \\
        [--baseline "candidate form"] [--decoder wfst] --out DIR [--title TITLE]

Every PATH is a run directory (or a results.jsonl) written by one process; an arm lists the processes that ran its
setting. Rows are matched across arms on the gate's key (decoder label, dataset, params), so a configuration is a
graph / batch / shape of one decoder. For each configuration the report gives every process's RTFx, each arm's
change against the baseline arm's mean (the mean over its processes, and their min..max), the baseline's own spread
across its processes (the noise an A/B has to beat) and whether the WER is the same in every arm. Writes
DIR/ab.md and DIR/ab.png.

Refused with a one-line error: fewer than two arms, a baseline that is not an arm, rows from different machines
(timings are compared within one machine only), rows of one configuration measured across different boundaries,
and arms without a configuration in common.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from reports.schema import ResultRow
from reports.tables import _fmt_rtfx, _table, load_results, ok_rows


@dataclass
class Arm:
    name: str
    paths: list[str]
    # configuration key -> one row per process (in the order of `paths`)
    rows: dict[tuple, list[ResultRow]] = field(default_factory=dict)


def parse_arm(text: str) -> Arm:
    """NAME=PATH[,PATH...], or NAME::PATH[,PATH...] when the name holds a '=' (a setting such as
    BEAMDEC_WFST_EMIT_SLOTS=1) -> Arm (paths not loaded yet)."""
    name, sep, paths = text.partition("::") if "::" in text else text.partition("=")
    name = name.strip()
    plist = [p.strip() for p in paths.split(",") if p.strip()]
    if not sep or not name or not plist:
        raise ValueError(f"--arm must be NAME=PATH[,PATH...] or NAME::PATH[,PATH...], got {text!r}")
    return Arm(name, plist)


def load_arms(arms: Sequence[Arm], decoder: Optional[str] = None) -> list[Arm]:
    """Fills each arm's rows (ok rows only; `decoder`: only rows of that registry name)."""
    if len(arms) < 2:
        raise ValueError("an A/B needs at least two arms (--arm NAME=PATH[,PATH...] twice or more)")
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"arm names must differ, got {names}")
    machines: set[str] = set()
    for arm in arms:
        for i, path in enumerate(arm.paths):
            rows = [r for r in ok_rows(load_results([path])) if decoder is None or r.decoder_name == decoder]
            if not rows:
                raise ValueError(f"arm {arm.name!r}: no ok rows{f' of decoder {decoder!r}' if decoder else ''} in {path}")
            for r in rows:
                machines.add(str(r.hardware_key))
                per = arm.rows.setdefault(r.key, [])
                if len(per) > i:
                    raise ValueError(f"arm {arm.name!r}: {path} holds two rows of {r.label} on {r.dataset}")
                per.append(r)
    if len(machines) > 1:
        raise ValueError(f"the arms ran on different machines ({', '.join(sorted(machines))}): "
                         "compare timings within one machine only")
    return list(arms)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _pct(x: float) -> str:
    return f"{0.0 if abs(x) < 0.05 else x:+.1f} %"  # no "-0.0 %"


@dataclass
class Comparison:
    key: tuple
    label: str
    dataset: str
    rtfx: dict[str, list[float]]          # arm -> RTFx per process
    change: dict[str, tuple[float, float, float]]  # arm (not the baseline) -> (mean, min, max) % vs baseline mean
    spread: tuple[float, float]           # the baseline's processes: (min, max) % vs their own mean
    wer: dict[str, list[Optional[float]]]  # arm -> WER % per process


def compare(arms: Sequence[Arm], baseline: str) -> tuple[list[Comparison], list[str]]:
    """Per configuration in every arm: the comparison; and a note per configuration some arm lacks."""
    by_name = {a.name: a for a in arms}
    if baseline not in by_name:
        raise ValueError(f"--baseline {baseline!r} is not an arm (arms: {', '.join(by_name)})")
    base = by_name[baseline]
    keys = list(dict.fromkeys(k for a in arms for k in a.rows))
    common = [k for k in keys if all(k in a.rows for a in arms)]
    if not common:
        raise ValueError("the arms have no configuration (decoder, dataset, params) in common")
    notes = [f"{k[0]} on {k[1]}" + (f" [{k[2]}]" if k[2] else "") + ": not in arm(s) "
             + ", ".join(a.name for a in arms if k not in a.rows) for k in keys if k not in common]
    out = []
    for k in common:
        boundaries = {r.boundary for a in arms for r in a.rows[k]}
        if len(boundaries) > 1:
            raise ValueError(f"{k[0]} on {k[1]}: rows measured across different boundaries {sorted(boundaries)}")
        rtfx = {a.name: [float(r.rtfx_decoder) for r in a.rows[k]] for a in arms}
        if any(v <= 0 for vs in rtfx.values() for v in vs):
            raise ValueError(f"{k[0]} on {k[1]}: an RTFx that is not positive")
        ref = _mean(rtfx[baseline])
        change = {}
        for a in arms:
            if a.name == baseline:
                continue
            rel = [100.0 * (v / ref - 1.0) for v in rtfx[a.name]]
            change[a.name] = (_mean(rel), min(rel), max(rel))
        spread_rel = [100.0 * (v / ref - 1.0) for v in rtfx[baseline]]
        wer = {a.name: [None if r.wer is None else 100.0 * r.wer for r in a.rows[k]] for a in arms}
        first = base.rows[k][0]
        out.append(Comparison(k, first.label, str(first.dataset), rtfx, change, (min(spread_rel), max(spread_rel)),
                              wer))
    return out, notes


def _wer_cell(c: Comparison) -> str:
    values = {a: [w for w in ws if w is not None] for a, ws in c.wer.items()}
    flat = [w for ws in values.values() for w in ws]
    if not flat:
        return "n/a"
    if max(flat) - min(flat) < 5e-3:
        return f"{flat[0]:.2f} (every arm)"
    return "**differs**: " + "; ".join(f"{a} " + " / ".join(f"{w:.2f}" for w in ws) for a, ws in values.items())


def ab_table(comps: Sequence[Comparison], arms: Sequence[Arm], baseline: str) -> str:
    header = ["configuration", "dataset"] + [f"{a.name} RTFx ({len(a.paths)} proc.)" for a in arms]
    header += [f"{a.name} vs {baseline}" for a in arms if a.name != baseline]
    header += [f"{baseline} spread", "WER %"]
    body = []
    n_base = next(len(a.paths) for a in arms if a.name == baseline)
    for c in comps:
        line = [c.label, c.dataset] + ["; ".join(_fmt_rtfx(v) for v in c.rtfx[a.name]) for a in arms]
        for a in arms:
            if a.name == baseline:
                continue
            m, lo, hi = c.change[a.name]
            line.append(f"{_pct(m)} ({_pct(lo)}..{_pct(hi)})" if len(a.paths) > 1 else _pct(m))
        lo, hi = c.spread
        line.append(f"{_pct(lo)}..{_pct(hi)}" if n_base > 1 else "one process")
        line.append(_wer_cell(c))
        body.append(line)
    return _table(header, body, n_text=2)


def plot_ab(comps: Sequence[Comparison], arms: Sequence[Arm], baseline: str, out_path: str | Path,
            title: str = "") -> Path:
    """Horizontal bars: each arm's mean RTFx change against the baseline per configuration, whiskers at its
    processes' min..max; the grey band is the baseline's own spread across its processes."""
    from reports.plots import _pyplot, _save

    plt = _pyplot()
    others = [a.name for a in arms if a.name != baseline]
    n = len(comps)
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.42 * n * max(1, len(others))))
    height = 0.8 / max(1, len(others))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, c in enumerate(comps):
        y0 = n - 1 - i
        lo, hi = c.spread
        ax.fill_betweenx([y0 - 0.45, y0 + 0.45], lo, hi, color="0.85", zorder=0,
                         label=f"{baseline}: spread of its processes" if i == 0 else None)
        for j, name in enumerate(others):
            m, mn, mx = c.change[name]
            y = y0 + 0.4 - height * (j + 0.5)
            ax.barh(y, m, height=height * 0.9, color=colors[j % len(colors)], label=name if i == 0 else None,
                    xerr=[[m - mn], [mx - m]], capsize=2, error_kw={"lw": 0.8})
            ax.text(mx if m >= 0 else mn, y, f" {m:+.1f} % " , va="center", ha="left" if m >= 0 else "right",
                    fontsize=7)  # beyond the whisker
    ax.axvline(0.0, color="k", lw=0.8)
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"{c.label} ({c.dataset})" for c in reversed(comps)], fontsize=7)
    ax.set_xlabel(f"RTFx change vs {baseline} (mean of its processes), %")
    ax.grid(axis="x", alpha=0.3)
    ax.margins(x=0.12)  # room for the labels beyond the whiskers
    # beside the bars: a one-row plot has no free corner
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(title or f"A/B against {baseline}", fontsize=10)
    fig.tight_layout()
    return _save(fig, out_path)


def ab_report(arms: Sequence[Arm], baseline: str, out_dir: str | Path, title: str = "",
              plots: bool = True) -> Path:
    comps, notes = compare(arms, baseline)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title or 'A/B'}", "",
             "Arms (each path is one process; timings from one machine):", ""]
    lines += [f"- **{a.name}**: " + ", ".join(f"`{p}`" for p in a.paths) for a in arms]
    lines += ["", ab_table(comps, arms, baseline), ""]
    if notes:
        lines += ["Configurations not in every arm (not compared):", ""] + [f"- {n}" for n in notes] + [""]
    if plots:
        plot_ab(comps, arms, baseline, out_dir / "ab.png", title)
        lines += ["![A/B](ab.png)", ""]
    path = out_dir / "ab.md"
    path.write_text("\n".join(lines))
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m reports.ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", action="append", default=[], metavar="NAME=PATH[,PATH...]",
                   help="one setting and the run directories (one per process) that measured it, twice or more; "
                        "NAME::PATH[,PATH...] when the name holds a '='")
    p.add_argument("--baseline", default=None, help="the arm the others are compared with (default: the first)")
    p.add_argument("--decoder", default=None, help="only rows of this decoder (registry name, e.g. wfst)")
    p.add_argument("--out", required=True, help="directory for ab.md and ab.png")
    p.add_argument("--title", default="")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    try:
        arms = load_arms([parse_arm(a) for a in args.arm], args.decoder)
        path = ab_report(arms, args.baseline or arms[0].name, args.out, args.title, plots=not args.no_plots)
    except (ValueError, FileNotFoundError) as e:
        print(f"reports.ab: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
