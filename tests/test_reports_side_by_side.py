"""Side-by-side ratio tables and plots over run-mate rows (ours vs Riva per graph and batch, ours vs the seed
system's decoder per shape): pairing by run_mate and params, refusal to pair unlike rows, the CLI renders them."""
import dataclasses

import pytest

from reports.cli import main
from reports.plots import plot_side_by_side
from reports.tables import run_mate_pairs, side_by_side_table
from test_gate_compare import _bench_rows, result_row, rows_file


def _wfst_vs_riva():
    """Ours and Riva on two graphs at two batch sizes; Riva has no HLG row (it takes only a TLG)."""
    rows = []
    for graph, ours_rtfx, riva_rtfx in (("compact TLG", 1220.0, 1000.0), ("compact HLG", 5900.0, None)):
        for batch in (32, 200):
            common = dict(dataset="test-other", params={"graph": graph}, batch_size=batch, device="cuda",
                          hw="gpu:NVIDIA H200", errors=150, utts=200, cuda_peak_bytes=100 * 2**20)
            rows.append(result_row(f"wfst@cuda[batch={batch}]", rtfx=ours_rtfx * batch / 32, decoder_name="wfst",
                                   run_mate=f"riva@cuda[batch={batch}]", overflow_count=18, rescued_count=18,
                                   **common))
            if riva_rtfx is not None:
                rows.append(result_row(f"riva@cuda[batch={batch}]", rtfx=riva_rtfx, decoder_name="riva",
                                       run_mate=f"wfst@cuda[batch={batch}]", **{**common, "errors": 148}))
    return rows


def _line(table, start):
    return next(line for line in table.splitlines() if line.startswith(start)).split(" | ")


def test_wfst_vs_riva_per_graph_and_batch():
    table = side_by_side_table(_wfst_vs_riva(), "wfst", "riva")
    header = table.splitlines()[0].split(" | ")
    assert header[:5] == ["| graph", "batch_size", "dataset", "boundary", "utts"]
    tlg32 = _line(table, "| compact TLG | 32 |")
    col = {h.strip("| "): i for i, h in enumerate(header)}
    assert tlg32[col["wfst RTFx"]] == "1,220" and tlg32[col["riva RTFx"]] == "1,000"
    assert tlg32[col["x riva"]] == "1.22x"
    assert tlg32[col["wfst WER %"]] == "15.00" and tlg32[col["riva WER %"]] == "14.80"
    assert tlg32[col["wfst mem MiB"]] == "100" and tlg32[col["wfst overflow/rescued"]].startswith("18/18")
    tlg200 = _line(table, "| compact TLG | 200 |")
    assert tlg200[col["x riva"]] == "7.62x"  # 1220 * 200/32 = 7625 vs 1000
    hlg = _line(table, "| compact HLG | 32 |")
    assert hlg[col["riva RTFx"]] == "–" and hlg[col["x riva"]] == "–"
    assert len(table.splitlines()) == 2 + 4


def test_ctc_vs_seed_per_shape_with_null_wer():
    table = side_by_side_table(_bench_rows(), "ctc_beam", "seed")
    one = _line(table, "| 1 | 1000 | 1025 | 10 |")
    assert "5.90x" in one and "kernel" in one and one.count("n/a") == 2
    assert run_mate_pairs(_bench_rows()) == [("ctc_beam", "seed")]
    # the orientation does not depend on which row comes first: ours is this project's decoder
    assert run_mate_pairs(list(reversed(_bench_rows()))) == [("ctc_beam", "seed")]


@pytest.mark.parametrize("change,what", [
    (dict(boundary="api"), "boundary differs"),
    (dict(utterances=15, audio_seconds=97.5), "utterance count differs"),
    (dict(params={"B": 16, "T": 200, "V": 5000, "beam": 10, "streams": 2}), "params differs"),
])
def test_refuses_to_pair_unlike_rows(change, what):
    rows = _bench_rows()
    rows[1] = dataclasses.replace(rows[1], **change)  # the seed row of the first shape
    with pytest.raises(ValueError, match=what) as e:
        side_by_side_table(rows, "ctc_beam", "seed", by=["B", "T", "V", "beam"])
    assert "\n" not in str(e.value)


def test_refuses_to_pair_rows_of_different_datasets():
    rows = _bench_rows()
    rows[1] = dataclasses.replace(rows[1], dataset="other-synthetic")
    with pytest.raises(ValueError, match="different datasets"):
        side_by_side_table(rows, "ctc_beam", "seed")


