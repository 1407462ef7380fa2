"""The gate passes where the demo passed (issue 13): WER only by default, absolute RTFx opt-in, and the load-robust
throughput check `rtfx_ratio` (a decoder's RTFx over a reference decoder's measured in the same run), which a
machine-wide slowdown leaves alone and a planted slowdown of one decoder fails."""
import dataclasses
import json
import time
from pathlib import Path

import pytest

from eval.gate import compare, load_baseline, main, make_baseline, parse_baseline
from test_gate_compare import result_row

HW = "cpu:Xx2"


def _run_rows(scale=1.0, greedy_scale=1.0):
    """A demo-like run: greedy, flashlight and wfst on two datasets; `scale` multiplies every RTFx (machine load),
    `greedy_scale` greedy's alone (a code change)."""
    rows = []
    for ds in ("clean", "other"):
        for dec, rtfx in (("greedy", 80000.0 * greedy_scale), ("flashlight", 290.0), ("wfst", 2400.0)):
            rows.append(result_row(dec, ds, 40, rtfx * scale, hw=HW))
    return rows


def test_default_gate_is_wer_only_so_machine_load_does_not_fail_it():
    """Regression: `make gate` right after a passing `make demo` failed with 36 RTFx "regressions" (greedy -68 %):
    the hardware key matched, the machine's load did not."""
    base = parse_baseline(make_baseline(_run_rows()))
    loaded = _run_rows(scale=0.32)  # every decoder 68 % slower: a busy machine
    report = compare(loaded, base)
    assert report.passed and {c.metric for c in report.checks} == {"wer"}
    assert not compare(loaded, base, metrics=["wer", "rtfx"]).passed  # absolute RTFx stays available, opt-in


def test_rtfx_ratio_ignores_machine_load_and_catches_one_slower_decoder():
    base = parse_baseline(make_baseline(_run_rows()))
    report = compare(_run_rows(scale=0.32), base, metrics=["wer", "rtfx_ratio"], rtfx_reference="wfst")
    assert report.passed
    ratio_checks = [c for c in report.checks if c.metric == "rtfx_ratio"]
    assert {c.decoder for c in ratio_checks} == {"greedy", "flashlight"}  # the reference is not checked against itself
    report = compare(_run_rows(scale=0.8, greedy_scale=0.4), base, metrics=["rtfx_ratio"], rtfx_reference="wfst")
    assert [(c.decoder, c.dataset) for c in report.failures] == [("greedy", "clean"), ("greedy", "other")]
    assert "-60.0%" in report.failures[0].note and "wfst x0.80" in report.failures[0].note


def test_rtfx_ratio_against_the_median_of_the_runs_decoders():
    """Without a reference decoder the machine's speed change is the median change of the run's decoders: a busy
    machine (every decoder slower, each by its own amount) passes, one decoder 3x slower fails."""
    base = parse_baseline(make_baseline(_run_rows()))
    loaded = [dataclasses.replace(r, rtfx_decoder=r.rtfx_decoder * f)
              for r, f in zip(_run_rows(), (0.3, 0.4, 0.35, 0.3, 0.45, 0.35))]
    assert compare(loaded, base, metrics=["wer", "rtfx_ratio"]).passed
    report = compare(_run_rows(scale=0.4, greedy_scale=1 / 3), base, metrics=["rtfx_ratio"])
    assert {c.decoder for c in report.failures} == {"greedy"} and "median of 3 decoders" in report.failures[0].note
    two = [r for r in _run_rows() if r.decoder != "wfst"]
    report = compare(two, parse_baseline(make_baseline(two)), metrics=["rtfx_ratio"])
    assert report.passed and all("fewer than 3 decoders" in c.note for c in report.checks)


