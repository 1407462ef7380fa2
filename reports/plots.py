"""Plots from result rows (`reports.schema.ResultRow`; matplotlib, Agg backend: works headless)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from reports.tables import (_ab_base_label, _group_key, _group_text, ab_arm_envs, ab_arm_rows, ok_rows, row_labels,
                            side_by_side_pairs)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out_path: str | Path) -> Path:
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=120, bbox_inches="tight")  # legends placed outside the axes stay in the image
    fig.clf()
    return out_path


def _fmt_tick(v: float, _pos=None) -> str:
    """A log-axis tick as a plain number: 200, 1k, 20k, 1.5M."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:g}{suffix}"
    return f"{v:g}"


def log_rtfx_axis(ax, axis: str = "x") -> None:
    """A log RTFx axis whose labels never overlap: labelled ticks at 1, 2 and 5 per decade when the data span less
    than two decades (1 per decade beyond), written as plain numbers (200, 1k, 2k); the minor ticks between them
    stay unlabelled. Matplotlib's default labels minor ticks on a narrow log axis, which overlapped (2x10^2
    3x10^2 ... on top of each other)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    decades = np.log10(max(hi, 1e-12) / max(lo, 1e-12))
    subs = (1.0, 2.0, 5.0) if decades < 2 else (1.0,)
    target.set_major_locator(LogLocator(base=10, subs=subs))
    target.set_major_formatter(FuncFormatter(_fmt_tick))
    target.set_minor_locator(LogLocator(base=10, subs=tuple(x for x in range(2, 10) if x not in subs)))
    target.set_minor_formatter(NullFormatter())


def place_labels(ax, points: Sequence[tuple[float, float]], texts: Sequence[str], fontsize: float = 8) -> list:
    """Annotate each point with its text so that no two labels overlap each other or a marker (greedy: each label
    tries offsets around its point, nearest first, and takes the first free one; points at the same spot share one
    label). Returns the annotations."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    to_px = ax.transData.transform
    # points that coincide on screen (within 4 px) get one label: "k2py, kaldi, wfst"
    groups: list[tuple[np.ndarray, tuple[float, float], list[str]]] = []
    for (x, y), t in zip(points, texts):
        px = to_px((x, y))
        for g in groups:
            if np.hypot(*(g[0] - px)) < 4:
                g[2].append(t)
                break
        else:
            groups.append((px, (x, y), [t]))
    marker_boxes = [(px[0] - 5, px[1] - 5, px[0] + 5, px[1] + 5) for px, _, _ in groups]
    placed: list[tuple[float, float, float, float]] = []
    axes_box = ax.get_window_extent(renderer)
    offsets = [(dx * r, dy * r) for r in (1, 2, 3, 4, 6)
               for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1))]
    out = []

    def overlaps(b, others):
        return any(b[0] < o[2] and o[0] < b[2] and b[1] < o[3] and o[1] < b[3] for o in others)

    for px, xy, names in groups:
        text = ", ".join(dict.fromkeys(names))
        ann = ax.annotate(text, xy, fontsize=fontsize, xytext=(4, 4), textcoords="offset points")
        chosen = None
        for dx, dy in offsets:
            ha = "left" if dx >= 0 else "right"
            va = "bottom" if dy >= 0 else "top"
            ann.set_position((dx * 5, dy * 5))
            ann.set_ha(ha)
            ann.set_va(va)
            bb = ann.get_window_extent(renderer)
            box = (bb.x0 - 1, bb.y0 - 1, bb.x1 + 1, bb.y1 + 1)
            inside = box[0] >= axes_box.x0 and box[2] <= axes_box.x1 and box[1] >= axes_box.y0 and box[3] <= axes_box.y1
            if inside and not overlaps(box, placed) and not overlaps(box, marker_boxes):
                chosen = box
                break
        if chosen is None:  # crowded: the first free spot ignoring the axes' edge, else the default
            for dx, dy in offsets:
                ann.set_position((dx * 5, dy * 5))
                ann.set_ha("left" if dx >= 0 else "right")
                ann.set_va("bottom" if dy >= 0 else "top")
                bb = ann.get_window_extent(renderer)
                box = (bb.x0 - 1, bb.y0 - 1, bb.x1 + 1, bb.y1 + 1)
                if not overlaps(box, placed) and not overlaps(box, marker_boxes):
                    chosen = box
                    break
        if chosen is None:
            bb = ann.get_window_extent(renderer)
            chosen = (bb.x0, bb.y0, bb.x1, bb.y1)
        placed.append(chosen)
        out.append(ann)
    return out


