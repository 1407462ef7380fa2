"""Streaming results: latency summaries, the M/D/1 model beside the measurement (the paper's Table 4 analysis), the
serving table and the memory-over-time plot. Pure functions over recorded values and result rows (no torch).

M/D/1 (seed 004, "a basic observation from queueing theory"): one server with a deterministic service time D
(the compute latency) and Poisson arrivals at rate lambda. Utilisation rho = lambda D; mean queue wait
W_q = rho D / (2 (1 - rho)); mean total latency D + W_q. The wait grows without bound as rho -> 1 (queues grow: the
server does not keep up). For a dynamic batcher a "request" is one dispatched batch (its compute latency is D,
lambda the dispatch rate); for a pool of per-stream-affine CPU workers each worker is its own M/D/1 server.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from reports.plots import _pyplot, _save

PERCENTILES = (50, 90, 99)


def latency_summary(values_s: Sequence[float], prefix: str) -> dict:
    """{prefix_mean_ms, prefix_p50_ms, prefix_p90_ms, prefix_p99_ms} of latencies in seconds (nearest-rank
    percentiles; empty input gives no keys)."""
    vals = sorted(float(v) for v in values_s)
    if not vals:
        return {}
    out = {f"{prefix}_mean_ms": 1000.0 * sum(vals) / len(vals)}
    for p in PERCENTILES:
        k = max(0, min(len(vals) - 1, math.ceil(p / 100.0 * len(vals)) - 1))
        out[f"{prefix}_p{p}_ms"] = 1000.0 * vals[k]
    return out


def md1_queue_wait_s(arrival_rate_hz: float, service_s: float) -> float:
    """Mean queue wait of an M/D/1 server (inf when rho >= 1)."""
    rho = arrival_rate_hz * service_s
    if rho >= 1.0:
        return math.inf
    return rho * service_s / (2.0 * (1.0 - rho))


def serving_table(rows: Sequence[Any]) -> str:
    """Markdown: per serving configuration, latencies measured (compute / queue / total) beside the M/D/1
    prediction, sustained RTFx and whether it kept up (rows written by eval.bench.wfst_stream_bench serve)."""
    head = ("| configuration | streams | arrivals | compute mean / p99 ms | queue mean / p99 ms | total mean / p50 / "
            "p90 / p99 ms | M/D/1 total ms | utilisation | sustained RTFx | kept up |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        s = r.decoder_stats if hasattr(r, "decoder_stats") else r.get("decoder_stats", {})
        p = r.params if hasattr(r, "params") else r.get("params", {})
        if not s or "total_mean_ms" not in s:
            continue
        name = r.decoder if hasattr(r, "decoder") else r.get("decoder")

        def f(key, fmt="{:.1f}"):
            v = s.get(key)
            return "—" if v is None else ("∞" if v == math.inf else fmt.format(v))

        lines.append(
            f"| {name} | {p.get('streams', '')} | {p.get('arrivals', '')} | {f('compute_mean_ms')} / {f('compute_p99_ms')} | "
            f"{f('queue_mean_ms')} / {f('queue_p99_ms')} | {f('total_mean_ms')} / {f('total_p50_ms')} / "
            f"{f('total_p90_ms')} / {f('total_p99_ms')} | {f('md1_total_ms')} | {f('utilisation', '{:.2f}')} | "
            f"{f('sustained_rtfx', '{:.1f}')} | {_kept(s)} |")
    return "\n".join(lines)


def _kept(s: dict) -> str:
    if s.get("kept_up"):
        return "yes"
    if s.get("aborted_at_s") is not None:  # the benchmark ended the run early (--give-up-s): it was falling behind
        return f"no (ended at {s['aborted_at_s']:.1f} s)"
    return "no"


def plot_memory_over_time(series: dict, out_path: str | Path) -> Path:
    """series: {"label": {"audio_s": [...], "mib": [...]}, ...} -> one line per label (memory vs stream time)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, s in series.items():
        ax.plot([t / 60.0 for t in s["audio_s"]], s["mib"], label=label)
    ax.set_xlabel("stream audio decoded (minutes)")
    ax.set_ylabel("MiB")
    ax.set_title("Streaming WFST decoder memory over a stream")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out_path)


