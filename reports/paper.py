"""Tables and plots of the paper's experiments (eval/paper.py) from their run directories alone.

    python -m reports.paper reports/evidence/speech_tiny               # every experiment folder under it
    python -m reports.paper reports/evidence/speech_tiny/table1_topology

Each experiment folder holds run directories (results.jsonl, hyps.jsonl, config.yaml) and bootstrap.json (the
95 % intervals eval.paper computed from the hyps with eval.metrics); this module only reads and renders:
- table1_topology: WER with CI per decoder / topology / graph, and the paired differences (compact vs normal...);
- fig6_boost: WER against boost magnitude, accurate vs inaccurate, one panel per (test set, score beam), the
  rule-of-thumb check (boost <= beam / 2); decoders whose beam is a hypothesis count (ctc_lm's beam_size) have no
  panel of their own: their curve is drawn in every panel of its test set, up to that panel's beam;
- table3_speed: decoder-only RTFx and speed-up over Flashlight on one process;
- table2_end_to_end: end-to-end RTFx (features + model + decoding) of each decoder's pipeline, and its ratio to the
  Flashlight pipeline on P processes.
Writes report.md and <experiment>.png into each experiment folder. Exit status 2 with one line for bad input.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from reports.schema import ResultRow, one_line
from reports.plots import _pyplot
from reports.tables import _table, load_results

KINDS = ("table1_topology", "fig6_boost", "table3_speed", "table2_end_to_end")
BOOTSTRAP_FILE = "bootstrap.json"
DATASETS = ("clean", "other", "all")


# ---------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------


def load_experiment(exp_dir: str | Path) -> tuple[str, list[ResultRow], dict]:
    """(kind, rows, bootstrap) of one experiment folder; bootstrap is {} when the folder has none."""
    exp_dir = Path(exp_dir)
    if not exp_dir.is_dir():
        raise FileNotFoundError(f"not an experiment folder: {exp_dir}")
    if not any(exp_dir.glob("*/results.jsonl")):
        raise ValueError(f"{exp_dir}: no run directories (*/results.jsonl)")
    rows = load_results([exp_dir])
    kinds = {r.experiment for r in rows}
    if len(kinds) != 1 or next(iter(kinds)) not in KINDS:
        raise ValueError(f"{exp_dir}: rows of experiment(s) {sorted(kinds)}, expected one of {list(KINDS)}")
    boot = {}
    path = exp_dir / BOOTSTRAP_FILE
    if path.is_file():
        try:
            boot = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise ValueError(f"{path}: not JSON ({one_line(e)})") from None
        if not isinstance(boot, dict) or not isinstance(boot.get("intervals"), list):
            raise ValueError(f"{path}: no 'intervals' list")
    return next(iter(kinds)), rows, boot


def intervals(boot: dict) -> dict:
    """{(run, decoder label, dataset): interval dict} of a bootstrap.json."""
    return {(i["run"], i["decoder"], i["dataset"]): i for i in boot.get("intervals", [])}


def _pct(v: Optional[float], digits: int = 2) -> str:
    return "—" if v is None else f"{100 * v:.{digits}f}"


def _wer_ci(r: Optional[ResultRow], ci: Optional[dict]) -> str:
    if r is None or r.wer is None:
        return "—"
    if ci is None:
        return _pct(r.wer)
    return f"{_pct(r.wer)} [{_pct(ci['low'])}, {_pct(ci['high'])}]"


def _rtfx(v: Optional[float]) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


# ---------------------------------------------------------------------------------------------------------
# Table 1: WER by topology vs Flashlight
# ---------------------------------------------------------------------------------------------------------

_ORDER = {"greedy": 0, "ctc_beam": 1, "flashlight": 2, "wfst": 3}
_TOPO_ORDER = {"compact": 0, "normal": 1, "minimal": 2}


def system_label(r: ResultRow) -> str:
    """"wfst compact TLG" for graph decoders (topology from the run name eval.paper gives: <topology>_<graph>),
    the decoder name otherwise."""
    if r.decoder_name != "wfst":
        return r.decoder
    topo = r.run.split("_")[0]
    return f"wfst {topo} {r.decoder_config.get('graph', '?')}"


def _system_key(r: ResultRow) -> tuple:
    topo = r.run.split("_")[0] if r.decoder_name == "wfst" else ""
    return (_ORDER.get(r.decoder_name, 9), _TOPO_ORDER.get(topo, 9), {"TLG": 0, "HLG": 1}.get(
        str(r.decoder_config.get("graph", "")), 2))


def _systems(rows: Sequence[ResultRow]) -> dict:
    """{(run, decoder label): {dataset: row}} of measured rows: one table line per system."""
    systems: dict = {}
    for r in rows:
        systems.setdefault((r.run, r.decoder), {})[r.dataset] = r
    return systems


def _not_measured(rows: Sequence[ResultRow]) -> list:
    """Markdown lines listing the rows that could not be measured here, with their reasons ([] when none)."""
    missing = [r for r in rows if not r.ok]
    if not missing:
        return []
    return ["", "Not measured here:", "", *[f"- `{r.decoder}` (run {r.run}): {r.reason}" for r in missing]]


def table1_markdown(rows: Sequence[ResultRow], boot: dict) -> str:
    ok = [r for r in rows if r.ok and r.wer is not None]
    cis = intervals(boot)
    systems = _systems(ok)
    order = sorted(systems, key=lambda k: _system_key(next(iter(systems[k].values()))))
    n = {d: next((r.utterances for r in ok if r.dataset == d), 0) for d in DATASETS}
    head = ["system", *[f"{d} WER % [95 % CI] (n={n[d]})" for d in DATASETS],
            "S/D/I other", "RTFx clean", "RTFx other"]
    body = []
    for key in order:
        by = systems[key]
        any_row = next(iter(by.values()))
        other = by.get("other")
        body.append([
            system_label(any_row),
            *[_wer_ci(by.get(d), cis.get((key[0], key[1], d))) for d in DATASETS],
            f"{other.substitutions}/{other.deletions}/{other.insertions}" if other else "—",
            _rtfx(by["clean"].rtfx_decoder if "clean" in by else None),
            _rtfx(other.rtfx_decoder if other else None),
        ])
    out = [_table(head, body, n_text=1)]
    paired = boot.get("paired") or []
    if paired:
        label = {(r.run, r.decoder): system_label(r) for r in ok}
        ph = ["A", "B", "set", "reading", "WER(A) − WER(B), points [95 % CI]", "P(A lower)", "same hyps"]
        pb = []
        for p in paired:
            a = label.get((p["a"]["run"], p["a"]["decoder"]), f"{p['a']['run']}/{p['a']['decoder']}")
            b = label.get((p["b"]["run"], p["b"]["decoder"]), f"{p['b']['run']}/{p['b']['decoder']}")
            same = p.get("identical_hypotheses")
            pb.append([a, b, p["dataset"], paired_reading(p),
                       f"{100 * p['estimate']:+.2f} [{100 * p['low']:+.2f}, {100 * p['high']:+.2f}]",
                       f"{p['prob_a_better']:.3f}", "—" if same is None else f"{same}/{p['utterances']}"])
        out += ["", f"Paired bootstrap ({boot.get('resamples')} resamples of the utterances, seed {boot.get('seed')}; "
                    "both systems scored on the same draw; P(A lower): share of draws where A has the lower WER):",
                "", _table(ph, pb, n_text=4)]
    return "\n".join(out)


def paired_reading(p: dict) -> str:
    """What a paired interval says: identical hypotheses, a difference at 95 %, or none shown."""
    same = p.get("identical_hypotheses")
    if same is not None and same == p["utterances"]:
        return "identical hypotheses"
    if p["estimate"] == 0 and p["low"] == 0 and p["high"] == 0:
        return "same error count on every utterance"
    if p["high"] < 0:
        return "A better (CI excludes 0)"
    if p["low"] > 0:
        return "B better (CI excludes 0)"
    return "no difference shown (CI covers 0)"


def plot_table1(rows: Sequence[ResultRow], boot: dict, out_path: str | Path) -> Path:
    plt = _pyplot()
    ok = [r for r in rows if r.ok and r.wer is not None and r.dataset in ("clean", "other")]
    if not ok:
        raise ValueError("plot_table1: no rows with a WER")
    cis = intervals(boot)
    systems = sorted({(r.run, r.decoder) for r in ok},
                     key=lambda k: _system_key(next(r for r in ok if (r.run, r.decoder) == k)), reverse=True)
    labels = [system_label(next(r for r in ok if (r.run, r.decoder) == k)) for k in systems]
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.42 * len(systems) + 1.6), sharey=True)
    for ax, dataset in zip(axes, ("clean", "other")):
        ys, xs, lo, hi, colors = [], [], [], [], []
        for y, key in enumerate(systems):
            r = next((r for r in ok if (r.run, r.decoder) == key and r.dataset == dataset), None)
            if r is None:
                continue
            ci = cis.get((key[0], key[1], dataset))
            ys.append(y)
            xs.append(100 * r.wer)
            lo.append(100 * (r.wer - ci["low"]) if ci else 0.0)
            hi.append(100 * (ci["high"] - r.wer) if ci else 0.0)
            colors.append({"wfst": "tab:blue", "flashlight": "tab:orange"}.get(r.decoder_name, "tab:gray"))
        ax.barh(ys, xs, color=colors, alpha=0.75)
        ax.errorbar(xs, ys, xerr=[lo, hi], fmt="none", ecolor="black", capsize=3, lw=1)
        for y, x, h in zip(ys, xs, hi):
            ax.text(x + h + 0.015 * max(x + h for x, h in zip(xs, hi)), y, f"{x:.2f}", va="center", fontsize=8)
        n = next((r.utterances for r in ok if r.dataset == dataset), 0)
        ax.set_title(f"test-{dataset} ({n} utterances)")
        ax.set_xlabel("WER % (bars: 95 % bootstrap CI)")
        ax.set_xlim(0, max(x + h for x, h in zip(xs, hi)) * 1.18)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(systems)))
    axes[0].set_yticklabels(labels, fontsize=9)
    fig.suptitle("Table 1 analogue: WER by decoder and graph topology (Conformer-CTC, synthesized speech)", fontsize=10)
    fig.tight_layout()
    return _save(plt, fig, out_path)


def _save(plt, fig, out_path: str | Path) -> Path:
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(out_path, dpi=130)
    finally:
        plt.close(fig)
    return out_path


# ---------------------------------------------------------------------------------------------------------
# Figure 6: boost sweep
# ---------------------------------------------------------------------------------------------------------


# decoders whose fig6 beam is a hypothesis count (beam_size), not a score threshold in the boosts' units
COUNT_BEAM_DECODERS = ("ctc_lm",)


def beam_of(r: ResultRow) -> Optional[float]:
    """The beam the row decoded with (WFST: search_beam; Flashlight: beam_threshold; ctc_lm: beam_size, a
    hypothesis count)."""
    if r.decoder_name in COUNT_BEAM_DECODERS:
        v = r.decoder_config.get("beam_size")
    else:
        v = r.decoder_config.get("search_beam", r.decoder_config.get("beam_threshold"))
    return None if v is None else float(v)


def score_beam(decoder: str) -> bool:
    """Whether the decoder's fig6 beam is a score threshold, comparable with the boost (the beam/2 rule applies)."""
    return decoder not in COUNT_BEAM_DECODERS


