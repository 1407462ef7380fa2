"""`python -m eval.demo scale=tiny [overrides]`: the README's first command.

Prepares the embedded synthetic workload (generated once, then cached), builds the decoding graphs (once, then
cached) with `recipes.build_graphs`, decodes the clean and other sets with every decoder this machine can
run (conf/experiment/demo.yaml lists them all; those that cannot run here are listed with the reason),
prints the comparison table, writes runs/demo/<scale>/ (results, hypotheses, config, report.md, plot)
and gates the WER against reports/baselines/demo_<scale>.json. Exit status 1 when the gate fails.
Extra arguments are Hydra overrides, e.g. `python -m eval.demo scale=tiny data.max_utterances=20`.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from eval.config import CONF_DIR, REPO_ROOT, compose_config


def demo_overrides(argv: list[str]) -> tuple[str, list[str]]:
    scale, rest = "tiny", []
    for a in argv:
        if a.startswith("scale="):
            scale = a.split("=", 1)[1]
        elif a.startswith("--"):
            raise ValueError(f"unknown option {a!r}; usage: python -m eval.demo scale=<scale> [hydra overrides]")
        else:
            rest.append(a)
    overrides = ["experiment=demo", f"experiment.run={scale}"]
    overrides.append(f"data={scale}" if (CONF_DIR / "data" / f"{scale}.yaml").is_file() else f"data.scale={scale}")
    baseline = REPO_ROOT / "reports" / "baselines" / f"demo_{scale}.json"
    if baseline.is_file():
        overrides.append(f"experiment.gate_baseline={baseline}")
    return scale, overrides + rest


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    try:
        scale, overrides = demo_overrides(argv)
        cfg = compose_config(overrides)
        from eval.run import run_and_report

        status = run_and_report(cfg)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    run_dir = Path(cfg.experiment.output_dir) / "demo" / scale
    try:
        from reports.plots import plot_wer_vs_rtfx
        from reports.tables import load_results, markdown_report

        rows = load_results([run_dir / "results.jsonl"])
        (run_dir / "report.md").write_text(markdown_report(rows, f"Demo ({scale})"), encoding="utf-8")
        plot_wer_vs_rtfx(rows, run_dir / "wer_vs_rtfx.png")
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"(report/plot not written: {e})", file=sys.stderr)
    if cfg.experiment.get("gate_baseline") is None:
        print(f"\nno baseline reports/baselines/demo_{scale}.json: gate skipped "
              f"(create one with: python -m eval.gate {run_dir}/results.jsonl reports/baselines/demo_{scale}.json --write-baseline)")
    return status


if __name__ == "__main__":
    sys.exit(main())
