"""`python -m eval.run [overrides]` (console script `decode-eval`): the Hydra evaluation app.

Composes conf/config.yaml (groups data/, model/, graph/, decoder/, experiment/ over the schemas in
eval/config.py), runs `eval.runner.run_experiment`, prints the comparison table, and gates the results
when `experiment.gate_baseline` is set. Examples:

    python -m eval.run decoder=flashlight decoder.lm_weight=1.0
    python -m eval.run experiment=compare data.max_utterances=50
    python -m eval.run decoder=flashlight boost.mode=test_set_words boost.sweep=[0,2,4,8]
    torchrun --nproc_per_node=2 -m eval.run data.max_utterances=50      # sharded over 2 ranks, one run dir
    python -m eval.run -m hydra/launcher=joblib decoder=wfst decoder.search_beam=8,17 hydra.sweep.dir=runs/sweeps/beam
    python -m eval.run model_path=/models/x.nemo dataset_manifest=/data/test.json data.arpa_path=/data/lm.arpa \
        experiment.decoders=[greedy,wfst]     # NeMo's speech_to_text_eval.py spelling; graphs built for the model

A sweep (-m) writes each job's run directory under hydra.sweep.dir, named by the job's overrides
(`<sweep dir>/<experiment>/decoder.search_beam=8`), and records the overrides in its config.yaml;
`python -m reports.sweeps <sweep dir>` renders the sweep as one table with the swept values as columns.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
from typing import Optional

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from eval.config import CONF_DIR, register_configs
from reports.schema import one_line as schema_one_line

log = logging.getLogger("eval.run")

register_configs()


def run_and_report(cfg: DictConfig, workload=None, extra_config: Optional[dict] = None) -> int:
    """Run, print the table, gate if configured. Returns the process exit status. In a sharded run (torchrun)
    only rank 0, which wrote the run directory, prints and gates; the other ranks return 0 (a failure on any
    rank has raised on every rank already)."""
    from eval.runner import run_experiment
    from reports.tables import load_results, results_table, unavailable_table

    out = run_experiment(cfg, workload=workload, extra_config=extra_config)
    if out.rank != 0:
        return 0
    rows = load_results([out.run_dir / "results.jsonl"])  # what reports.cli would read
    print()
    print(results_table(rows))
    extra = unavailable_table(rows)
    if extra:
        print()
        print(extra)
    print(f"\nrun directory: {out.run_dir}")
    baseline = cfg.experiment.get("gate_baseline")
    if baseline:
        from eval.gate import gate_files

        report = gate_files(out.run_dir / "results.jsonl", baseline, metrics=list(cfg.experiment.gate_metrics))
        print()
        print(report.render())
        return 0 if report.passed else 1
    return 0


_worst_status = [0]


class SweepJobFailed(Exception):
    """A sweep job's gate failed. Raised (not returned) in a multirun: a launcher that runs jobs in other
    processes (joblib, submitit) hands the parent only exceptions, and Hydra re-raises the first failed job's
    after every job of the sweep ran. main() turns it into exit status 1, like a failed gate of one run."""


# Keys that say where or how a job runs, not what it measures: left out of a sweep job's directory name.
_NAME_EXCLUDED_KEYS = ("experiment.run", "experiment.output_dir", "experiment.progress")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.,=+@-]")


def sweep_job_name(overrides: list[str], job_num: int, prefix: Optional[str] = None) -> str:
    """A sweep job's run directory name from its overrides, Hydra's override_dirname style (sorted, "key=value"
    joined by ","), e.g. `decoder.search_beam=8,experiment.batch_size=4`: stable across re-runs of the sweep
    and distinct between its jobs. Characters a directory name must not hold become "_"; a name over 200
    characters is cut and suffixed with a hash of the whole, so two long names still differ. `job<N>` when
    the job has no overrides of its own; `prefix` (an explicit experiment.run) goes in front."""
    kept = sorted(o for o in overrides if o.lstrip("+~").split("=", 1)[0] not in _NAME_EXCLUDED_KEYS)
    name = _UNSAFE.sub("_", ",".join(kept)) or f"job{job_num}"
    if prefix:
        name = f"{prefix}-{name}"
    if name[0] in ".-":
        name = "_" + name[1:]
    if len(name) > 200:
        name = name[:191] + "-" + hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    return name


def sweep_job_config(cfg: DictConfig) -> Optional[dict]:
    """In a multirun job: point the run directory into the sweep (`<hydra.sweep.dir>/<experiment>/<job name>`)
    and return the provenance config.yaml records (`sweep: {dir, job, overrides}`); None outside a multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None
    overrides = [str(o) for o in hc.overrides.task]
    cfg.experiment.run = sweep_job_name(overrides, int(hc.job.num), prefix=cfg.experiment.run)
    cfg.experiment.output_dir = str(hc.sweep.dir)
    launcher = str(hc.launcher.get("_target_", "")).rsplit(".", 1)[-1] or None  # e.g. JoblibLauncher
    return {"sweep": {"dir": str(hc.sweep.dir), "job": int(hc.job.num), "launcher": launcher, "overrides": overrides}}


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> int:
    sweep = None
    try:
        sweep = sweep_job_config(cfg)
        status = run_and_report(cfg, extra_config=sweep)
        # hydra.main discards the task's return value: keep the worst status of the run (or sweep) for main()
        _worst_status[0] = max(_worst_status[0], status)
        if status and sweep is not None:
            raise SweepJobFailed(f"sweep job {sweep['sweep']['job']} ({','.join(sweep['sweep']['overrides'])}) "
                                 f"failed its gate")
        return status
    except CONFIG_ERRORS as e:  # here rather than in main(): Hydra would log the job's failure first
        if os.environ.get("EVAL_RUN_TRACEBACK") == "1" or sweep is not None:
            raise  # a sweep job: Hydra records it and re-raises after the other jobs ran (main() says it)
        _exit_bad_input(e)


# Bad input (a config error, a missing file, a stale artefact) is exit status 2 with one line; 1 is kept for a
# failed gate, so CI can tell a regression from a broken invocation.
CONFIG_ERRORS = (ValueError, TypeError, FileNotFoundError, RuntimeError, HydraException, OmegaConfBaseException)


def main() -> None:
    # Hydra prints its own traceback and exits 1 for any exception (composition errors included) unless
    # HYDRA_FULL_ERROR=1, which makes it re-raise: set, the errors reach the handler below. A user who set
    # HYDRA_FULL_ERROR=1 gets the full traceback as Hydra documents.
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        os.environ["EVAL_RUN_TRACEBACK"] = "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        from eval.config import expand_shorthands

        sys.argv = [sys.argv[0], *expand_shorthands(sys.argv[1:])]  # NeMo-style model_path= / dataset_manifest=
        _hydra_main()
    except SweepJobFailed as e:
        if os.environ.get("EVAL_RUN_TRACEBACK") == "1":
            raise
        print(f"error: {one_line(e)}", file=sys.stderr)
        sys.exit(1)
    except CONFIG_ERRORS as e:
        if os.environ.get("EVAL_RUN_TRACEBACK") == "1":
            raise
        _exit_bad_input(e)
    sys.exit(_worst_status[0])


def _exit_bad_input(e: BaseException) -> None:
    print(f"error: {one_line(e)}", file=sys.stderr)
    sys.exit(2)


def one_line(e: BaseException) -> str:
    """The message of `e` (and of its cause, for Hydra's wrapped errors) on one line, whole."""
    return schema_one_line(e, limit=None, with_cause=True)


if __name__ == "__main__":
    main()
