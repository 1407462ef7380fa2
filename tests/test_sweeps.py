"""Sweeps (issue 17): Hydra multirun jobs write run directories named by their overrides into the sweep directory,
in parallel through the joblib launcher and through submitit (its local executor stands in for SLURM here); a
failing job fails the sweep with one line after the others ran; `reports.sweeps` renders the sweep as one table
with the swept values as columns."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.metrics import word_error_stats
from eval.results import RunDirectory, check_name, measured_row
from eval.run import sweep_job_name
from reports.sweeps import load_sweep, main as sweeps_main, parse_override, sweep_report, sweep_table

REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------------------
# Job names
# ---------------------------------------------------------------------------------------------------------


def test_job_name_is_the_sorted_overrides_without_where_it_runs():
    name = sweep_job_name(["decoder.search_beam=8", "decoder=wfst", "experiment.output_dir=/x", "experiment.progress=false"], 3)
    assert name == "decoder.search_beam=8,decoder=wfst"
    assert sweep_job_name(["decoder.search_beam=17", "decoder=wfst"], 4) != name


def test_job_name_is_a_safe_directory_name():
    name = sweep_job_name(["data.manifests.clean=/data/a b/test.jsonl", "boost.sweep=[0,2]", "~decoder.x"], 0)
    assert check_name(name, "run name") == name and "/" not in name and " " not in name
    assert sweep_job_name(["experiment.run=mine"], 7) == "job7"  # nothing of its own: the job number
    assert sweep_job_name(["decoder.search_beam=8"], 0, prefix="grid") == "grid-decoder.search_beam=8"
    assert sweep_job_name(["-x=1"], 0)[0] == "_"


def test_long_job_names_stay_distinct():
    a = sweep_job_name([f"decoder.param_{i}=1" for i in range(30)] + ["decoder.last=1"], 0)
    b = sweep_job_name([f"decoder.param_{i}=1" for i in range(30)] + ["decoder.last=2"], 1)
    assert len(a) <= 200 and len(b) <= 200 and a != b
    assert check_name(a, "run name") == a


# ---------------------------------------------------------------------------------------------------------
# The sweep table
# ---------------------------------------------------------------------------------------------------------


def _write_job(root: Path, beam: int, wer_errors: int, overrides=True, batch=16) -> None:
    refs = ["a b c d"] * 2
    hyps = ["a b c d", " ".join(["x"] * wer_errors + ["b", "c", "d"][wer_errors - 1:])] if wer_errors else refs
    name = f"decoder.search_beam={beam}"
    with RunDirectory(root, "default", name) as rd:
        rows = [measured_row(experiment="default", run=name, decoder="wfst", decoder_name="wfst", device="cpu",
                             dataset=ds, wer=word_error_stats(refs, hyps), audio_seconds=10.0, decoder_seconds=0.1 * beam,
                             env={"cpu_model": "c", "cpu_count": 2, "git_commit": "abc"}, batch_size=batch,
                             decoder_config={"name": "wfst", "search_beam": beam})
                for ds in ("clean", "other")]
        rd.write_results(rows)
        sweep = {"sweep": {"dir": str(root), "job": beam, "launcher": "JoblibLauncher",
                           "overrides": ["decoder=wfst", f"decoder.search_beam={beam}", "data.max_utterances=2"]}}
        rd.write_config({"config": {}, **(sweep if overrides else {})})


def test_sweep_table_has_the_swept_values_as_sorted_columns(tmp_path):
    for beam, errors in ((17, 0), (100, 0), (8, 1)):  # written out of order: 100 after 17 sorts numerically
        _write_job(tmp_path, beam, errors)
    table = sweep_table(load_sweep([tmp_path]))
    lines = table.splitlines()
    assert lines[0] == "| decoder.search_beam | decoder | device | clean WER % | clean RTFx | other WER % | other RTFx |"
    assert [line.split(" | ")[0] for line in lines[2:5]] == ["| 8", "| 17", "| 100"]
    assert lines[2].split(" | ")[3] == "12.50"  # 1 error in 8 words, the WER of that job's rows
    assert "Every job: decoder=wfst, data.max_utterances=2." in table
    assert "RTFx shared its cores" in table  # joblib ran them side by side
    assert "2026" not in table and "default" not in table  # no timestamps, no run names


def test_runs_without_sweep_provenance_are_told_apart_by_their_settings(tmp_path):
    _write_job(tmp_path, 8, 1, overrides=False)
    _write_job(tmp_path, 17, 0, overrides=False, batch=32)
    header = sweep_table(load_sweep([tmp_path])).splitlines()[0]
    assert header.startswith("| search_beam | batch_size | decoder |")


def test_bad_sweep_inputs_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(ValueError, match="not key=value"):
        parse_override("decoder.search_beam")
    with pytest.raises(FileNotFoundError, match="no results.jsonl"):
        load_sweep([tmp_path])
    assert sweeps_main([str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    _write_job(tmp_path, 8, 0)
    cfg = next(tmp_path.rglob("config.yaml"))
    cfg.write_text("sweep: [1, 2]\n")
    with pytest.raises(ValueError, match="`sweep` must be a mapping"):
        load_sweep([tmp_path])


# ---------------------------------------------------------------------------------------------------------
# Real sweeps through Hydra's launchers
# ---------------------------------------------------------------------------------------------------------


def _sweep(tmp_path: Path, launcher: str, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "eval.run", "-m", f"hydra/launcher={launcher}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
         "decoder=greedy", "data.max_utterances=5", "experiment.progress=false", *overrides],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


def test_joblib_sweep_runs_jobs_in_parallel_into_one_report(tmp_path, capsys):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    proc = _sweep(tmp_path, "joblib", "hydra.launcher.n_jobs=2", "experiment.batch_size=2,4",
                  "data.sets=[clean],[other]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = tmp_path / "sweep"
    names = sorted(p.name for p in (sweep / "default").iterdir())
    assert names == sorted(f"data.max_utterances=5,data.sets=[{s}],decoder=greedy,experiment.batch_size={b}"
                           .replace("[", "_").replace("]", "_") for s in ("clean", "other") for b in (2, 4))
    jobs = load_sweep([sweep])
    assert sorted(j.job for j in jobs) == [0, 1, 2, 3] and {j.launcher for j in jobs} == {"JoblibLauncher"}
    table = sweep_table(jobs)
    lines = table.splitlines()
    assert lines[0].startswith("| experiment.batch_size | data.sets | decoder | device |")  # command-line order
    assert [line.split(" | ")[:2] for line in lines[2:6]] == [["| 2", "[clean]"], ["| 2", "[other]"],
                                                              ["| 4", "[clean]"], ["| 4", "[other]"]]
    assert sweeps_main([str(sweep)]) == 0 and (sweep / "sweep.md").read_text() == sweep_report([sweep])
    # the batch size changes nothing greedy decodes: each set's WER is the same in both of its jobs
    wer = {(j.overrides["data.sets"], j.overrides["experiment.batch_size"]): j.rows[0].wer for j in jobs}
    assert wer[("[clean]", "2")] == wer[("[clean]", "4")] and wer[("[other]", "2")] == wer[("[other]", "4")]


def test_a_failing_sweep_job_fails_the_sweep_with_one_line_after_the_others_ran(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    proc = _sweep(tmp_path, "joblib", "hydra.launcher.n_jobs=2", "experiment.batch_size=0,2")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "error: experiment.batch_size must be positive, got 0"
    assert "Traceback" not in proc.stderr + proc.stdout
    assert [p.name for p in (tmp_path / "sweep" / "default").iterdir()] == [
        "data.max_utterances=5,decoder=greedy,experiment.batch_size=2"]


def test_submitit_launcher_sweep(tmp_path):
    """The submitit launcher (conf/hydra/launcher/slurm.yaml extends its SLURM flavour); its local executor runs
    the same job submission, pickling and result collection without a cluster."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    proc = _sweep(tmp_path, "submitit_local", "experiment.batch_size=2,4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = load_sweep([tmp_path / "sweep"])
    assert sorted(j.overrides["experiment.batch_size"] for j in jobs) == ["2", "4"]
    assert {j.launcher for j in jobs} == {"LocalLauncher"}


