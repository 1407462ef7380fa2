"""The streaming benchmark's pieces (eval/bench/wfst_stream_bench.py, reports/streaming.py): M/D/1, latency
summaries, serving statistics, stream construction; and a tiny end-to-end serve run on the CPU (slow)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from eval.bench.common import LogProbSet
from eval.bench.wfst_stream_bench import ServeResult, build_streams, serving_stats
from reports.streaming import latency_summary, md1_queue_wait_s, serving_table


def test_md1_wait_matches_the_formula_and_diverges_at_full_load():
    # lambda = 10/s, D = 50 ms: rho = 0.5, W_q = rho D / (2 (1 - rho)) = 25 ms
    assert md1_queue_wait_s(10.0, 0.05) == pytest.approx(0.025)
    assert md1_queue_wait_s(0.0, 0.05) == 0.0
    assert md1_queue_wait_s(20.0, 0.05) == math.inf
    # quadratic growth in D at fixed lambda (the paper's point): doubling D more than doubles the wait
    assert md1_queue_wait_s(5.0, 0.1) > 2 * md1_queue_wait_s(5.0, 0.05)


def test_latency_summary_nearest_rank():
    s = latency_summary([i / 1000 for i in range(1, 101)], "total")  # 1..100 ms
    assert s["total_mean_ms"] == pytest.approx(50.5)
    assert s["total_p50_ms"] == pytest.approx(50.0) and s["total_p90_ms"] == pytest.approx(90.0)
    assert s["total_p99_ms"] == pytest.approx(99.0)
    assert latency_summary([], "x") == {}


def _result(arrival, dispatch, done, backlog=0, wall=None, ends=None, sizes=None):
    comp = [d - s for d, s in zip(done, dispatch)]
    return ServeResult(arrival, dispatch, done, sizes or [1] * len(done), comp, [""], wall or max(done),
                       ends if ends is not None else max(arrival), backlog, sum(comp))


def test_serving_stats_split_latency_and_detect_a_growing_queue():
    # a server that keeps up: every chunk served 5 ms after it arrived, 2 ms of compute
    arr = [0.4 * k for k in range(1, 101)]
    ok = serving_stats(_result(arr, [a + 0.003 for a in arr], [a + 0.005 for a in arr]), 1, 40.0)
    assert ok["queue_mean_ms"] == pytest.approx(3.0) and ok["compute_mean_ms"] == pytest.approx(2.0)
    assert ok["total_p99_ms"] == pytest.approx(5.0) and ok["kept_up"] == 1
    assert ok["utilisation"] == pytest.approx(100 * 0.002 / arr[-1])
    # a server that takes 0.5 s per 0.4 s chunk: the queue grows, latency climbs, it does not keep up
    done, t = [], 0.0
    for a in arr:
        t = max(t, a) + 0.5
        done.append(t)
    slow = serving_stats(_result(arr, [d - 0.5 for d in done], done, backlog=20, wall=done[-1]), 1, 40.0)
    assert slow["kept_up"] == 0 and slow["late_over_early_latency"] > 2 and slow["md1_total_ms"] == math.inf
    table = serving_table([type("R", (), {"decoder": "x", "decoder_stats": slow, "params": {"streams": 1}})()])
    assert "| x | 1 |" in table and "∞" in table


def test_streams_are_whole_utterances_in_order():
    lengths = torch.tensor([5, 3, 7, 0, 4])
    V = 3
    lp = torch.arange(5 * 7 * V, dtype=torch.float32).reshape(5, 7, V)
    data = LogProbSet(log_probs=lp, lengths=lengths, refs=["a", "b", "c", "", "d"], durations=[0.2] * 5,
                      ids=[str(i) for i in range(5)], tokens=["x", "y", "_"], blank_id=2)
    st = build_streams(data, 2, 12, chunk_frames=4)
    assert st.refs[0] == "a b" and [len(s) for s in st.segments[0]] == [5, 3]
    assert st.chunks[0] == [(0, 0, 4), (0, 4, 1), (1, 0, 3)]  # chunks never straddle an utterance
    x, n = st.chunk([0, 0], [1, 2])
    assert n.tolist() == [1, 3]
    assert torch.equal(x[0, 0], lp[0, 4]) and torch.equal(x[1, :3], lp[1, :3]) and not x[0, 1:].any()
    assert st.last_of_segment(0, 1) and st.first_of_segment(0, 2) and not st.last_of_segment(0, 0)
    one = build_streams(data, 1, 12, chunk_frames=4, segmented=False)
    assert len(one.segments[0]) == 1 and one.frames(0) == 8


def test_an_aborted_run_did_not_keep_up_and_says_when():
    # a server still serving 5 ms after arrival, but ended at 2.0 s by --give-up-s: not kept up, no sustained RTFx
    arr = [0.4 * k for k in range(1, 6)]
    r = ServeResult(arr, [a + 0.003 for a in arr], [a + 0.005 for a in arr], [1] * 5, [0.002] * 5, [""], 2.0, 40.0, 3,
                    0.01, aborted_at_s=2.0, served_frames=50)
    st = serving_stats(r, 1, 40.0)
    assert st["kept_up"] == 0 and st["aborted_at_s"] == 2.0 and "sustained_rtfx" not in st
    table = serving_table([type("R", (), {"decoder": "x", "decoder_stats": st, "params": {"streams": 1}})()])
    assert "no (ended at 2.0 s)" in table and "| — |" in table


def test_flashlight_weights_harness_or_matched_to_the_wfst_objective():
    from argparse import Namespace

    from eval.bench import wfst_stream_bench as bench

    args = Namespace(fl_beam_size=32, fl_lm_weight=0.5, fl_word_score=2.0, fl_matched=False)
    assert bench.flashlight_cfg(args)["lm_weight"] == 0.5 and bench.flashlight_cfg(args)["word_score"] == 2.0
    old = bench.SETTINGS["acoustic_scale"]
    try:  # the WFST scores acoustic_scale x acoustic + LM: Flashlight's LM weight 1/acoustic_scale, no word score
        bench.SETTINGS["acoustic_scale"] = 3.0
        cfg = bench.flashlight_cfg(Namespace(**{**vars(args), "fl_matched": True}))
        assert cfg["lm_weight"] == pytest.approx(1 / 3) and cfg["word_score"] == 0.0
    finally:
        bench.SETTINGS["acoustic_scale"] = old


def test_segment_refs_follow_the_segments():
    lengths = torch.tensor([5, 3, 0, 4])
    data = LogProbSet(log_probs=torch.zeros(4, 5, 3), lengths=lengths, refs=["a", "b", "", "d"], durations=[0.2] * 4,
                      ids=[str(i) for i in range(4)], tokens=["x", "y", "_"], blank_id=2)
    st = build_streams(data, 2, 12, chunk_frames=4)
    assert st.segment_refs[0] == ["a", "b", "d"] and len(st.segments[0]) == 3  # the 0-frame utterance is skipped
    assert " ".join(st.segment_refs[1]) == st.refs[1] and len(st.segment_refs[1]) == len(st.segments[1])
    assert build_streams(data, 1, 12, chunk_frames=4, segmented=False).segment_refs[0] == ["a b d"]


@pytest.mark.slow
def test_sweep_end_to_end_on_cpu_with_give_up(tmp_path, demo_bpe_compact_dir):
    """The tiny workload's BPE compact TLG: a sweep of our decoder (CPU reference) and Flashlight on one process,
    where Flashlight at 96 streams falls behind and is ended early; the run directory says what each sustained."""
    import json

    pytest.importorskip("flashlight.lib.text.decoder")
    from eval.bench import wfst_stream_bench as bench

    rc = bench.main(["sweep", "--device", "cpu", "--decoders", "wfst", "flashlight", "--streams", "2",
                     "--fl-streams", "2", "400", "--fl-processes", "1", "--fl-matched", "--duration", "3",
                     "--give-up-s", "0.5", "--max-utts", "20", "--graph-dir", str(demo_bpe_compact_dir),
                     "--output-dir", str(tmp_path), "--run", "t"])
    assert rc == 0
    run = tmp_path / "wfst_stream" / "t"
    largest = json.loads((run / "largest_sustained.json").read_text())
    assert largest["wfst"]["largest_sustained"] == 2 and largest["flashlight"]["first_not_sustained"] == 400
    assert largest["ratio"]["at_least"] == pytest.approx(2 / 400)
    assert "no (ended at" in (run / "serving.md").read_text()
    timeline = json.loads((run / "serving_timeline.json").read_text())  # one per configuration and N
    assert len(timeline) == 3 and all(sum(t["chunks"]) > 0 for t in timeline.values()), timeline
    from reports.cli import main as report

    assert report([str(run)]) == 0 and (run / "serving_timeline.png").stat().st_size > 0


def test_flashlight_pool_loads_once_and_serves_runs_alike(demo_bpe_compact_dir):
    """A sweep's Flashlight pool: the same worker processes serve every run (loaded once), the log-probs reach
    them through shared memory, and a second run of the same streams gives the same words as the first and as a
    pool of its own."""
    from argparse import Namespace

    pytest.importorskip("flashlight.lib.text.decoder")
    from eval.bench import wfst_stream_bench as bench
    from eval.bench.common import workload_set

    data = workload_set("tiny", "bpe", "other", 6)
    args = Namespace(scale="tiny", graph_dir=str(demo_bpe_compact_dir), fl_matched=True,
                     fl_beam_size=50, fl_lm_weight=0.5, fl_word_score=2.0)
    streams = bench.build_streams(data, 3, 150, 10)
    sched = bench.arrival_times(streams, 0.0, "periodic", 0)  # every chunk at once: as fast as possible
    ctx = bench.flashlight_context(args, data)
    with bench.FlashlightPool(ctx, 2, bench.flashlight_cfg(args)) as pool:
        pids = [p.pid for p in pool.procs]
        first, _ = pool.serve(streams, sched)
        again, _ = pool.serve(streams, sched)
        assert [p.pid for p in pool.procs] == pids and all(p.is_alive() for p in pool.procs)
    assert streams._flat0.is_shared() and streams.flat.data_ptr() == streams._flat0.data_ptr()
    own, _ = bench.serve_flashlight(streams, sched, ctx, 2, bench.flashlight_cfg(args))
    assert first.hyps == again.hyps == own.hyps and any(first.hyps)
    assert len(first.done) == sum(streams.num_chunks(s) for s in range(3))


def test_serving_latency_plot_from_serving_rows_only(tmp_path):
    """reports.cli draws serving_latency.png for serving rows (one line per configuration), and refuses rows
    without serving statistics in one line."""
    from types import SimpleNamespace

    from reports.streaming import is_serving, plot_serving_latency

    def row(name, n, mean, kept):
        return SimpleNamespace(decoder_name=name, params={"streams": n, "arrivals": "periodic", "chunk_ms": 400},
                               decoder_stats={"total_mean_ms": mean, "total_p99_ms": 3 * mean,
                                              "md1_total_ms": 0.8 * mean, "kept_up": kept})
    rows = [row("wfst_stream", 512, 6.0, 1), row("wfst_stream", 1024, 6.5, 1), row("flashlight_stream", 96, 47.0, 1),
            row("flashlight_stream", 192, 650.0, 0)]
    assert is_serving(rows)
    out = plot_serving_latency(rows, tmp_path / "serving_latency.png")
    assert out.is_file() and out.stat().st_size > 10_000
    plain = [SimpleNamespace(decoder_name="wfst", params={}, decoder_stats={"rtfx": 1.0})]
    assert not is_serving(plain)
    with pytest.raises(ValueError, match="no serving rows"):
        plot_serving_latency(plain, tmp_path / "x.png")


def test_stream_gpu_run_refuses_speech_log_probs_on_graphs_the_model_cannot_read(tmp_path):
    """stream_gpu_run.sh SOURCE=speech: the Conformer-CTC emits the tiny workload's BPE pieces, so any other scale is a
    one-line refusal (exit 2) before anything is built; an unknown SOURCE too."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "eval" / "bench" / "stream_gpu_run.sh"
    for env, needle in (({"SOURCE": "speech", "SCALE": "bench"}, "SOURCE=speech needs SCALE=tiny"),
                        ({"SOURCE": "asr", "SCALE": "tiny"}, "SOURCE must be simulator or speech")):
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"), **env})
        assert proc.returncode == 2, (env, proc.stdout, proc.stderr)
        assert needle in proc.stdout + proc.stderr
        assert not (tmp_path / "out").exists()  # refused before the output folder was made