def scenario_of(r: ResultRow) -> str:
    for s in ("inaccurate", "accurate"):  # "inaccurate" contains "accurate": test it first
        if f"_{s}_" in f"_{r.run}_":
            return s
    return "?"


def sweep_curves(rows: Sequence[ResultRow]) -> dict:
    """{(decoder_name, beam, dataset): {scenario: [(boost, row), ...] sorted}}."""
    curves: dict = {}
    for r in rows:
        if not r.ok or r.boost_value is None or r.wer is None or r.dataset == "all":
            continue
        key = (r.decoder_name, beam_of(r), r.dataset)
        curves.setdefault(key, {}).setdefault(scenario_of(r), []).append((r.boost_value, r))
    for v in curves.values():
        for s in v:
            v[s].sort(key=lambda p: p[0])
    return curves


def rule_of_thumb(points: dict, beam: float) -> dict:
    """What the accurate/inaccurate curves say about "boost <= beam / 2": the best accurate boost, the accurate WER
    at 0, at the best point, at the largest boost <= beam/2 and at the beam, and the inaccurate curve's spread
    below and above beam/2."""
    acc = points.get("accurate", [])
    ina = points.get("inaccurate", [])
    out: dict = {"beam": beam}
    if acc:
        best = min(acc, key=lambda p: (p[1].wer, p[0]))
        half = [p for p in acc if p[0] <= beam / 2 + 1e-9]
        out.update(accurate_wer_at_0=acc[0][1].wer, best_boost=best[0], best_wer=best[1].wer,
                   wer_at_half=half[-1][1].wer if half else None, half_boost=half[-1][0] if half else None,
                   wer_at_beam=acc[-1][1].wer, best_within_half=best[0] <= beam / 2 + 1e-9)
    if ina:
        low = [p[1].wer for p in ina if p[0] <= beam / 2 + 1e-9]
        high = [p[1].wer for p in ina if p[0] > beam / 2 + 1e-9]
        out.update(inaccurate_wer_at_0=ina[0][1].wer,
                   inaccurate_max_rise_within_half=(max(low) - ina[0][1].wer) if low else None,
                   inaccurate_max_rise_above_half=(max(high) - ina[0][1].wer) if high else None)
    return out