def plot_wer_vs_rtfx(rows: Sequence[Any], out_path: str | Path, datasets: Optional[Sequence[str]] = None) -> Path:
    """WER (%) against decoder-only RTFx (log scale), one marker per decoder, one panel per dataset.
    The Pareto front of the paper's comparison: up-left is better. Rows without references (wer null) or
    without an RTFx have no point."""
    plt = _pyplot()
    rows = [r for r in ok_rows(rows) if r.wer is not None and r.rtfx_decoder]
    if not rows:
        raise ValueError("plot_wer_vs_rtfx: no successful rows with both a WER and an RTFx to plot")
    labels = row_labels(rows)
    if datasets is None:
        datasets = [d for d in dict.fromkeys(str(r.dataset) for r in rows) if d != "all"] or ["all"]
    # few points: labels beside them; many (a benchmark's graph x batch grid): a legend under the panel
    most = max(sum(1 for r in rows if r.dataset == d) for d in datasets)
    inline = most <= 8
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 4.5 if inline else max(4.5, 0.25 * most)),
                             squeeze=False)
    markers = "osD^v<>pPX*h"
    for ax, d in zip(axes[0], datasets):
        pts = [r for r in rows if r.dataset == d]
        for i, r in enumerate(pts):
            ax.scatter(r.rtfx_decoder, 100 * r.wer, marker=markers[i % len(markers)], s=40,
                       label=None if inline else labels[_group_key(r)])
        if not inline:
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
        n = sorted({r.utterances for r in pts})
        ax.set_xscale("log")
        # room for labels: a quarter decade either side, 15 % of the WER range above and below
        xs, ys = [r.rtfx_decoder for r in pts], [100 * r.wer for r in pts]
        ax.set_xlim(min(xs) / 10 ** 0.35, max(xs) * 10 ** 0.6)
        span = max(max(ys) - min(ys), 0.5)
        ax.set_ylim(max(0.0, min(ys) - 0.15 * span), max(ys) + 0.15 * span)
        log_rtfx_axis(ax, "x")
        ax.set_xlabel("RTFx (decoder only, log)")
        ax.set_ylabel("WER %")
        ax.set_title(f"{d} ({'/'.join(map(str, n))} utterances)")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    if inline:
        for ax, d in zip(axes[0], datasets):
            pts = [r for r in rows if r.dataset == d]
            place_labels(ax, [(r.rtfx_decoder, 100 * r.wer) for r in pts], [labels[_group_key(r)] for r in pts])
    try:
        return _save(fig, out_path)
    finally:
        plt.close(fig)


def plot_boost_sweep(rows: Sequence[Any], out_path: str | Path) -> Path:
    """WER against boost value per decoder (rows with a `boost_value`), as in the paper's Figure 6."""
    plt = _pyplot()
    pts = [r for r in ok_rows(rows) if r.boost_value is not None and r.wer is not None]
    if not pts:
        raise ValueError("plot_boost_sweep: no rows with a boost_value and a WER")
    fig, ax = plt.subplots(figsize=(5, 4))
    groups: dict = {}
    for r in pts:
        groups.setdefault((r.decoder_name, r.device, r.dataset), []).append(r)
    for (name, device, dataset), rs in groups.items():
        rs = sorted(rs, key=lambda r: r.boost_value)
        ax.plot([r.boost_value for r in rs], [100 * r.wer for r in rs], marker="o", label=f"{name} {dataset}")
    ax.set_xlabel("boost value (log domain)")
    ax.set_ylabel("WER %")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    try:
        return _save(fig, out_path)
    finally:
        plt.close(fig)