def test_ambiguous_mates_and_unknown_by_key_are_errors():
    rows = _bench_rows()
    with pytest.raises(ValueError, match="run mates"):
        side_by_side_table(rows, "ctc_beam", "seed", by=["beam"])  # beam alone does not tell the shapes apart
    with pytest.raises(ValueError, match="neither params keys"):
        side_by_side_table(rows, "ctc_beam", "seed", by=["graph"])
    with pytest.raises(ValueError, match="no successful rows of decoder 'wfst'"):
        side_by_side_table(rows, "wfst", "seed")


def test_groups_of_different_shape_in_one_run_render_together():
    """A run with offline rows (B, T, V, beam) and streaming rows (V, beam, streams): the default grouping is the
    union of coordinates, a coordinate a row lacks shows as "–", and pairs never cross groups."""
    stream = [result_row(name, "synthetic", no_wer=True, params={"V": 1025, "beam": 10, "streams": 8},
                         boundary="api", device="cuda", utts=8, batch_size=8, rtfx=rtfx, decoder_name=name,
                         run_mate=mate, hw="gpu:NVIDIA H200")
              for name, mate, rtfx in (("ctc_beam", "seed", 900.0), ("seed", "ctc_beam", 450.0))]
    table = side_by_side_table(_bench_rows() + stream, "ctc_beam", "seed")
    assert table.splitlines()[0].startswith("| B | T | V | beam | streams |")
    streaming = _line(table, "| – | – | 1025 | 10 | 8 |")
    assert "2.00x" in streaming
    assert len(table.splitlines()) == 2 + 3


def test_side_by_side_plot(tmp_path):
    out = plot_side_by_side(_wfst_vs_riva(), "wfst", "riva", tmp_path / "wfst_vs_riva.png")
    assert out.stat().st_size > 5000


def test_cli_renders_side_by_side_for_run_mate_pairs(tmp_path, capsys):
    run = tmp_path / "runs" / "wfst_vs_riva" / "h200"
    run.mkdir(parents=True)
    rows_file(run / "results.jsonl", _wfst_vs_riva())
    assert main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "## wfst vs riva" in out and "1.22x" in out
    assert (run / "wfst_vs_riva.png").stat().st_size > 5000
    # a benchmark without references renders (its WER plot is skipped with a one-line note)
    bench = tmp_path / "runs" / "ctc_vs_seed" / "h200"
    bench.mkdir(parents=True)
    rows_file(bench / "results.jsonl", _bench_rows())
    assert main([str(bench)]) == 0
    cap = capsys.readouterr()
    assert "## ctc_beam vs seed" in cap.out and "no wer_vs_rtfx.png" in cap.err


def test_in_process_ab_rows_pair_with_the_defaults_row():
    """ab_pairs_table: an `--ab-env` arm's row beside the same run's row of the base label (same boundary), the
    ratio defaults / arm; rows without an arm, or whose base is missing, are not listed; the report carries it."""
    from reports.tables import ab_pairs_table, markdown_report

    env = "BEAMDEC_CTC_API=unpacked"
    rows = [result_row("ctc_beam@cuda[api B=1]", rtfx=5000.0, device="cuda", no_wer=True),
            result_row(f"ctc_beam@cuda[api B=1] [ab {env}]", rtfx=4000.0, device="cuda", no_wer=True,
                       params={"ab_env": env}),
            result_row(f"ctc_beam@cuda[api B=2] [ab {env}]", rtfx=1.0, device="cuda", no_wer=True,
                       params={"ab_env": env}),  # no base row: not listed
            result_row("ctc_beam@cuda[kernel B=1]", rtfx=9000.0, device="cuda", no_wer=True)]
    table = ab_pairs_table(rows)
    assert len(table.splitlines()) == 3
    line = _line(table, "| ctc_beam@cuda[api B=1] |")
    assert env in line[2] and line[3] == "5,000" and line[4] == "4,000" and line[5].startswith("1.25x")
    assert ab_pairs_table(rows[:1] + rows[3:]) == ""
    assert "In-process A/B" in markdown_report(rows)