_FIG6_ORDER = {"wfst": 0, "ctc_lm": 1, "flashlight": 2}


def _delta(p: Optional[dict], zero: bool = False) -> str:
    if p is None:
        return "ref" if zero else "—"
    star = "*" if p["high"] < 0 or p["low"] > 0 else ""
    return f"{100 * p['estimate']:+.2f} [{100 * p['low']:+.2f}, {100 * p['high']:+.2f}]{star}"


def count_beam_summary(points: dict, score_beams: Sequence[float]) -> list:
    """The summary lines of a count-beam decoder's sweep (ctc_lm): the best accurate boost, and the WER at the
    largest boost <= each score beam's half and at each score beam (the WFST panels' reference points)."""
    lines = []
    acc, ina = points.get("accurate", []), points.get("inaccurate", [])

    def at_most(ps, limit):
        below = [p for p in ps if p[0] <= limit + 1e-9]
        return below[-1] if below else None

    for name, ps in (("Accurate", acc), ("Inaccurate", ina)):
        if not ps:
            continue
        best = min(ps, key=lambda p: (p[1].wer, p[0]))
        parts = [f"WER {_pct(ps[0][1].wer)} % at 0, best {_pct(best[1].wer)} % at boost {best[0]:g}"]
        for beam in score_beams:
            for limit, what in ((beam / 2, f"≤ {beam:g}/2"), (beam, f"≤ {beam:g}")):
                p = at_most(ps, limit)
                if p is not None:
                    parts.append(f"{_pct(p[1].wer)} % at {p[0]:g} ({what})")
        lines.append(f"{name}: " + ", ".join(dict.fromkeys(parts)) + ".")
    return lines