def test_rtfx_ratio_reference_must_be_present_on_both_sides():
    base = parse_baseline(make_baseline(_run_rows()))
    with pytest.raises(ValueError, match="has no row in the baseline"):
        compare(_run_rows(), base, metrics=["rtfx_ratio"], rtfx_reference="kaldi")
    without_wfst = [r for r in _run_rows() if r.decoder != "wfst"]
    report = compare(without_wfst, base, metrics=["rtfx_ratio"], rtfx_reference="wfst")
    assert any("reference decoder wfst missing" in c.note for c in report.failures)
    other_hw = [dataclasses.replace(r, hardware_key="cpu:Other") for r in _run_rows(greedy_scale=0.1)]
    report = compare(other_hw, base, metrics=["rtfx_ratio"], rtfx_reference="wfst")
    assert report.passed and all(c.status == "skip" for c in report.checks if c.metric == "rtfx_ratio")


def test_baseline_records_its_metrics_and_the_cli_overrides_them(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    results.write_text("".join(r.to_json() + "\n" for r in _run_rows()))
    baseline = tmp_path / "b.json"
    assert main([str(results), str(baseline), "--write-baseline", "--metrics", "wer,rtfx_ratio",
                 "--rtfx-reference", "wfst"]) == 0
    data = json.loads(baseline.read_text())
    assert data["metrics"] == ["wer", "rtfx_ratio"] and data["rtfx_reference"] == "wfst"
    results.write_text("".join(r.to_json() + "\n" for r in _run_rows(greedy_scale=0.3)))
    assert main([str(results), str(baseline)]) == 1  # the baseline's own metrics: the ratio fails
    assert main([str(results), str(baseline), "--metrics", "wer"]) == 0
    capsys.readouterr()
    data["metrics"] = ["wer", "speed"]
    baseline.write_text(json.dumps(data))
    assert main([str(results), str(baseline)]) == 2
    assert "valid choices" in capsys.readouterr().err


def test_committed_baselines_gate_what_their_hosts_allow():
    """The demo baselines (shared CPU machines) gate WER only; the GPU benchmark baselines (dedicated H200) also
    gate absolute RTFx, as they did before throughput became opt-in."""
    root = Path(__file__).parents[1] / "reports" / "baselines"
    assert load_baseline(root / "demo_tiny.json").metrics is None
    assert load_baseline(root / "demo_tiny_simulator.json").metrics is None
    for name in ("h200_ctc_vs_oasr.json", "h200_wfst_vs_riva_small.json"):
        assert load_baseline(root / name).metrics == ["wer", "rtfx"]


def test_a_planted_slowdown_of_one_decoder_fails_the_ratio_gate_end_to_end(tmp_path, monkeypatch):
    """Two real runs of the runner (fake workload, greedy + flashlight); in the second greedy sleeps 30 ms per batch:
    the ratio gate against flashlight fails on greedy, while the WER gate still passes."""
    pytest.importorskip("flashlight.lib.text")
    from _eval_fakes import FakeWorkload, fake_source_factory
    from eval.adapters import base as adapters
    from eval.config import compose_config
    from eval.runner import run_experiment

    wl = FakeWorkload(tmp_path / "wl")

    def run(name):
        cfg = compose_config([f"experiment.output_dir={tmp_path / 'runs'}", f"graph.root={tmp_path / 'g'}",
                              f"experiment.run={name}", "experiment.batch_size=2", "experiment.progress=false",
                              "experiment.decoders=[greedy,flashlight]"])
        return run_experiment(cfg, workload=wl, source_factory=fake_source_factory)

    first = run("before")
    base = parse_baseline(make_baseline(first.rows, metrics=["wer", "rtfx_ratio"], rtfx_reference="flashlight"))
    factory = adapters._REGISTRY["greedy"]

    class Slow:
        def __init__(self, inner):
            self.inner, self.name = inner, "greedy"

        def decode(self, log_probs, lengths, boosts=None):
            time.sleep(0.03)
            return self.inner.decode(log_probs, lengths, boosts=boosts)

    monkeypatch.setitem(adapters._REGISTRY, "greedy", lambda cfg, ctx: Slow(factory(cfg, ctx)))
    second = run("after")
    report = compare(second.rows, base)
    assert {c.decoder for c in report.failures} == {"greedy"}
    assert {c.metric for c in report.failures} == {"rtfx_ratio"}
    assert compare(second.rows, base, metrics=["wer"]).passed
