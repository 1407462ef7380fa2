"""reports.ab: A/B tables and plots from run directories (each arm = one setting measured in one or more processes),
matched on (decoder, dataset, params), with the baseline's own spread and a WER check; one-line refusals."""
import dataclasses

import pytest

from reports.ab import load_arms, main, parse_arm
from test_gate_compare import result_row, rows_file


def _run(tmp_path, name, rtfx_by_batch, wer_errors=150, hw="gpu:NVIDIA H200", boundary="api", extra_rows=()):
    d = tmp_path / name
    d.mkdir()
    rows = [result_row(f"wfst@cuda[compact HLG, b={b}]", rtfx=v, decoder_name="wfst", device="cuda", hw=hw,
                       errors=wer_errors, batch_size=b, run=name, boundary=boundary) for b, v in rtfx_by_batch.items()]
    rows += list(extra_rows)
    rows_file(d / "results.jsonl", rows)
    return str(d)


def _line(md, start):
    return next(line for line in md.splitlines() if line.startswith(start)).split(" | ")


def test_changes_against_the_baseline_mean_with_its_spread(tmp_path):
    a1 = _run(tmp_path, "a1", {1: 1000.0, 200: 20000.0})
    a2 = _run(tmp_path, "a2", {1: 1100.0, 200: 20000.0})
    b1 = _run(tmp_path, "b1", {1: 1155.0, 200: 21000.0})
    b2 = _run(tmp_path, "b2", {1: 1260.0, 200: 22000.0}, extra_rows=[
        result_row("oasr@cuda[compact HLG, b=1]", rtfx=900.0, decoder_name="oasr", device="cuda",
                   hw="gpu:NVIDIA H200", batch_size=1, run="b2")])
    out = tmp_path / "ab"
    assert main(["--arm", f"base={a1},{a2}", "--arm", f"new={b1},{b2}", "--decoder", "wfst", "--out", str(out)]) == 0
    md = (out / "ab.md").read_text()
    b1_line = _line(md, "| wfst@cuda[compact HLG, b=1]")
    # baseline mean 1050: +10.0 % and +20.0 % -> mean +15.0 %; the baseline's own processes: -4.8 %..+4.8 %
    assert b1_line[2] == "1,000; 1,100" and b1_line[3] == "1,155; 1,260"
    assert b1_line[4] == "+15.0 % (+10.0 %..+20.0 %)" and b1_line[5] == "-4.8 %..+4.8 %"
    assert b1_line[6].startswith("15.00 (every arm)")
    b200 = _line(md, "| wfst@cuda[compact HLG, b=200]")
    assert b200[4] == "+7.5 % (+5.0 %..+10.0 %)" and b200[5] == "+0.0 %..+0.0 %"
    assert "oasr" not in md  # --decoder wfst
    assert (out / "ab.png").stat().st_size > 0


def test_a_wer_that_differs_is_flagged_and_missing_configurations_are_named(tmp_path):
    a = _run(tmp_path, "a", {1: 1000.0, 32: 8000.0})
    b = _run(tmp_path, "b", {1: 1000.0}, wer_errors=470)
    out = tmp_path / "ab"
    # an arm named by a setting: NAME::PATH
    assert main(["--arm", f"base={a}", "--arm", f"BEAMDEC_X=1::{b}", "--out", str(out), "--no-plots"]) == 0
    md = (out / "ab.md").read_text()
    line = _line(md, "| wfst@cuda[compact HLG, b=1]")
    assert line[4] == "+0.0 %" and line[5] == "one process"
    assert line[6].startswith("**differs**: base 15.00; BEAMDEC_X=1 47.00")
    assert "wfst@cuda[compact HLG, b=32] on other: not in arm(s) BEAMDEC_X=1" in md
    assert not (out / "ab.png").exists()


@pytest.mark.parametrize("args,message", [
    (lambda a, b, c: ["--arm", f"base={a}"], "at least two arms"),
    (lambda a, b, c: ["--arm", f"x={a}", "--arm", f"x={b}"], "arm names must differ"),
    (lambda a, b, c: ["--arm", f"base={a}", "--arm", f"new={b}", "--baseline", "old"], "is not an arm"),
    (lambda a, b, c: ["--arm", f"base={a}", "--arm", f"new={c}"], "different machines"),
    (lambda a, b, c: ["--arm", "base", "--arm", f"new={b}"], "NAME=PATH"),
    (lambda a, b, c: ["--arm", f"base={a}", "--arm", "new=/no/such/run"], "not found"),
    (lambda a, b, c: ["--arm", f"base={a}", "--arm", "X=1::"], "NAME::PATH"),
    (lambda a, b, c: ["--arm", f"base={a}", "--arm", f"new={b}", "--decoder", "riva"], "no ok rows of decoder"),
])
def test_refusals_are_one_line(tmp_path, capsys, args, message):
    a = _run(tmp_path, "a", {1: 1000.0})
    b = _run(tmp_path, "b", {1: 1100.0})
    c = _run(tmp_path, "c", {1: 1100.0}, hw="gpu:NVIDIA H100 80GB HBM3")
    assert main(args(a, b, c) + ["--out", str(tmp_path / "ab")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and err.startswith("reports.ab: ")


def test_boundaries_and_duplicate_rows_are_refused(tmp_path):
    a = _run(tmp_path, "a", {1: 1000.0})
    k = _run(tmp_path, "k", {1: 1100.0}, boundary="kernel")
    with pytest.raises(ValueError, match="different boundaries"):
        from reports.ab import compare

        compare(load_arms([parse_arm(f"base={a}"), parse_arm(f"new={k}")]), "base")
    row = result_row("wfst@cuda[compact HLG, b=1]", rtfx=5.0, decoder_name="wfst", device="cuda",
                     hw="gpu:NVIDIA H200", batch_size=1)
    dup = tmp_path / "dup"
    dup.mkdir()
    rows_file(dup / "results.jsonl", [row, dataclasses.replace(row, rtfx_decoder=6.0)])
    with pytest.raises(ValueError, match="two rows of"):
        load_arms([parse_arm(f"base={a}"), parse_arm(f"new={dup}")])
