"""The regression gate: equal results pass, a planted WER regression fails (non-zero exit, readable
diff), RTFx only compared on matching hardware, missing rows fail; inputs are ResultRows on both sides."""
import dataclasses
import json

import pytest

from eval.gate import compare, main, make_baseline, parse_baseline
from reports.schema import BASELINE_FIELDS, ResultRow, baseline_subset


def result_row(decoder="flashlight", dataset="other", errors=50, rtfx=100.0, hw="cpu:Xx2", utts=200, *,
               ref_words=1000, params=None, run_mate=None, boundary="api", no_wer=False, decoder_name=None,
               device="cpu", run="r", batch_size=8, **extra) -> ResultRow:
    """A valid row whose WER is errors / ref_words (all errors are substitutions)."""
    wer_parts = dict(wer=None) if no_wer else dict(wer=errors / ref_words, substitutions=errors,
                                                   hits=ref_words - errors, ref_words=ref_words)
    return ResultRow(experiment="e", run=run, decoder=decoder, decoder_name=decoder_name or decoder.split("@")[0],
                     device=device, dataset=dataset, utterances=utts, audio_seconds=utts * 6.5,
                     rtfx_decoder=rtfx, rtfx_end_to_end=None if rtfx is None else rtfx / 2, hardware_key=hw,
                     environment={"git_commit": "abc"}, params=dict(params or {}), run_mate=run_mate,
                     boundary=boundary, batch_size=batch_size, **wer_parts, **extra)


def rows_file(path, rows):
    path.write_text("".join(r.to_json() + "\n" for r in rows))
    return path


ROWS = [result_row("greedy", "clean", 40, 5000), result_row("greedy", "other", 120, 5000), result_row()]


def _with(rows, i, **changes):
    out = list(rows)
    out[i] = dataclasses.replace(out[i], **changes)
    return out


def _base(rows=ROWS):
    return parse_baseline(make_baseline(rows))


def test_equal_results_pass():
    report = compare(ROWS, _base())
    assert report.passed
    assert {c.status for c in report.checks} == {"pass"}


def test_planted_wer_regression_fails_with_readable_diff():
    cur = _with(ROWS, 2, wer=0.07, substitutions=70, hits=930)  # +2 points, tolerance 0.5
    report = compare(cur, _base(), metrics=["wer"])
    assert not report.passed
    [fail] = report.failures
    assert (fail.decoder, fail.dataset, fail.metric) == ("flashlight", "other", "wer")
    text = report.render()
    assert "GATE FAILED" in text and "+2.00 points" in text and "flashlight" in text


def test_wer_within_tolerance_passes():
    cur = _with(ROWS, 2, wer=0.053, substitutions=53, hits=947)
    assert compare(cur, _base(), metrics=["wer"]).passed


def test_rtfx_drop_fails_only_on_matching_hardware():
    cur = _with(ROWS, 0, rtfx_decoder=1000.0)  # -80 %
    assert not compare(cur, _base(), metrics=["rtfx"]).passed
    cur = [dataclasses.replace(r, hardware_key="gpu:H200") for r in cur]
    report = compare(cur, _base(), metrics=["rtfx"])
    assert report.passed
    assert any(c.status == "skip" and "hardware differs" in c.note for c in report.checks)


def test_missing_row_fails_and_new_row_is_informational():
    cur = ROWS[:2] + [result_row("wfst", "other")]
    report = compare(cur, _base(), metrics=["wer"])
    assert [c.decoder for c in report.failures] == ["flashlight"]
    assert any(c.status == "new" and c.decoder == "wfst" for c in report.checks)


def test_unavailable_row_fails_with_its_reason():
    gone = ResultRow(experiment="e", run="r", decoder="flashlight", decoder_name="flashlight", device="cpu",
                     status="unavailable", reason="flashlight-text not installed")
    report = compare(ROWS[:2] + [gone], _base(), metrics=["wer"])
    [fail] = report.failures
    assert "flashlight-text not installed" in fail.note


def test_different_utterance_count_or_boundary_is_not_comparable():
    for change in (dict(utterances=50, audio_seconds=325.0), dict(boundary="kernel")):
        report = compare(_with(ROWS, 1, **change), _base(), metrics=["wer"])
        assert not report.passed and "not comparable" in report.failures[0].note


def test_unknown_or_empty_metric_is_an_error():
    with pytest.raises(ValueError, match="valid choices"):
        compare(ROWS, _base(), metrics=["cer"])
    with pytest.raises(ValueError, match="no gate metric"):
        compare(ROWS, _base(), metrics=[])


