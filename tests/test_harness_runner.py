"""The runner as a new user meets it (issue 13): a slow sweep says so before it starts, progress is one plain line
per dataset when stderr is not a terminal, and KenLM's loading banner stays off the output."""
import pytest

from _eval_fakes import FakeWorkload, fake_source_factory
from eval.config import compose_config
from eval.runner import DecoderRun, run_experiment, warn_slow_runs


def _run(tmp_path, *overrides):
    cfg = compose_config([f"experiment.output_dir={tmp_path / 'runs'}", f"graph.root={tmp_path / 'g'}",
                          "experiment.run=r", "experiment.batch_size=2", *overrides])
    return run_experiment(cfg, workload=FakeWorkload(tmp_path / "wl"), source_factory=fake_source_factory)


def test_a_slow_boost_sweep_is_announced_with_an_estimate(monkeypatch):
    """Regression: the README's boost sweep over Flashlight (4 values, 0.7 h of audio) took 14 min without a word."""
    import eval.runner as runner

    said = []
    monkeypatch.setattr(runner.log, "warning", lambda msg, *a: said.append(msg % a if a else msg))
    runs = [DecoderRun(label=f"flashlight[boost={v}]", name="flashlight", device="cpu", config={}, boost_value=v)
            for v in (0.0, 2.0, 4.0, 8.0)]
    msg = warn_slow_runs(runs, audio_seconds=0.7 * 3600)
    assert msg is not None and "about 11 min" in msg and "decoder=wfst" in msg and said == [msg]
    assert warn_slow_runs(runs[:1], audio_seconds=60.0) is None  # a short run: nothing to say
    unboosted = [DecoderRun(label="flashlight", name="flashlight", device="cpu", config={})]
    assert warn_slow_runs(unboosted, audio_seconds=0.7 * 3600) is None


def test_progress_is_one_plain_line_per_dataset_off_a_terminal(tmp_path, capfd):
    """Regression: nested tqdm bars wrote `[A` cursor escapes into logs when stderr was not a terminal."""
    _run(tmp_path, "decoder=greedy", "experiment.progress=true")
    err = capfd.readouterr().err
    assert "\x1b[" not in err and "\r" not in err
    lines = [x for x in err.splitlines() if "batches in" in x]
    assert [x.split(":")[0] for x in lines] == ["clean", "other"]


def test_kenlm_banner_is_filtered_unless_verbose(tmp_path, capfd):
    pytest.importorskip("flashlight.lib.text")
    _run(tmp_path, "decoder=flashlight", "experiment.progress=false")
    err = capfd.readouterr().err
    assert "Loading the LM will be faster" not in err and "****" not in err
    _run(tmp_path, "decoder=flashlight", "experiment.progress=false", "experiment.verbose=true")
    assert "Loading the LM will be faster" in capfd.readouterr().err


def test_bootstrap_cis_and_paired_differences_reach_rows_and_tables(tmp_path):
    """Issue 13, statistics a researcher can trust: each decoder's WER with its 95 % bootstrap interval, and the
    paired interval of its difference to a chosen reference decoder, in the rows and the table."""
    pytest.importorskip("flashlight.lib.text")
    from reports.tables import results_table

    out = _run(tmp_path, "experiment.decoders=[greedy,flashlight]", "experiment.ci_reference=flashlight",
               "experiment.progress=false")
    rows = {(r.decoder, r.dataset): r for r in out.rows if r.ok}
    g, f = rows[("greedy", "other")], rows[("flashlight", "other")]
    assert g.wer_ci["low"] <= g.wer <= g.wer_ci["high"] and g.wer_ci["confidence"] == 0.95
    assert g.wer_ci["reference"] == "flashlight" and "reference" not in f.wer_ci
    assert g.wer_ci["delta"] == pytest.approx(g.wer - f.wer)  # same utterances, same reference words
    assert g.wer_ci["delta_low"] <= g.wer_ci["delta"] <= g.wer_ci["delta_high"]
    clean = rows[("greedy", "clean")]
    assert clean.wer == 0.0 and clean.wer_ci["low"] == clean.wer_ci["high"] == 0.0  # no errors: a point interval
    text = results_table(out.rows)
    assert "other 95 % CI" in text and "other Δ vs flashlight" in text and "paired bootstrap" in text
    assert "| flashlight | cpu |" in text and "| ref |" in text.split("| flashlight | cpu |")[1].split("\n")[0] + "|"


def test_a_ci_reference_outside_the_run_is_said_and_leaves_intervals_without_differences(tmp_path, monkeypatch):
    import eval.runner as runner

    said = []
    monkeypatch.setattr(runner.log, "warning", lambda msg, *a: said.append(msg % a if a else msg))
    out = _run(tmp_path, "decoder=greedy", "experiment.ci_reference=wfst", "experiment.progress=false")
    assert any("ci_reference wfst is not among this run's decoders" in m for m in said)
    assert all("low" in r.wer_ci and "delta" not in r.wer_ci for r in out.rows if r.ok and r.dataset != "all")