def _varying_names(by: Sequence[str], pairs: Sequence[Any]) -> list[str]:
    """Per pair: the grouping coordinates whose value differs between pairs (k=v, comma-separated), then the
    boundary and dataset when several occur."""
    groups = [dict(zip(by, p.group)) for p in pairs]
    varying = [k for k in by if len({str(g.get(k)) for g in groups}) > 1]
    several_b = len({p.ours.boundary for p in pairs}) > 1
    several_ds = len({p.dataset for p in pairs}) > 1
    out = []
    for g, p in zip(groups, pairs):
        # a coordinate this pair lacks (None) is not named; long free-text values (notes) stay in the table
        parts = [f"{k}={g.get(k)}" for k in varying if k not in ("boundary", "dataset")
                 and g.get(k) not in (None, "None", "–") and len(str(g.get(k))) <= 24]
        if several_b and "boundary" not in varying:
            parts.append(p.ours.boundary)
        if several_ds and "dataset" not in varying:
            parts.append(str(p.dataset))
        out.append(", ".join(parts) or "all")
    return out


def side_by_side_series(rows: Sequence[Any], ours: str, theirs: str, by: Optional[Sequence[str]] = None) -> dict:
    """What `plot_side_by_side` draws: per paired group (both RTFx measured) its name, both decoders' RTFx and the
    ratio, and, where the run holds an in-process A/B arm of ours (`--ab-env`), the arm's RTFx and its ratio over
    the same competitor row (None where a group has no arm); `arm` names the arm's switches ("" when none)."""
    by, all_pairs = side_by_side_pairs(rows, ours, theirs, by)
    pairs = [p for p in all_pairs if p.ratio is not None]
    envs = ab_arm_envs(rows)  # a run of several arms: the first is drawn, the A/B table lists them all
    arms = ab_arm_rows(rows, [p.ours for p in pairs], envs[0] if envs else None)
    drawn = envs[0] if any(a is not None for a in arms) else ""
    return {
        "names": _varying_names(by, pairs) if pairs else [],
        "ours": [p.ours.rtfx_decoder for p in pairs],
        "theirs": [p.theirs.rtfx_decoder for p in pairs],
        "ratio": [p.ratio for p in pairs],
        "arm": [None if a is None else a.rtfx_decoder for a in arms],
        "arm_ratio": [None if a is None else a.rtfx_decoder / p.theirs.rtfx_decoder for a, p in zip(arms, pairs)],
        "arm_name": drawn + (f" (1 of {len(envs)} arms; all in the A/B table)" if drawn and len(envs) > 1 else ""),
        # groups not drawn: no competitor RTFx, and not an A/B arm's row (drawn beside its defaults row, or in the
        # A/B table)
        "unpaired": sum(1 for p in all_pairs if p.ratio is None and _ab_base_label(p.ours) is None),
        "boundaries": sorted({p.ours.boundary for p in pairs}),
    }