def test_in_process_ab_rows_stand_against_the_run_mate():
    """An A/B arm whose defaults row has a run mate (the competitor, same run and inputs): the table adds the
    competitor's RTFx and both arms' ratio over it (session 26's multi-winner arm beside OASR, read off one run)."""
    from reports.tables import ab_pairs_table

    env = "BEAMDEC_CTC_ROUNDS=multi"
    rows = [result_row("ctc_beam@cuda[kernel B=16]", rtfx=133354.0, device="cuda", no_wer=True,
                       decoder_name="ctc_beam", run_mate="oasr_ctc@cuda[kernel B=16]"),
            result_row("oasr_ctc@cuda[kernel B=16]", rtfx=85488.0, device="cuda", no_wer=True,
                       decoder_name="oasr_ctc", run_mate="ctc_beam@cuda[kernel B=16]"),
            result_row(f"ctc_beam@cuda[kernel B=16] [ab {env}]", rtfx=164170.0, device="cuda", no_wer=True,
                       decoder_name="ctc_beam", params={"ab_env": env}),
            result_row("ctc_beam@cuda[kernel B=1]", rtfx=10000.0, device="cuda", no_wer=True),
            result_row(f"ctc_beam@cuda[kernel B=1] [ab {env}]", rtfx=15000.0, device="cuda", no_wer=True,
                       params={"ab_env": env})]  # no run mate: dashes
    table = ab_pairs_table(rows)
    header = [h.strip("| ") for h in table.splitlines()[0].split(" | ")]
    assert header[-4:] == ["competitor", "competitor RTFx", "defaults x competitor", "arm x competitor"]
    line = [c.strip("| ") for c in _line(table, "| ctc_beam@cuda[kernel B=16] |")]
    assert line[6:] == ["oasr_ctc", "85,488", "1.56x", "1.92x"]
    bare = [c.strip("| ") for c in _line(table, "| ctc_beam@cuda[kernel B=1] |")]
    assert bare[6:] == ["–", "–", "–", "–"]


def test_side_by_side_plot_draws_the_ab_arm_against_the_same_competitor(tmp_path):
    """side_by_side_series (what the plot draws): an in-process A/B arm of ours gets its RTFx and its ratio over the
    defaults row's competitor; a group without an arm has None there; drawn arms are not counted as unpaired."""
    from reports.plots import side_by_side_series

    env = "BEAMDEC_CTC_ROUNDS=multi"
    rows = []
    for B, mine, theirs, arm in ((16, 133354.0, 85488.0, 164163.0), (1, 10000.0, 6000.0, None)):
        common = dict(device="cuda", no_wer=True, params={"B": B})
        rows.append(result_row(f"ctc_beam@cuda[kernel B={B}]", rtfx=mine, decoder_name="ctc_beam",
                               run_mate=f"oasr_ctc@cuda[kernel B={B}]", **common))
        rows.append(result_row(f"oasr_ctc@cuda[kernel B={B}]", rtfx=theirs, decoder_name="oasr_ctc",
                               run_mate=f"ctc_beam@cuda[kernel B={B}]", **common))
        if arm is not None:
            rows.append(result_row(f"ctc_beam@cuda[kernel B={B}] [ab {env}]", rtfx=arm, decoder_name="ctc_beam",
                                   device="cuda", no_wer=True, params={"B": B, "ab_env": env}))
    d = side_by_side_series(rows, "ctc_beam", "oasr_ctc", by=["B"])
    assert d["arm_name"] == env and d["unpaired"] == 0
    i16, i1 = d["names"].index("B=16"), d["names"].index("B=1")
    assert round(d["arm_ratio"][i16], 2) == 1.92 and round(d["ratio"][i16], 2) == 1.56
    assert d["arm"][i1] is None and d["arm_ratio"][i1] is None
    # a second arm (sorted after the first): the plot keeps drawing the first, names how many there are, and the
    # second's rows are neither drawn nor counted as unpaired
    rows.append(result_row(f"ctc_beam@cuda[kernel B=16] [ab BEAMDEC_Z=1]", rtfx=1.0, decoder_name="ctc_beam",
                           device="cuda", no_wer=True, params={"B": 16, "ab_env": "BEAMDEC_Z=1"}))
    d = side_by_side_series(rows, "ctc_beam", "oasr_ctc", by=["B"])
    assert d["arm_name"] == f"{env} (1 of 2 arms; all in the A/B table)" and d["unpaired"] == 0
    assert round(d["arm_ratio"][d["names"].index("B=16")], 2) == 1.92
    assert plot_side_by_side(rows, "ctc_beam", "oasr_ctc", tmp_path / "ab.png", by=["B"]).stat().st_size > 5000