def fig6_markdown(rows: Sequence[ResultRow], boot: dict) -> str:
    curves = sweep_curves(rows)
    if not curves:
        raise ValueError("fig6: no boost-sweep rows")
    cis = intervals(boot)
    # paired WER(boost b) - WER(boost 0) within a run (eval.paper.fig6_pairs), keyed by the boosted system
    deltas = {(p["a"]["run"], p["a"]["decoder"], p["dataset"]): p for p in boot.get("paired") or []
              if p["a"]["run"] == p["b"]["run"] and p["dataset"] != "all"}
    score_beams = sorted({k[1] for k in curves if score_beam(k[0])})
    out = [*(["Δ vs boost 0: WER(boost) − WER(boost 0) in points, paired bootstrap on the same utterances "
              "(* : the interval excludes 0)", ""] if deltas else [])]
    for (decoder, beam, dataset) in sorted(curves, key=lambda k: (_FIG6_ORDER.get(k[0], 9), k[0], k[1], k[2])):
        pts = curves[(decoder, beam, dataset)]
        n = next(iter(pts.values()))[0][1].utterances
        boosts = sorted({b for s in pts.values() for b, _ in s})
        scored = score_beam(decoder)
        scenarios = [s for s in ("accurate", "inaccurate") if s in pts]
        with_delta = [s for s in scenarios if any((r.run, r.decoder, r.dataset) in deltas for _, r in pts[s])]
        head = ["boost", *(["boost / beam"] if scored else []),
                *[h for s in scenarios for h in (f"{s} WER % [95 % CI]",
                                                 *([f"{s} Δ vs boost 0 [95 % CI]"] if s in with_delta else []))]]
        body = []
        for b in boosts:
            cells = [f"{b:g}", *([f"{b / beam:.3f}"] if scored else [])]
            for s in scenarios:
                r = next((r for bb, r in pts[s] if bb == b), None)
                cells.append(_wer_ci(r, cis.get((r.run, r.decoder, r.dataset)) if r else None))
                if s in with_delta:
                    cells.append(_delta(deltas.get((r.run, r.decoder, r.dataset)) if r else None,
                                        zero=r is not None and r.boost_value == 0))
            body.append(cells)
        if not scored:
            out += [f"### {decoder}, beam size {beam:g} (hypotheses, no score beam), test-{dataset} ({n} utterances)",
                    "", _table(head, body, 1), "", *count_beam_summary(pts, score_beams), ""]
            continue
        rt = rule_of_thumb(pts, beam)
        out += [f"### {decoder}, search beam {beam:g}, test-{dataset} ({n} utterances)", "", _table(head, body, 2), ""]
        if "best_boost" in rt:
            rise = rt["wer_at_beam"] - rt["best_wer"]
            out.append(
                f"Accurate: WER {_pct(rt['accurate_wer_at_0'])} % at 0, best {_pct(rt['best_wer'])} % at boost "
                f"{rt['best_boost']:g} ({rt['best_boost'] / beam:.2f} × beam, "
                f"{'within' if rt['best_within_half'] else 'ABOVE'} beam/2), {_pct(rt['wer_at_half'])} % at "
                f"{rt['half_boost']:g} (≤ beam/2), {_pct(rt['wer_at_beam'])} % at the beam (+{100 * rise:.2f} points "
                "over the best).")
        if rt.get("inaccurate_max_rise_within_half") is not None:
            above = rt.get("inaccurate_max_rise_above_half")
            out.append(
                f"Inaccurate: WER {_pct(rt['inaccurate_wer_at_0'])} % at 0; largest rise "
                f"{100 * rt['inaccurate_max_rise_within_half']:+.2f} points for boosts ≤ beam/2"
                + (f", {100 * above:+.2f} above." if above is not None else "."))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def plot_fig6(rows: Sequence[ResultRow], boot: dict, out_path: str | Path) -> Path:
    plt = _pyplot()
    curves = sweep_curves(rows)
    if not curves:
        raise ValueError("plot_fig6: no boost-sweep rows")
    cis = intervals(boot)
    datasets = sorted({k[2] for k in curves})
    # one panel column per score beam; count-beam decoders (ctc_lm) are drawn in every panel of their test set
    beams = sorted({k[1] for k in curves if score_beam(k[0])}) or [None]
    fig, axes = plt.subplots(len(datasets), len(beams), figsize=(4.6 * len(beams), 3.6 * len(datasets) + 0.7),
                             squeeze=False)
    colors = {"accurate": "tab:green", "inaccurate": "tab:red"}
    styles = {"wfst": "-", "flashlight": "--", "ctc_lm": "-."}
    markers = {"wfst": "o", "flashlight": "s", "ctc_lm": "^"}
    for i, dataset in enumerate(datasets):
        for j, beam in enumerate(beams):
            ax = axes[i][j]
            for (decoder, b, d), pts in sorted(curves.items(), key=lambda kv: (_FIG6_ORDER.get(kv[0][0], 9), kv[0])):
                scored = score_beam(decoder)
                if d != dataset or (scored and b != beam):
                    continue
                for scenario, ps in sorted(pts.items()):
                    if not scored and beam is not None:
                        ps = [p for p in ps if p[0] <= beam + 1e-9]  # the panel's boost range
                    if not ps:
                        continue
                    xs = [p[0] for p in ps]
                    ys = [100 * p[1].wer for p in ps]
                    what = decoder if scored else f"{decoder} (beam size {b:g})"
                    ax.plot(xs, ys, styles.get(decoder, ":"), marker=markers.get(decoder, "x"), ms=4,
                            color=colors.get(scenario, "gray"), alpha=1.0 if scored else 0.85,
                            label=f"{what} {scenario} (n={ps[0][1].utterances})")
                    band = [cis.get((p[1].run, p[1].decoder, p[1].dataset)) for p in ps]
                    if all(band):
                        ax.fill_between(xs, [100 * c["low"] for c in band], [100 * c["high"] for c in band],
                                        color=colors.get(scenario, "gray"), alpha=0.12, lw=0)
            # log WER axis: past beam/2 boosted words are inserted wholesale (WER > 100 %), which on a linear axis
            # flattens the small-boost region the rule of thumb is about
            ax.set_yscale("log")
            if beam is not None:
                ax.axvline(beam / 2, color="black", ls=":", lw=1)
                ax.text(beam / 2, ax.get_ylim()[1], " beam/2", va="top", fontsize=8)
            ax.set_title(f"test-{dataset}" + (f", search beam {beam:g}" if beam is not None else ""), fontsize=10)
            ax.set_xlabel("boost magnitude (log domain)")
            ax.set_ylabel("WER % (log scale)")
            ax.grid(True, which="both", alpha=0.25)
    # one legend for the figure, below the panels (inside them it hides the curves' upper part)
    handles: dict = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    ncol = min(3, max(1, len(handles)))
    legend_rows = math.ceil(len(handles) / ncol)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    count = sorted({f"{k[0]} (beam size {k[1]:g})" for k in curves if not score_beam(k[0])})
    fig.suptitle("Figure 6 analogue: word boosting, accurate (test-set words) vs inaccurate (absent words); "
                 "bands: 95 % CI" + (f"\n{', '.join(count)}: one sweep at the same boosts, drawn in every panel up to "
                                     "its beam" if count else ""), fontsize=10)
    fig.tight_layout(rect=(0, min(0.4, (0.22 * legend_rows + 0.1) / fig.get_figheight()), 1, 1))
    return _save(plt, fig, out_path)


