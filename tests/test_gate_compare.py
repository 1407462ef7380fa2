"""The regression gate: equal results pass, a planted WER regression fails (non-zero exit, readable
diff), RTFx only compared on matching hardware, missing rows fail."""
import copy
import json

import pytest

from eval.gate import compare, main, make_baseline


def _row(decoder="flashlight", dataset="other", wer=0.05, rtfx=100.0, hw="cpu:X x2", utts=200):
    return {"status": "ok", "decoder": decoder, "dataset": dataset, "device": "cpu", "utterances": utts,
            "wer": wer, "rtfx_decoder": rtfx, "rtfx_end_to_end": rtfx / 2, "hardware_key": hw,
            "environment": {"git_commit": "abc"}}


ROWS = [_row("greedy", "clean", 0.04, 5000), _row("greedy", "other", 0.12, 5000), _row()]


def test_equal_results_pass():
    report = compare(ROWS, make_baseline(ROWS))
    assert report.passed
    assert {c.status for c in report.checks} == {"pass"}


def test_planted_wer_regression_fails_with_readable_diff():
    cur = copy.deepcopy(ROWS)
    cur[2]["wer"] = 0.05 + 0.02  # +2 points, tolerance 0.5
    report = compare(cur, make_baseline(ROWS), metrics=["wer"])
    assert not report.passed
    [fail] = report.failures
    assert (fail.decoder, fail.dataset, fail.metric) == ("flashlight", "other", "wer")
    text = report.render()
    assert "GATE FAILED" in text and "+2.00 points" in text and "flashlight" in text


def test_wer_within_tolerance_passes():
    cur = copy.deepcopy(ROWS)
    cur[2]["wer"] = 0.053
    assert compare(cur, make_baseline(ROWS), metrics=["wer"]).passed


def test_rtfx_drop_fails_only_on_matching_hardware():
    cur = copy.deepcopy(ROWS)
    cur[0]["rtfx_decoder"] = 1000.0  # -80 %
    assert not compare(cur, make_baseline(ROWS), metrics=["rtfx"]).passed
    for r in cur:
        r["hardware_key"] = "gpu:H200"
    report = compare(cur, make_baseline(ROWS), metrics=["rtfx"])
    assert report.passed
    assert any(c.status == "skip" and "hardware differs" in c.note for c in report.checks)


def test_missing_row_fails_and_new_row_is_informational():
    base = make_baseline(ROWS)
    cur = ROWS[:2] + [_row("wfst", "other")]
    report = compare(cur, base, metrics=["wer"])
    assert [c.decoder for c in report.failures] == ["flashlight"]
    assert any(c.status == "new" and c.decoder == "wfst" for c in report.checks)


def test_different_utterance_count_is_not_comparable():
    cur = copy.deepcopy(ROWS)
    cur[1]["utterances"] = 50
    report = compare(cur, make_baseline(ROWS), metrics=["wer"])
    assert not report.passed and "not comparable" in report.failures[0].note


def test_unknown_metric_is_an_error():
    with pytest.raises(ValueError, match="valid choices"):
        compare(ROWS, make_baseline(ROWS), metrics=["cer"])


def test_cli_exit_codes_and_write_baseline(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    baseline = tmp_path / "base.json"
    assert main([str(results), str(baseline), "--write-baseline"]) == 0
    assert main([str(results), str(baseline), "--metrics", "wer"]) == 0
    bad = copy.deepcopy(ROWS)
    bad[0]["wer"] = 0.5
    results.write_text("".join(json.dumps(r) + "\n" for r in bad))
    assert main([str(results), str(baseline), "--metrics", "wer"]) == 1
    assert "GATE FAILED" in capsys.readouterr().out
    assert main([str(results), str(tmp_path / "nope.json")]) == 2