def is_serving(rows: Sequence[Any]) -> bool:
    """Rows of the serving benchmark (eval.bench.wfst_stream_bench serve / sweep)?"""
    return any((getattr(r, "decoder_stats", None) or {}).get("total_mean_ms") is not None for r in rows)


def plot_serving_latency(rows: Sequence[Any], out_path: str | Path) -> Path:
    """The Table 4 picture: total latency (mean solid, p99 dashed, the M/D/1 prediction dotted) against the number
    of concurrent real-time streams, one colour per configuration (decoder_name, + the arrival process); a run
    that did not keep up is an open marker, and its mean is drawn where it was measured before it was ended."""
    groups: dict[str, list] = {}
    for r in rows:
        s = getattr(r, "decoder_stats", None) or {}
        p = getattr(r, "params", None) or {}
        if s.get("total_mean_ms") is None or not p.get("streams"):
            continue
        groups.setdefault(f"{r.decoder_name} ({p.get('arrivals', 'periodic')})", []).append((int(p["streams"]), s, p))
    if not groups:
        raise ValueError("no serving rows (decoder_stats.total_mean_ms with params.streams)")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    period = None
    for i, (label, pts) in enumerate(sorted(groups.items())):
        pts.sort(key=lambda t: t[0])
        c = f"C{i}"
        n = [t[0] for t in pts]
        ax.plot(n, [t[1]["total_mean_ms"] for t in pts], "-", color=c, label=f"{label}: mean")
        ax.plot(n, [t[1].get("total_p99_ms", math.nan) for t in pts], "--", color=c, alpha=0.7, label=f"{label}: p99")
        ax.plot(n, [t[1].get("md1_total_ms", math.nan) for t in pts], ":", color=c, alpha=0.7,
                label=f"{label}: M/D/1")
        for x, s, _ in pts:
            kept = bool(s.get("kept_up"))
            ax.plot([x], [s["total_mean_ms"]], "o", color=c, mfc=c if kept else "white", ms=6)
        period = period or next((t[2].get("chunk_ms") for t in pts if t[2].get("chunk_ms")), None)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if period:
        ax.axhline(float(period), color="grey", lw=0.8, alpha=0.6)
        ax.text(ax.get_xlim()[0], float(period), f" chunk period {period} ms", va="bottom", fontsize=7, color="grey")
    ax.set_xlabel("concurrent real-time streams")
    ax.set_ylabel("latency per chunk (ms)")
    ax.set_title("Streaming latency vs load (open marker: did not keep up)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, out_path)


def plot_serving_timeline(timelines: dict, out_path: str | Path) -> Path:
    """Total latency over a serving run (serving_timeline.json of eval.bench.wfst_stream_bench: per configuration
    the chunks bucketed by arrival time, mean solid, p99 dashed): a queue that grows is a curve that rises."""
    lines = {k: v for k, v in (timelines or {}).items() if v.get("t_s")}
    if not lines:
        raise ValueError("no serving timeline (serving_timeline.json with t_s per configuration)")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, (label, tl) in enumerate(sorted(lines.items())):
        c = f"C{i % 10}"
        ax.plot(tl["t_s"], tl["mean_ms"], "-", color=c, label=f"{label}: mean")
        ax.plot(tl["t_s"], tl["p99_ms"], "--", color=c, alpha=0.7, label=f"{label}: p99")
    ax.set_yscale("log")
    ax.set_xlabel("time in the run (s, by chunk arrival)")
    ax.set_ylabel("total latency per chunk (ms)")
    ax.set_title("Serving latency over the run (a growing queue rises)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, out_path)