# ---------------------------------------------------------------------------------------------------------
# Table 3: decoder-only speed-ups
# ---------------------------------------------------------------------------------------------------------


def processes_of(r: ResultRow) -> Optional[int]:
    return r.decoder_config.get("num_processes") if r.decoder_name == "flashlight" else None


def _speed_label(r: ResultRow) -> str:
    if r.decoder_name == "flashlight":
        p = processes_of(r) or 1
        return f"Flashlight, {p} process{'es' if p > 1 else ''}"
    return f"{r.decoder_name} ({r.device})"


def table3_markdown(rows: Sequence[ResultRow]) -> str:
    ok = [r for r in rows if r.ok]
    ref = {r.dataset: r for r in ok if r.decoder_name == "flashlight" and (processes_of(r) or 1) == 1}
    if not ref:
        raise ValueError("table3: no Flashlight single-process rows to compare against")
    systems = _systems(ok)
    order = sorted(systems, key=lambda k: (_ORDER.get(next(iter(systems[k].values())).decoder_name, 9),
                                           processes_of(next(iter(systems[k].values()))) or 0, k[1]))
    head = ["decoder", "device", *[f"RTFx {d}" for d in DATASETS], *[f"speed-up {d}" for d in DATASETS], "WER all %",
            "cores here"]
    body = []
    for key in order:
        by = systems[key]
        any_row = next(iter(by.values()))
        cells = [_speed_label(any_row), any_row.environment.get("gpu_name") or any_row.environment.get("cpu_model", "?")]
        cells += [_rtfx(by[d].rtfx_decoder) if d in by else "—" for d in DATASETS]
        for d in DATASETS:
            r, base = by.get(d), ref.get(d)
            ok_ratio = r and base and r.rtfx_decoder and base.rtfx_decoder
            cells.append(f"{r.rtfx_decoder / base.rtfx_decoder:.2f}×" if ok_ratio else "—")
        cells.append(_pct(by["all"].wer) if "all" in by else "—")
        cells.append(str(any_row.environment.get("cpu_count", "?")))
        body.append(cells)
    out = [_table(head, body, n_text=2)]
    return "\n".join(out + _not_measured(rows)) + "\n"


