"""Word-boost sweep through the harness (the paper's Figure 6 on the embedded workload): WER vs boost magnitude.

Two scenarios, each a harness run (eval.runner, boost.sweep) of our WFST decoder:
- "accurate": every distinct word of the set's references is boosted (boost.mode=test_set_words);
- "inaccurate": as many in-vocabulary words that do NOT occur in the references are boosted
  (boost.mode=words with a generated words_file), which should leave WER flat for sane magnitudes.
Boosts are log-domain (positive favours the word); the paper's rule of thumb is |boost| <= search_beam / 2.

    python -m eval.bench.wfst_boost_sweep                          # CPU reference, tiny workload, both sets
    python -m eval.bench.wfst_boost_sweep --device cuda --values 0 1 2 4 8 12 16
Each scenario is a normal harness run directory (runs/boost_sweep/<scenario>: config.yaml, hyps.jsonl,
results.jsonl, one row per (dataset, boost value)); the tables are reports.tables.results_table over its rows
and the figure is reports.plots.plot_boost_sweep (<out>/<scenario>.png). No script is needed for a single
scenario: `python -m eval.run decoder=wfst boost.mode=test_set_words boost.sweep=[0,1,2,4]`.

Measured (tiny workload, BPE compact TLG, CPU reference, search_beam 17, acoustic_scale 3; ~6 min on 2 cores):
accurate lists help a little at boost 1-2 (other 11.71 -> 11.03 % WER) and hurt from ~4-6 on (16: 20.9 %);
inaccurate lists (~1k of the 2k-word vocabulary!) stay flat to ~6, then hurt too. As in the paper, keep
|boost| well under search_beam / 2.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def inaccurate_words(workload, sets, seed: int = 0) -> list[str]:
    """In-vocabulary words absent from every reference of `sets`, as many as the references' distinct words."""
    from eval.metrics import normalize_text

    used = {w for s in sets for u in workload.utterances(s) for w in normalize_text(u["text"]).split()}
    pool = sorted(set(workload.words()) - used - {"<unk>", "<s>", "</s>"})
    rng = np.random.default_rng(seed)
    k = min(len(used), len(pool))
    return sorted(rng.choice(pool, size=k, replace=False).tolist())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", type=float, nargs="+", default=[0, 1, 2, 4, 6, 8, 12, 16])
    ap.add_argument("--sets", nargs="+", default=["clean", "other"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--max-utterances", type=int, default=None)
    ap.add_argument("--out", default="runs/boost_sweep")
    ap.add_argument("--overrides", nargs="*", default=[], help="extra Hydra overrides (e.g. model=simulator_char)")
    args = ap.parse_args(argv)

    from eval.config import compose_config
    from eval.runner import run_experiment
    from recipes.workload import prepare_workload

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wl = prepare_workload(args.scale)
    words_file = out / "inaccurate_words.txt"
    words_file.write_text("\n".join(inaccurate_words(wl, args.sets)) + "\n", encoding="utf-8")
    sweep = "[" + ",".join(f"{v:g}" for v in args.values) + "]"
    common = [f"data.scale={args.scale}", "data.sets=[" + ",".join(args.sets) + "]", "decoder=wfst",
              f"experiment.device={args.device}", "experiment.name=boost_sweep", "experiment.progress=false",
              f"experiment.output_dir={out.parent}", f"boost.sweep={sweep}", *args.overrides]
    if args.max_utterances:
        common.append(f"data.max_utterances={args.max_utterances}")
    scenarios = {
        "accurate": ["boost.mode=test_set_words"],
        "inaccurate": ["boost.mode=words", f"boost.words_file={words_file.resolve()}"],
    }
    from reports.plots import plot_boost_sweep
    from reports.tables import results_table

    for name, extra in scenarios.items():
        cfg = compose_config(common + extra + [f"experiment.run={name}"])
        res = run_experiment(cfg, workload=wl)
        bad = [r for r in res.rows if not r.ok]
        if bad:
            raise RuntimeError(f"{name}: {bad[0].decoder} did not run: {bad[0].reason}")
        print(f"\n## {name} boost list ({res.run_dir})\n")
        print(results_table(res.rows))
        print(f"figure: {plot_boost_sweep(res.rows, out / f'{name}.png')}")


if __name__ == "__main__":
    main()
