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
import sys

import hydra
from omegaconf import DictConfig

from eval.config import CONF_DIR, register_configs

log = logging.getLogger("eval.run")

register_configs()


def run_and_report(cfg: DictConfig, workload=None) -> int:
    """Run, print the table, gate if configured. Returns the process exit status."""
    from eval.runner import run_experiment
    from reports.tables import results_table, unavailable_table

    out = run_experiment(cfg, workload=workload)
    print()
    print(results_table(out.rows))
    extra = unavailable_table(out.rows)
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


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> int:
    return run_and_report(cfg)


def main() -> None:
    try:
        status = _hydra_main()
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    sys.exit(status or 0)


if __name__ == "__main__":
    main()