def plot_table3(rows: Sequence[ResultRow], out_path: str | Path) -> Path:
    plt = _pyplot()
    ok = [r for r in rows if r.ok and r.dataset == "all" and r.rtfx_decoder]
    ref = next((r for r in ok if r.decoder_name == "flashlight" and (processes_of(r) or 1) == 1), None)
    if ref is None:
        raise ValueError("plot_table3: no Flashlight single-process 'all' row")
    ok.sort(key=lambda r: r.rtfx_decoder)
    fig, ax = plt.subplots(figsize=(6.5, 0.5 * len(ok) + 1.4))
    ys = range(len(ok))
    ratios = [r.rtfx_decoder / ref.rtfx_decoder for r in ok]
    ax.barh(list(ys), ratios, color=["tab:orange" if r.decoder_name == "flashlight" else "tab:blue" for r in ok])
    for y, r, x in zip(ys, ok, ratios):
        ax.text(x, y, f" {x:.2f}× (RTFx {_rtfx(r.rtfx_decoder)})", va="center", fontsize=8)
    ax.set_yticks(list(ys))
    ax.set_yticklabels([_speed_label(r) for r in ok], fontsize=9)
    ax.set_xlabel("decoder-only speed-up over Flashlight on 1 process")
    ax.set_xlim(0, max(ratios) * 1.6)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"Table 3 analogue (both test sets; {ref.environment.get('cpu_count', '?')} CPU cores here)",
                 fontsize=10)
    fig.tight_layout()
    return _save(plt, fig, out_path)