def test_latency_timeline_is_flat_when_the_server_keeps_up_and_rises_when_it_falls_behind(tmp_path):
    """latency_timeline buckets chunks by arrival: a server that keeps up gives the same latency in every window,
    one whose queue grows gives a rising mean; a run with no chunks has no windows; the plot draws both."""
    from eval.bench.wfst_stream_bench import latency_timeline
    from reports.streaming import plot_serving_timeline

    arr = [0.4 * i for i in range(300)]
    steady = latency_timeline(_result(arr, [a + 0.002 for a in arr], [a + 0.006 for a in arr]), windows=10)
    assert len(steady["t_s"]) == 10 and sum(steady["chunks"]) == 300
    assert steady["mean_ms"] == pytest.approx([6.0] * 10) and steady["window_s"] == pytest.approx(299 * 0.4 / 10)
    done = [a + 0.01 + 0.001 * i for i, a in enumerate(arr)]  # each chunk waits 1 ms longer than the one before
    growing = latency_timeline(_result(arr, done, done), windows=10)
    assert all(b > a for a, b in zip(growing["mean_ms"], growing["mean_ms"][1:])), growing["mean_ms"]
    empty = latency_timeline(ServeResult([], [], [], [], [], [], 0.0, 0.0, 0, 0.0))
    assert empty["t_s"] == [] and empty["chunks"] == []
    out = plot_serving_timeline({"steady": steady, "growing": growing}, tmp_path / "t.png")
    assert out.stat().st_size > 0
    with pytest.raises(ValueError, match="no serving timeline"):
        plot_serving_timeline({"empty": empty}, tmp_path / "x.png")
