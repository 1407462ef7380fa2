"""Plots from results rows (matplotlib, Agg backend: works headless)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from reports.tables import results_frame


def plot_wer_vs_rtfx(rows: Sequence[dict], out_path: str | Path, datasets: Optional[Sequence[str]] = None) -> Path:
    """WER (%) against decoder-only RTFx (log scale), one marker per decoder, one panel per dataset.
    The Pareto front of the paper's comparison: up-left is better."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = results_frame(rows)
    if df.empty:
        raise ValueError("plot_wer_vs_rtfx: no successful results to plot")
    if datasets is None:
        datasets = [d for d in dict.fromkeys(df["dataset"]) if d != "all"] or ["all"]
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 4), squeeze=False)
    for ax, d in zip(axes[0], datasets):
        sel = df[df["dataset"] == d]
        for _, r in sel.iterrows():
            ax.scatter(r["rtfx_decoder"], r["wer_pct"])
            ax.annotate(r["decoder"], (r["rtfx_decoder"], r["wer_pct"]), fontsize=8, xytext=(3, 3),
                        textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("RTFx (decoder only, log)")
        ax.set_ylabel("WER %")
        ax.set_title(d)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path


def plot_boost_sweep(rows: Sequence[dict], out_path: str | Path) -> Path:
    """WER against boost value per decoder (rows with a `boost_value`), as in the paper's Figure 6."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [r for r in rows if r.get("status", "ok") == "ok" and r.get("boost_value") is not None]
    if not pts:
        raise ValueError("plot_boost_sweep: no rows with a boost_value")
    fig, ax = plt.subplots(figsize=(5, 4))
    groups: dict = {}
    for r in pts:
        groups.setdefault((r["decoder_name"], r.get("device"), r["dataset"]), []).append(r)
    for (name, device, dataset), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["boost_value"])
        ax.plot([r["boost_value"] for r in rs], [100 * r["wer"] for r in rs], marker="o", label=f"{name} {dataset}")
    ax.set_xlabel("boost value (log domain)")
    ax.set_ylabel("WER %")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path