def _flashlight_reference(rows: Sequence[ResultRow]) -> dict:
    """{dataset: row} of the Flashlight pipeline with the most processes (the paper's CPU baseline)."""
    ref: dict = {}
    for r in rows:
        if r.ok and r.decoder_name == "flashlight":
            old = ref.get(r.dataset)
            if old is None or (processes_of(r) or 1) > (processes_of(old) or 1):
                ref[r.dataset] = r
    if not ref:
        raise ValueError("table2: no Flashlight rows to compare against")
    return ref


def table2_markdown(rows: Sequence[ResultRow]) -> str:
    ok = [r for r in rows if r.ok]
    ref = _flashlight_reference(ok)
    systems = _systems(ok)
    order = sorted(systems, key=lambda k: (_ORDER.get(next(iter(systems[k].values())).decoder_name, 9), k[1]))
    head = ["pipeline", "decoder device", "acoustic s (all)", "decoder s (all)",
            *[f"end-to-end RTFx {d}" for d in DATASETS], "× Flashlight (all)", "decoder-only RTFx (all)", "WER all %"]
    body = []
    for key in order:
        by = systems[key]
        a = by.get("all") or next(iter(by.values()))
        base = ref.get("all")
        ratio = (f"{a.rtfx_end_to_end / base.rtfx_end_to_end:.2f}×"
                 if a.dataset == "all" and base and a.rtfx_end_to_end and base.rtfx_end_to_end else "—")
        cells = [_speed_label(a), a.device, f"{a.acoustic_seconds:.2f}" if a.acoustic_seconds is not None else "—",
                 f"{a.decoder_seconds:.2f}" if a.decoder_seconds is not None else "—"]
        cells += [_rtfx(by[d].rtfx_end_to_end) if d in by else "—" for d in DATASETS]
        cells += [ratio, _rtfx(a.rtfx_decoder), _pct(a.wer)]
        body.append(cells)
    env = next((r.environment for r in ok if r.environment), {})
    out = [_table(head, body, n_text=2), "",
           f"Acoustic model: NeMo features + Conformer-CTC on {env.get('gpu_name') or 'the CPU'} (shared by every "
           f"row of the run: computed once per batch); each row's end-to-end time = acoustic + transfer + its "
           f"decoder. Batch {next(iter(ok)).batch_size if ok else '?'}; {env.get('cpu_count', '?')} CPU cores here."]
    return "\n".join(out + _not_measured(rows)) + "\n"


