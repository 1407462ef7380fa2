"""Plots that read (issue 13): on the log-RTFx axis only major ticks carry labels (no overlapping minor labels
2x10^2 3x10^2 ...), and point labels never overlap each other (points at the same spot share one label)."""
import dataclasses

from reports.plots import _pyplot, log_rtfx_axis, place_labels, plot_wer_vs_rtfx
from test_gate_compare import result_row


def _boxes(anns, renderer):
    return [a.get_window_extent(renderer) for a in anns]


def _overlap(a, b):
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_point_labels_do_not_overlap_and_coincident_points_share_one():
    """Regression: the demo's k2py, kaldi and wfst sit at one WER with nearby RTFx; their labels were drawn on top
    of each other."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    pts = [(262.2, 1.96), (1324, 1.96), (2454, 1.96), (2454, 1.96), (290.7, 2.35), (3424, 6.14), (83725, 6.27)]
    names = ["k2py", "kaldi", "wfst", "wfst@cuda", "flashlight", "ctc_beam", "greedy"]
    ax.scatter(*zip(*pts))
    ax.set_xscale("log")
    ax.set_xlim(100, 4e5)
    ax.set_ylim(1.5, 7)
    anns = place_labels(ax, pts, names)
    assert [a.get_text() for a in anns].count("wfst, wfst@cuda") == 1 and len(anns) == 6
    boxes = _boxes(anns, fig.canvas.get_renderer())
    assert not any(_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    plt.close(fig)


def test_narrow_log_rtfx_axis_labels_only_major_ticks():
    plt = _pyplot()
    fig, ax = plt.subplots()
    ax.scatter([210, 290, 470], [1, 2, 3])
    ax.set_xscale("log")
    log_rtfx_axis(ax)
    fig.canvas.draw()
    minor = [t.get_text() for t in ax.get_xticklabels(minor=True) if t.get_visible()]
    major = [t.get_text() for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
    assert all(m == "" for m in minor)
    assert {"200", "500"} <= set(major)
    plt.close(fig)


def test_wer_vs_rtfx_plot_renders_a_demo_like_run(tmp_path):
    rows = []
    for ds in ("clean", "other"):
        for dec, rtfx, errs in (("greedy", 83725.0, 60), ("flashlight", 290.7, 23), ("k2py", 262.2, 19),
                                ("kaldi", 1324.0, 19), ("wfst", 2454.0, 19), ("ctc_beam", 3424.0, 59)):
            rows.append(dataclasses.replace(result_row(dec, ds, errs, rtfx), rtfx_end_to_end=None))
    path = plot_wer_vs_rtfx(rows, tmp_path / "p.png")
    assert path.stat().st_size > 10_000


def test_sweep_and_run_labels_show_swept_values_and_utterance_counts():
    """Regression: rows of a sweep were labelled `wfst (20261201-040006)` and tables mixed 30-, 50- and 200-utterance
    runs without saying so."""
    from reports.sweeps import SweepJob, sweep_table
    from reports.tables import results_table

    def job(n, run):
        rows = [dataclasses.replace(result_row("wfst", ds, 5, 2000.0, utts=n, run=run, char_errors=7,
                                               ref_chars=5000), audio_seconds=n * 6.5) for ds in ("clean", "other")]
        return SweepJob(run_dir=None, rows=rows, job=0, overrides={"data.max_utterances": str(n)})

    jobs = [job(30, "data.max_utterances=30"), job(200, "data.max_utterances=200")]
    text = results_table([r for j in jobs for r in j.rows])
    assert "wfst (data.max_utterances=30)" in text and "clean utts" in text and "CER %" in text
    assert "differ between rows" in text
    sweep = sweep_table(jobs)
    assert sweep.splitlines()[0].startswith("| data.max_utterances | decoder | device | clean utts | clean WER % |")
    stamped = [dataclasses.replace(r, run=f"20261201-04000{i}") for i, j in enumerate(jobs) for r in j.rows]
    assert "repeat" in results_table(stamped)  # timestamps never become labels