def test_slurm_launcher_config_composes():
    """conf/hydra/launcher/slurm.yaml: the submitit SLURM launcher with one GPU per job, sweep-relative logs."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "eval.run", "hydra/launcher=slurm", "--cfg", "hydra", "--package",
                           "hydra.launcher"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "hydra_submitit_launcher.submitit_launcher.SlurmLauncher" in proc.stdout
    assert "gpus_per_node: 1" in proc.stdout and "submitit_folder: ${hydra.sweep.dir}/.submitit/%j" in proc.stdout


def test_a_sweep_job_that_fails_its_gate_fails_the_sweep_with_status_1(tmp_path):
    """In a sweep, a job's failed gate is raised (launchers in other processes return only exceptions): the basic
    launcher runs every job, then the sweep exits 1 with one line naming the job."""
    import json

    from eval.config import compose_config
    from eval.gate import make_baseline
    from eval.runner import run_experiment

    out = run_experiment(compose_config([f"experiment.output_dir={tmp_path / 'base'}", "decoder=greedy",
                                         "data.max_utterances=5", "experiment.progress=false"]))
    baseline = make_baseline(out.rows)
    for row in baseline["rows"]:
        if row.get("wer") is not None and row["dataset"] == "other":
            # an unreachable baseline on one set (no errors at all): the gate must fail there
            row.update(wer=0.0, hits=row["ref_words"], substitutions=0, deletions=0, insertions=0)
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    proc = _sweep(tmp_path, "basic", f"experiment.gate_baseline={tmp_path / 'baseline.json'}",
                  "experiment.batch_size=2,4")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: sweep job 0 (")
    assert "failed its gate" in proc.stderr and "Traceback" not in proc.stderr
    assert len(load_sweep([tmp_path / "sweep"])) == 2  # both jobs ran and wrote their run directories


def _name_in_child(parent: str, q) -> None:
    from eval.results import timestamp_run_name

    q.put(timestamp_run_name(Path(parent)))


def test_timestamped_run_names_are_unique_across_processes_and_released(tmp_path):
    """Parallel runs (xdist workers, Hydra multirun) starting in the same second got the same timestamp name and the
    later one replaced the earlier at exit; the name is now reserved atomically and the reservation goes when the run
    directory is written (or the run fails)."""
    import multiprocessing as mp

    from eval.results import timestamp_run_name

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_name_in_child, args=(str(tmp_path / "exp"), q)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    names = [q.get(timeout=5) for _ in procs]
    assert len(set(names)) == len(names)
    assert timestamp_run_name(tmp_path / "exp") not in names
    with RunDirectory(tmp_path, "exp2") as rd:
        assert (tmp_path / "exp2" / f".{rd.run}.reserved").is_dir()
        rd.write_results([])
    assert rd.final_path.is_dir() and not list((tmp_path / "exp2").glob(".*reserved"))
    with pytest.raises(KeyError):
        with RunDirectory(tmp_path, "exp3") as rd3:
            raise KeyError("boom")
    assert not (tmp_path / "exp3").exists() or not list((tmp_path / "exp3").iterdir()), rd3.run