def plot_table2(rows: Sequence[ResultRow], out_path: str | Path) -> Path:
    plt = _pyplot()
    ok = [r for r in rows if r.ok and r.dataset == "all" and r.rtfx_end_to_end]
    ref = _flashlight_reference(ok).get("all")
    if ref is None:
        raise ValueError("plot_table2: no Flashlight 'all' row")
    ok.sort(key=lambda r: r.rtfx_end_to_end)
    fig, ax = plt.subplots(figsize=(6.5, 0.5 * len(ok) + 1.4))
    ys = list(range(len(ok)))
    vals = [r.rtfx_end_to_end for r in ok]
    ax.barh(ys, vals, color=["tab:orange" if r.decoder_name == "flashlight" else "tab:blue" for r in ok])
    for y, r, x in zip(ys, ok, vals):
        ax.text(x, y, f" {_rtfx(x)} ({x / ref.rtfx_end_to_end:.2f}× Flashlight)", va="center", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{_speed_label(r)}" for r in ok], fontsize=9)
    ax.set_xlabel("end-to-end RTFx (features + model + decoding), both test sets")
    ax.set_xlim(0, max(vals) * 1.7)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"Table 2 analogue (model on {ref.environment.get('gpu_name') or 'CPU'}, batch {ref.batch_size})",
                 fontsize=10)
    fig.tight_layout()
    return _save(plt, fig, out_path)


# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------

TITLES = {
    "table1_topology": "Table 1 analogue: WER by graph topology vs Flashlight",
    "fig6_boost": "Figure 6 analogue: word-boost magnitude sweep",
    "table3_speed": "Table 3 analogue: decoder-only speed-ups over Flashlight on one process",
    "table2_end_to_end": "Table 2 analogue: end-to-end RTFx, GPU WFST vs the Flashlight pipeline",
}


def render(exp_dir: str | Path) -> tuple[str, Path]:
    """report.md and <kind>.png of one experiment folder; returns (markdown, plot path)."""
    exp_dir = Path(exp_dir)
    kind, rows, boot = load_experiment(exp_dir)
    if kind == "table1_topology":
        body, plot = table1_markdown(rows, boot), plot_table1(rows, boot, exp_dir / f"{kind}.png")
    elif kind == "fig6_boost":
        body, plot = fig6_markdown(rows, boot), plot_fig6(rows, boot, exp_dir / f"{kind}.png")
    elif kind == "table2_end_to_end":
        body, plot = table2_markdown(rows), plot_table2(rows, exp_dir / f"{kind}.png")
    else:
        body, plot = table3_markdown(rows), plot_table3(rows, exp_dir / f"{kind}.png")
    env = next((r.environment for r in rows if r.environment), {})
    commits = sorted({str(r.environment.get("git_commit")) for r in rows if r.environment})
    foot = (f"\nRun directories: {', '.join(sorted({r.run for r in rows}))}. Measured on {env.get('cpu_model', '?')} "
            f"x{env.get('cpu_count', '?')}, GPU {env.get('gpu_name')}, commit{'s' if len(commits) > 1 else ''} "
            f"{', '.join(commits) or None}.\n")
    md = f"## {TITLES[kind]}\n\n{body.rstrip()}\n{foot}"
    (exp_dir / "report.md").write_text(md, encoding="utf-8")
    return md, plot


def experiment_dirs(path: str | Path) -> list[Path]:
    """`path` itself when it is an experiment folder, else the experiment folders directly under it."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no such directory: {path}")
    if any(path.glob("*/results.jsonl")):
        return [path]
    found = sorted(p for p in path.iterdir() if p.is_dir() and any(p.glob("*/results.jsonl")))
    if not found:
        raise ValueError(f"{path}: no experiment folders (folders of run directories) found")
    return found


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reports.paper", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", help="experiment folders, or a folder holding them")
    args = p.parse_args(argv)
    try:
        dirs = [d for path in args.paths for d in experiment_dirs(path)]
        for d in dirs:
            md, plot = render(d)
            print(md)
            print(f"wrote {d / 'report.md'} and {plot}\n")
    except (OSError, ValueError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
