"""`python -m eval.run [overrides]` (console script `decode-eval`): the Hydra evaluation app.

Composes conf/config.yaml (groups data/, model/, graph/, decoder/, experiment/ over the schemas in
eval/config.py), runs `eval.runner.run_experiment`, prints the comparison table, and gates the results
when `experiment.gate_baseline` is set. Examples:

    python -m eval.run decoder=flashlight decoder.lm_weight=1.0
    python -m eval.run experiment=compare data.max_utterances=50
    python -m eval.run decoder=flashlight boost.mode=test_set_words boost.sweep=[0,2,4,8]
"""
from __future__ import annotations

import logging
import os
import sys

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from eval.config import CONF_DIR, register_configs

log = logging.getLogger("eval.run")

register_configs()


def run_and_report(cfg: DictConfig, workload=None) -> int:
    """Run, print the table, gate if configured. Returns the process exit status."""
    from eval.runner import run_experiment
    from reports.tables import load_results, results_table, unavailable_table

    out = run_experiment(cfg, workload=workload)
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


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> int:
    try:
        status = run_and_report(cfg)
        # hydra.main discards the task's return value: keep the worst status of the run (or sweep) for main()
        _worst_status[0] = max(_worst_status[0], status)
        return status
    except CONFIG_ERRORS as e:  # here rather than in main(): Hydra would log the job's failure first
        if os.environ.get("EVAL_RUN_TRACEBACK") == "1":
            raise
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
        _hydra_main()
    except CONFIG_ERRORS as e:
        if os.environ.get("EVAL_RUN_TRACEBACK") == "1":
            raise
        _exit_bad_input(e)
    sys.exit(_worst_status[0])


def _exit_bad_input(e: BaseException) -> None:
    print(f"error: {one_line(e)}", file=sys.stderr)
    sys.exit(2)


def one_line(e: BaseException) -> str:
    """The message of `e` (and of its cause, for Hydra's wrapped errors) on one line."""
    msg = str(e)
    if e.__cause__ is not None and str(e.__cause__) not in msg:
        msg = f"{msg}: {e.__cause__}"
    return " ".join(msg.split()) or type(e).__name__


if __name__ == "__main__":
    main()