def test_baseline_fields_are_result_row_fields_and_round_trip():
    names = {f.name for f in dataclasses.fields(ResultRow)}
    assert set(BASELINE_FIELDS) <= names
    row = ROWS[2]
    back = parse_baseline(make_baseline([row])).rows[0]
    assert baseline_subset(back) == baseline_subset(row)


def test_committed_demo_baseline_is_valid():
    from pathlib import Path

    from eval.gate import load_baseline

    base = load_baseline(Path(__file__).parents[1] / "reports" / "baselines" / "demo_tiny.json")
    assert {r.dataset for r in base.rows} == {"clean", "other", "all"}
    assert all(r.wer is not None and r.boundary == "api" for r in base.rows)


def test_cli_exit_codes_and_write_baseline(tmp_path, capsys):
    results = rows_file(tmp_path / "results.jsonl", ROWS)
    baseline = tmp_path / "base.json"
    assert main([str(results), str(baseline), "--write-baseline"]) == 0
    assert main([str(results), str(baseline), "--metrics", "wer"]) == 0
    assert main([str(tmp_path), str(baseline), "--metrics", "wer"]) == 0  # a run directory works too
    rows_file(results, _with(ROWS, 0, wer=0.5, substitutions=500, hits=500))
    assert main([str(results), str(baseline), "--metrics", "wer"]) == 1
    assert "GATE FAILED" in capsys.readouterr().out
    assert main([str(results), str(tmp_path / "nope.json")]) == 2


# ------------------------------------------------------------------ GPU benchmark runs (item: gate a bench run)


def _bench_rows(ours_rtfx=(1200.0, 5900.0), hw="gpu:NVIDIA H200"):
    """A synthetic side-by-side benchmark run: ours vs a competitor per shape, kernel boundary, no references."""
    rows = []
    for shape, rtfx in zip(({"B": 16, "T": 200, "V": 5000, "beam": 10}, {"B": 1, "T": 1000, "V": 1025, "beam": 10}),
                           ours_rtfx):
        common = dict(dataset="synthetic", hw=hw, no_wer=True, params=shape, boundary="kernel", device="cuda",
                      batch_size=shape["B"], utts=shape["B"], cuda_peak_bytes=64 * 2**20)
        rows.append(result_row("ctc_beam@cuda", rtfx=rtfx, run_mate="seed@cuda", decoder_name="ctc_beam", **common))
        rows.append(result_row("seed@cuda", rtfx=1000.0, run_mate="ctc_beam@cuda", decoder_name="seed", **common))
    return [dataclasses.replace(r, rtfx_end_to_end=None) for r in rows]  # kernel timing: no end-to-end figure


def test_gate_a_gpu_benchmark_run_directory_rtfx_only_when_wer_is_null(tmp_path, capsys):
    run = tmp_path / "runs" / "ctc_vs_seed" / "h200"
    run.mkdir(parents=True)
    rows_file(run / "results.jsonl", _bench_rows())
    baseline = tmp_path / "bench_h200.json"
    # a benchmark baseline made on a dedicated GPU records that it gates absolute RTFx (throughput is opt-in)
    assert main([str(run), str(baseline), "--write-baseline", "--metrics", "wer,rtfx"]) == 0
    assert main([str(run), str(baseline)]) == 0
    out = capsys.readouterr().out
    assert "GATE PASSED" in out and "WER n/a" in out and "[B=16,T=200,V=5000,beam=10]" in out
    # one shape slows down by 40 %: a regression on the same hardware key ...
    rows_file(run / "results.jsonl", _bench_rows(ours_rtfx=(1200.0, 3540.0)))
    assert main([str(run), str(baseline)]) == 1
    out = capsys.readouterr().out
    assert "GATE FAILED: 1 regression" in out and "B=1,T=1000" in out.split("FAIL")[0].splitlines()[-1]
    # ... and skipped (not failed) on another GPU
    rows_file(run / "results.jsonl", _bench_rows(ours_rtfx=(1200.0, 3540.0), hw="gpu:NVIDIA A100"))
    assert main([str(run), str(baseline)]) == 0
    assert "hardware differs" in capsys.readouterr().out


def test_bench_row_losing_its_wer_fails_and_wer_appearing_is_new():
    base = _base(ROWS)
    report = compare(_with(ROWS, 2, wer=None), base, metrics=["wer"])
    assert [c.note for c in report.failures] == ["the results have no WER (the baseline has one)"]
    base = _base(_with(ROWS, 2, wer=None))
    report = compare(ROWS, base, metrics=["wer"])
    assert report.passed and any(c.status == "new" and c.metric == "wer" for c in report.checks)