def plot_side_by_side(rows: Sequence[Any], ours: str, theirs: str, out_path: str | Path,
                      by: Optional[Sequence[str]] = None) -> Path:
    """Two panels per group of grouping coordinates: both decoders' decoder-only RTFx (log bars) and the ratio
    ours / theirs (bars, the 1x line marks parity); an in-process A/B arm of ours, where the run has one, as a third
    bar and a second ratio bar against the same competitor row. Pairing rules as
    `reports.tables.side_by_side_table`; the values are `side_by_side_series`'."""
    plt = _pyplot()
    d = side_by_side_series(rows, ours, theirs, by)
    if not d["ratio"]:
        raise ValueError(f"plot_side_by_side: no {ours}/{theirs} pair with both RTFx measured")
    has_arm = any(v is not None for v in d["arm"])
    arm_label = f"{ours} [{d['arm_name']}]"
    # horizontal bars, one line per group: readable for a benchmark's dozens of shapes. A group is named by the
    # coordinates that vary between the plotted pairs (constant ones go to the title), plus the boundary and
    # dataset when those vary.
    names = d["names"]
    n = len(names)
    y = list(range(n))[::-1]  # first group on top
    height = max(3.0, (0.42 if has_arm else 0.32) * n + 1.2)
    fig, (ax_r, ax_q) = plt.subplots(1, 2, figsize=(13, height), sharey=True)
    series = [("ours", "tab:blue", ours), ("theirs", "tab:gray", theirs)]
    if has_arm:
        series.insert(1, ("arm", "tab:orange", arm_label))
    w = 0.8 / len(series)
    for k, (key, color, name) in enumerate(series):
        shift = (len(series) - 1) / 2 * w - k * w
        pts = [(i + shift, v) for i, v in zip(y, d[key]) if v is not None]
        bars = ax_r.barh([p[0] for p in pts], [p[1] for p in pts], w, label=name, color=color)
        for b, (_, v) in zip(bars, pts):  # log bars hide magnitudes: print them
            ax_r.annotate(f"{v:,.0f}", (v, b.get_y() + b.get_height() / 2), va="center", fontsize=6,
                          xytext=(2, 0), textcoords="offset points")
    ax_r.set_xscale("log")
    log_rtfx_axis(ax_r, "x")
    ax_r.set_xlabel("RTFx (decoder only, log)")
    # room for the printed magnitudes right of the longest bar, the legend in that margin's corner above the bars
    top = max(v for key in ("ours", "theirs", "arm") for v in d[key] if v is not None)
    ax_r.set_xlim(right=top * 3.0)
    ax_r.legend(fontsize=8, loc="upper right", framealpha=0.9)
    ratio_series = [("ratio", None, ours)] + ([("arm_ratio", "tab:orange", arm_label)] if has_arm else [])
    wq = 0.6 / len(ratio_series)
    all_q = []
    for k, (key, color, name) in enumerate(ratio_series):
        shift = (len(ratio_series) - 1) / 2 * wq - k * wq
        pts = [(i + shift, q) for i, q in zip(y, d[key]) if q is not None]
        qs = [p[1] for p in pts]
        all_q += qs
        colors = color or ["tab:green" if q >= 1 else "tab:red" for q in qs]
        bars = ax_q.barh([p[0] for p in pts], qs, wq, color=colors, label=f"{name} / {theirs}")
        for b, q in zip(bars, qs):
            ax_q.annotate(f"{q:.2f}x", (q, b.get_y() + b.get_height() / 2), va="center", fontsize=7,
                          xytext=(2, 0), textcoords="offset points")
    ax_q.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    if has_arm:
        ax_q.legend(fontsize=7, loc="lower right", framealpha=0.9)
    ax_q.set_xlabel(f"{ours} RTFx / {theirs} RTFx")
    ax_q.set_xlim(0, max(all_q + [1.0]) * 1.18)
    ax_r.set_yticks(y)
    ax_r.set_yticklabels(names, fontsize=7)
    for ax in (ax_r, ax_q):
        ax.grid(True, axis="x", alpha=0.3)
    title = f"{ours} vs {theirs}, same run ({'/'.join(d['boundaries'])} boundary)"
    if has_arm:
        title += f"; A/B arm {d['arm_name']} against the same {theirs} rows"
    if d["unpaired"]:
        title += f"; {d['unpaired']} group(s) without a {theirs} RTFx not shown"
    fig.suptitle(title, fontsize=10 if has_arm else 12)
    fig.tight_layout()
    try:
        return _save(fig, out_path)
    finally:
        plt.close(fig)
