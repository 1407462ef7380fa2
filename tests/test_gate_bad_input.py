"""Issue 11 gate defects: inputs that used to print GATE PASSED or crash with a traceback (exit 1, the code of a
real regression) now exit 2 with one line on stderr; exit 1 stays reserved for a regression."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from eval.gate import main, make_baseline
from test_gate_compare import ROWS, result_row, rows_file

REPO = Path(__file__).parents[1]


@pytest.fixture
def files(tmp_path):
    results = rows_file(tmp_path / "results.jsonl", ROWS)
    baseline = tmp_path / "base.json"
    baseline.write_text(json.dumps(make_baseline(ROWS)))
    return results, baseline


def _gate(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_bad_input(capsys, *argv, match=""):
    code, out, err = _gate(capsys, *argv)
    assert code == 2, (code, out, err)
    assert "GATE PASSED" not in out
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert match in err, err


def _edit_baseline(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def _edit_results(path, fn):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    fn(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_nan_tolerance_flag_is_refused(files, capsys):
    """Bug: `--wer-abs-tol nan` made every comparison false and printed GATE PASSED."""
    results, baseline = files
    for flag in ("--wer-abs-tol", "--rtfx-rel-drop"):
        for v in ("nan", "inf", "-0.1"):
            _assert_bad_input(capsys, results, baseline, f"{flag}={v}", match="finite non-negative")


def test_nan_tolerance_in_baseline_is_refused(files, capsys):
    """Bug: a NaN tolerance in the baseline file passed every regression."""
    results, baseline = files
    _edit_baseline(baseline, lambda d: d["tolerances"].update(wer_abs=float("nan")))
    _assert_bad_input(capsys, results, baseline, match="wer_abs")


def test_nan_wer_in_results_is_refused(files, capsys):
    """Bug: `wer: NaN` in results.jsonl compared false against everything and printed GATE PASSED."""
    results, baseline = files
    _edit_results(results, lambda rows: rows[0].update(wer=float("nan")))
    _assert_bad_input(capsys, results, baseline, match="wer must be a finite number")


def test_nan_wer_in_baseline_is_refused(files, capsys):
    """Bug: `wer: NaN` in the baseline compared false against everything and printed GATE PASSED."""
    results, baseline = files
    _edit_baseline(baseline, lambda d: d["rows"][1].update(wer=float("nan")))
    _assert_bad_input(capsys, results, baseline, match="row 1")


def test_empty_baseline_rows_are_refused(files, capsys):
    """Bug: a baseline with `rows: []` gated nothing and printed GATE PASSED."""
    results, baseline = files
    _edit_baseline(baseline, lambda d: d.update(rows=[]))
    _assert_bad_input(capsys, results, baseline, match="no rows")


def test_negative_wer_is_refused(files, capsys):
    """Bug: `wer: -1` in the baseline made every current WER look like a huge improvement: GATE PASSED."""
    results, baseline = files
    _edit_baseline(baseline, lambda d: d["rows"][0].update(wer=-1))
    _assert_bad_input(capsys, results, baseline, match="wer must be >= 0")


def test_duplicate_rows_are_refused_not_masked(files, capsys):
    """Bug: a regressed row followed by a good copy of the same (decoder, dataset) was masked (last one won)."""
    results, baseline = files
    bad = result_row("greedy", "clean", 400, 5000)  # +36 points
    rows_file(results, [bad] + ROWS)
    _assert_bad_input(capsys, results, baseline, match="duplicate row")
    rows_file(results, ROWS)
    _edit_baseline(baseline, lambda d: d["rows"].append(dict(d["rows"][0])))
    _assert_bad_input(capsys, results, baseline, match="duplicate row")


@pytest.mark.parametrize("corrupt,match", [
    (lambda r: r.pop("wer"), "lacks required field(s) ['wer']"),
    (lambda r: r.pop("decoder"), "lacks required field(s) ['decoder']"),
    (lambda r: r.update(wer=None, substitutions="3"), "substitutions"),
    (lambda r: r.update(wer="0.05"), "wer must be a finite number"),
])
def test_malformed_results_rows_exit_2_without_traceback(files, capsys, corrupt, match):
    """Bug: a results row missing `decoder`, or with a string WER, raised KeyError/TypeError: traceback, exit 1."""
    results, baseline = files
    _edit_results(results, lambda rows: corrupt(rows[0]))
    _assert_bad_input(capsys, results, baseline, "--metrics", "wer", match=match)


@pytest.mark.parametrize("corrupt,match", [
    (lambda d: d["rows"][0].pop("wer"), "lacks field(s) ['wer']"),
    (lambda d: d["rows"][0].pop("decoder"), "lacks field(s) ['decoder']"),
    (lambda d: d["rows"][0].update(wer="0.05"), "wer must be a finite number"),
    (lambda d: d.update(rows=None), "'rows' must be a list"),
    (lambda d: d.pop("rows"), "'rows' must be a list"),
    (lambda d: d["rows"].__setitem__(0, [1, 2]), "must be a JSON object"),
    (lambda d: d.update(tolerances="tight"), "tolerances must be an object"),
    (lambda d: d.pop("schema_version"), "schema_version"),
])
def test_malformed_baseline_exits_2_without_traceback(files, capsys, corrupt, match):
    """Bug: a baseline missing `wer`/`decoder`, a string WER or `rows: null` crashed (traceback, exit 1)."""
    results, baseline = files
    _edit_baseline(baseline, corrupt)
    _assert_bad_input(capsys, results, baseline, match=match)


def test_null_baseline_wer_against_a_measured_wer_is_not_a_crash(files, capsys):
    """Bug: `wer: null` in the baseline raised TypeError (None arithmetic); now it is a valid no-reference row."""
    results, baseline = files
    _edit_baseline(baseline, lambda d: d["rows"][0].update(wer=None))
    code, out, _ = _gate(capsys, results, baseline, "--metrics", "wer")
    assert code == 0 and "baseline has no WER" in out


def test_json_list_line_in_results_exits_2(files, capsys):
    """Bug: a results line holding a JSON list raised AttributeError (`list.get`): traceback, exit 1."""
    results, baseline = files
    results.write_text(results.read_text() + "[1, 2, 3]\n")
    _assert_bad_input(capsys, results, baseline, match="must be a JSON object")


def test_empty_results_and_unreadable_files_exit_2(files, capsys, tmp_path):
    results, baseline = files
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    _assert_bad_input(capsys, empty, baseline, match="no result rows")
    _assert_bad_input(capsys, results, tmp_path, match="baseline not found")
    baseline.write_bytes(b"\xff\xfe{")
    _assert_bad_input(capsys, results, baseline, match="not a JSON baseline")
    baseline.write_text("[" * 100000)
    _assert_bad_input(capsys, results, baseline, match="not a JSON baseline")


def test_usage_errors_are_one_line_exit_2(files, capsys):
    results, baseline = files
    _assert_bad_input(capsys, results, baseline, "--wer-abs-tol", "abc", match="invalid float")
    _assert_bad_input(capsys, results, baseline, "--bogus", match="unrecognized")
    _assert_bad_input(capsys, results, baseline, "--metrics", "cer", match="valid choices")
    _assert_bad_input(capsys, results, baseline, "--metrics", ",", match="no gate metric")


def test_real_regression_still_exits_1_via_subprocess(files):
    results, baseline = files
    rows_file(results, [result_row("greedy", "clean", 400, 5000)] + ROWS[1:])
    p = subprocess.run([sys.executable, "-m", "eval.gate", str(results), str(baseline)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "GATE FAILED" in p.stdout and "Traceback" not in p.stderr
    _edit_baseline(baseline, lambda d: d["rows"][0].update(wer=float("nan")))
    p = subprocess.run([sys.executable, "-m", "eval.gate", str(results), str(baseline)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
