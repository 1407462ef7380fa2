"""The paper's experiments (seed 004, "GPU-Accelerated WFST Beam Search Decoder for CTC-based Speech Recognition")
on the project's own Conformer-CTC, one command each:

    python -m eval.paper table1    # Table 1: WER of compact / normal / minimal TLG and HLG vs Flashlight, 95 % CIs
    python -m eval.paper fig6      # Figure 6: word-boost magnitude sweep, accurate vs inaccurate, two beams
                                   # (--flashlight-boost-sentences N / --ctc-lm-boost-sentences N add Flashlight and
                                   # our CTC prefix beam search with LM + phrase boosting, subsampled)
    python -m eval.paper table2    # Table 2: end-to-end RTFx (features + model + decoding), GPU WFST vs Flashlight on P processes
    python -m eval.paper table3    # Table 3: decoder-only RTFx, Flashlight 1 vs P processes vs the GPU WFST decoder
    python -m eval.paper all       # the four, in the order table1, fig6, table3, table2

Every experiment is a set of ordinary harness runs (`eval.runner.run_experiment`, configs conf/experiment/
paper_<x>.yaml + the per-run overrides planned here), written as run directories under
<out_root>/<experiment>/<run>/; after the runs, `bootstrap.json` beside them holds the 95 % bootstrap interval of
every (run, decoder, dataset) WER and the paired comparisons, computed from the runs' hyps.jsonl with
eval.metrics (utterances resampled, seeded). `python -m reports.paper <out_root>/<experiment>` renders the
tables and plots from those files alone.

Inputs, all rebuilt on demand and cached, so a retrained model needs the same command only:
- the test sets: recipes.speech_corpus (test_sentences=--sentences; prefix-stable, so the first 100 are the
  demo's), under --speech-root;
- the model's log-probs: `model=cache` (eval/acoustic/cache.py) under --cache-dir, filled by the NeMo model
  (--model) on first use and refilled when the .nemo changes (its fingerprint is part of the cache), so each
  sweep point costs decoding only;
- the graphs: recipes.build_graphs, on demand (eval.graphs).

Extra Hydra overrides for every run go after `--`: `python -m eval.paper table1 -- decoder.search_beam=20`.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from eval.config import REPO_ROOT
from eval.metrics import Stopwatch

log = logging.getLogger(__name__)

EXPERIMENTS = ("table1", "fig6", "table3", "table2")
# experiment -> (conf/experiment/<yaml>, directory name under out_root = the YAML's `name`)
CONFIGS = {"table1": "paper_table1", "fig6": "paper_fig6", "table3": "paper_table3", "table2": "paper_table2"}
DIRS = {"table1": "table1_topology", "fig6": "fig6_boost", "table3": "table3_speed", "table2": "table2_end_to_end"}
BOOTSTRAP_FILE = "bootstrap.json"
DATASETS = ("clean", "other")


@dataclass
class PaperOptions:
    """What the command line sets; `check()` refuses a bad value with one line naming it."""

    experiment: str = "all"
    sentences: int = 500  # per test set (the CIs need a few hundred; 200 is the floor the issue asks for)
    out_root: str = "reports/evidence/speech_tiny"
    speech_root: str = "data/speech_paper"
    cache_dir: str = "data/logprob_cache_paper"
    model: str = "models/conformer_ctc_speech/conformer_ctc_speech.nemo"
    scale: str = "tiny"
    # table1
    topologies: list = field(default_factory=lambda: ["compact", "normal", "minimal"])
    graphs: list = field(default_factory=lambda: ["TLG", "HLG"])
    resamples: int = 1000
    seed: int = 0
    # fig6
    beams: list = field(default_factory=lambda: [8.0, 17.0])
    boost_points: int = 9  # boost values 0, beam/(n-1), ..., beam
    boost_sentences: int = 300  # per set: the test words must not outnumber the in-vocabulary words absent from it
    flashlight_boost_sentences: int = 0  # per set, 0 = no Flashlight sweep (its boosting path is slow)
    flashlight_boost_points: int = 5
    # our CTC prefix beam search + token LM + phrase boosting (decoder ctc_lm): its beam is a hypothesis count, not a
    # score threshold, so it runs at one beam_size and sweeps every WFST beam's grid (the union of
    # boost_values(beam, ctc_lm_boost_points) over --beams): each WFST panel has ctc_lm points at the same boosts
    # (both in natural-log score units, the WFST at acoustic scale 1)
    ctc_lm_boost_sentences: int = 0  # per set, 0 = no ctc_lm sweep (~35 RTFx per point on a 2-core CPU)
    ctc_lm_boost_points: int = 9
    ctc_lm_beam_size: int = 10  # conf/decoder/ctc_lm.yaml's default
    # table3
    processes: int = 0  # Flashlight worker processes; 0 = this machine's cores
    # table2
    precision: str = "fp32"  # the acoustic model's precision in the end-to-end run (fp32 | fp16 | bf16)
    runs: list = field(default_factory=list)  # only these run names (e.g. ["wfst_gpu"] on the GPU host); [] = all
    overrides: list = field(default_factory=list)  # extra Hydra overrides for every run

    def check(self) -> "PaperOptions":
        if self.experiment not in (*EXPERIMENTS, "all"):
            raise ValueError(f"experiment must be one of {[*EXPERIMENTS, 'all']}, got {self.experiment!r}")
        for name, lo in (("sentences", 1), ("resamples", 1), ("boost_points", 2), ("boost_sentences", 1),
                         ("flashlight_boost_points", 2), ("processes", 0), ("flashlight_boost_sentences", 0),
                         ("ctc_lm_boost_sentences", 0), ("ctc_lm_boost_points", 2), ("ctc_lm_beam_size", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"--{name.replace('_', '-')} must be an integer >= {lo}, got {v!r}")
        if max(self.boost_sentences, self.flashlight_boost_sentences, self.ctc_lm_boost_sentences) > self.sentences:
            raise ValueError(f"--boost-sentences ({self.boost_sentences}), --flashlight-boost-sentences "
                             f"({self.flashlight_boost_sentences}) and --ctc-lm-boost-sentences "
                             f"({self.ctc_lm_boost_sentences}) must not exceed --sentences ({self.sentences})")
        bad = [t for t in self.topologies if t not in ("compact", "normal", "minimal")]
        if bad or not self.topologies:
            raise ValueError(f"--topologies must be a non-empty subset of compact,normal,minimal, got {self.topologies}")
        bad = [g for g in self.graphs if g not in ("TLG", "HLG")]
        if bad or not self.graphs:
            raise ValueError(f"--graphs must be a non-empty subset of TLG,HLG, got {self.graphs}")
        if self.precision not in ("fp32", "fp16", "bf16"):
            raise ValueError(f"--precision must be fp32, fp16 or bf16, got {self.precision!r}")
        if not self.beams or any(not (isinstance(b, (int, float)) and 0 < b < 1e4) for b in self.beams):
            raise ValueError(f"--beams must be positive numbers, got {self.beams}")
        if not Path(self.model).is_file() and not Path(self.cache_dir).is_dir():
            raise FileNotFoundError(f"--model {self.model!r}: no such .nemo file (and no log-prob cache at "
                                    f"{self.cache_dir!r} to decode from)")
        return self

    @property
    def num_processes(self) -> int:
        return self.processes or (os.cpu_count() or 1)


@dataclass
class PlannedRun:
    """One harness run of an experiment: its name and the overrides on top of the experiment's common ones."""

    name: str
    overrides: list


# ---------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------


def synthesize_test_sets(opts: PaperOptions) -> dict:
    """{"clean": manifest, "other": manifest} of `opts.sentences` sentences each (eval.demo's, cached by the recipe)."""
    from eval.demo import synthesize_test_sets as demo_test_sets

    return {k: str(v) for k, v in demo_test_sets(opts).items()}


# The decoder scales come from the demo's experiment YAML, where they are chosen on the speech dev set for the
# committed model (and re-chosen whenever it is retrained): one place, so a retrained model needs no edit here.
SCALES_FROM = "demo_speech"
SCALED_DECODERS = ("wfst", "flashlight")


def dev_chosen_scales() -> dict:
    """{decoder: {param: value}} of conf/experiment/demo_speech.yaml's decoder_overrides, for wfst and flashlight."""
    from omegaconf import OmegaConf

    from eval.config import CONF_DIR

    path = CONF_DIR / "experiment" / f"{SCALES_FROM}.yaml"
    overrides = OmegaConf.to_container(OmegaConf.load(path)).get("decoder_overrides") or {}
    missing = [d for d in SCALED_DECODERS if d not in overrides]
    if missing:
        raise ValueError(f"{path}: decoder_overrides has no dev-chosen scales for {missing}")
    return {d: dict(overrides[d]) for d in SCALED_DECODERS}


def common_overrides(opts: PaperOptions, experiment: str, manifests: dict, datasets: Sequence[str] = DATASETS) -> list:
    """The Hydra overrides every run of `experiment` shares: its experiment YAML, the dev-chosen decoder scales, the
    speech test sets, the cached log-probs of the model, the output folder."""
    sets = ",".join(f"{d}:{manifests[d]}" for d in datasets)
    scales = [f"+experiment.decoder_overrides.{d}={{{','.join(f'{k}:{v}' for k, v in p.items())}}}"
              for d, p in dev_chosen_scales().items()]
    return [
        f"experiment={CONFIGS[experiment]}", *scales,
        f"data=speech_{opts.scale}", f"data.manifests={{{sets}}}",
        # Table 2 times the acoustic model itself (NeMo features + Conformer, on CUDA when present), the others
        # decode cached log-probs of the same model
        *([f"model=conformer_ctc_speech", f"model.nemo_model={opts.model}", f"model.params.precision={opts.precision}"]
          if experiment == "table2" else
          ["model=cache", f"model.nemo_model={opts.model}", f"model.cache_dir={opts.cache_dir}"]),
        f"experiment.output_dir={opts.out_root}", f"experiment.name={DIRS[experiment]}",
    ]


def boost_values(beam: float, points: int) -> list:
    """`points` evenly spaced boost magnitudes from 0 to `beam` inclusive (the paper's x axis)."""
    return [round(beam * k / (points - 1), 6) for k in range(points)]


def union_boost_values(beams: Sequence[float], points: int) -> list:
    """The sorted union of every beam's `boost_values(beam, points)` (ctc_lm's sweep: each WFST beam's x values)."""
    return sorted({v for beam in beams for v in boost_values(beam, points)})


def sentence_words(manifest: str, limit: int) -> set:
    from eval.metrics import normalize_text
    from eval.runner import load_manifest

    return {w for u in load_manifest(manifest, limit) for w in normalize_text(u.text).split()}


def inaccurate_words(vocabulary: Sequence[str], test_words: set, seed: int) -> list:
    """As many in-vocabulary words absent from the test set as it has unique words (the paper's "inaccurate"
    scenario), drawn with `seed`; refuses when the vocabulary has too few (subsample the test set)."""
    absent = sorted(set(vocabulary) - set(test_words))
    if len(absent) < len(test_words):
        raise ValueError(f"the test set has {len(test_words)} unique words but only {len(absent)} vocabulary words "
                         "are absent from it: lower --boost-sentences so the inaccurate list can be as long")
    return sorted(random.Random(seed).sample(absent, len(test_words)))


def vocabulary(scale: str) -> list:
    """The words the graphs and Flashlight's lexicon know (the workload's word list)."""
    from recipes.workload import prepare_workload

    words_path = Path(prepare_workload(scale=scale, root="data/workload").words_path)
    with open(words_path, encoding="utf-8") as f:
        return [line.split()[0] for line in f if line.strip() and not line.startswith(("<", "#"))]


# ---------------------------------------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------------------------------------


def plan_table1(opts: PaperOptions) -> list[PlannedRun]:
    """One run per (topology, graph): the first (compact TLG by default) also decodes greedy, ctc_beam and
    Flashlight, which read no graph, so they are measured once."""
    runs = []
    for topo in opts.topologies:
        for graph in opts.graphs:
            first = not runs
            decoders = "[greedy,ctc_beam,flashlight,wfst]" if first else "[wfst]"
            runs.append(PlannedRun(f"{topo}_{graph.lower()}", [
                f"graph={topo}", f"experiment.decoders={decoders}", f"+experiment.decoder_overrides.wfst.graph={graph}",
                f"experiment.run={topo}_{graph.lower()}"]))
    return runs


# fig6 decoder -> its beam parameter: a score threshold (log domain) for wfst and flashlight, a hypothesis count for
# ctc_lm (which therefore runs at one beam and sweeps every score beam's boosts)
FIG6_BEAM_KEYS = {"wfst": "search_beam", "flashlight": "beam_threshold", "ctc_lm": "beam_size"}


def fig6_sweeps(opts: PaperOptions, decoder: str, points: int) -> list:
    """[(beam, boost values)] of one fig6 decoder: one sweep per --beams value from 0 to that beam (wfst,
    flashlight); ctc_lm: one sweep at --ctc-lm-beam-size over the union of those grids."""
    if decoder == "ctc_lm":
        return [(opts.ctc_lm_beam_size, union_boost_values(opts.beams, points))]
    return [(beam, boost_values(beam, points)) for beam in opts.beams]


def plan_fig6(opts: PaperOptions, manifests: dict, words_dir: Path) -> list[PlannedRun]:
    """One run per (decoder, beam, scenario, test set): a boost sweep over `boost_points` values from 0 to the beam
    (ctc_lm: at its beam size, over every beam's values; fig6_sweeps). Writes the word lists the runs boost into
    `words_dir` (kept with the evidence)."""
    vocab = vocabulary(opts.scale)
    words_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    decoders = [("wfst", opts.boost_sentences, opts.boost_points)]
    if opts.flashlight_boost_sentences:
        decoders.append(("flashlight", opts.flashlight_boost_sentences, opts.flashlight_boost_points))
    if opts.ctc_lm_boost_sentences:
        decoders.append(("ctc_lm", opts.ctc_lm_boost_sentences, opts.ctc_lm_boost_points))
    for decoder, sentences, points in decoders:
        for dataset in DATASETS:
            test_words = sentence_words(manifests[dataset], sentences)
            lists = {"accurate": sorted(test_words),
                     "inaccurate": inaccurate_words(vocab, test_words, seed=opts.seed)}
            for scenario, words in lists.items():
                path = words_dir / f"{scenario}_{dataset}_{sentences}.txt"
                path.write_text("".join(w + "\n" for w in words), encoding="utf-8")
            for beam, values in fig6_sweeps(opts, decoder, points):
                beam_key = FIG6_BEAM_KEYS[decoder]
                for scenario in lists:
                    name = f"{decoder}_beam{beam:g}_{scenario}_{dataset}"
                    sweep = ",".join(f"{v:g}" for v in values)
                    runs.append(PlannedRun(name, [
                        # one set per run (its own word lists): the other set is deleted, not merged over
                        *[f"~data.manifests.{d}" for d in DATASETS if d != dataset],
                        f"data.max_utterances={sentences}",
                        f"experiment.decoders=[{decoder}]", f"+experiment.decoder_overrides.{decoder}.{beam_key}={beam}",
                        *([f"+experiment.decoder_overrides.flashlight.num_processes={opts.num_processes}"]
                          if decoder == "flashlight" else []),
                        "boost.mode=words", f"boost.words_file={words_dir / f'{scenario}_{dataset}_{sentences}.txt'}",
                        f"boost.sweep=[{sweep}]", f"experiment.run={name}"]))
    return runs


def plan_table3(opts: PaperOptions) -> list[PlannedRun]:
    p = opts.num_processes
    runs = [
        PlannedRun("flashlight_p1", ["experiment.decoders=[flashlight]",
                                     "+experiment.decoder_overrides.flashlight.num_processes=1"]),
        PlannedRun(f"flashlight_p{p}", ["experiment.decoders=[flashlight]",
                                        f"+experiment.decoder_overrides.flashlight.num_processes={p}"]),
        PlannedRun("wfst_cpu", ["experiment.decoders=[wfst]"]),
        # on a machine without CUDA this run records wfst@cuda as unavailable (with the reason): the coordinator
        # runs `python -m eval.paper table3 --processes 16` (or `--runs wfst_gpu`) on the H200
        PlannedRun("wfst_gpu", ["experiment.decoders=[wfst@cuda]"]),
    ]
    for r in runs:
        r.overrides.append(f"experiment.run={r.name}")
    return runs


def plan_table2(opts: PaperOptions) -> list[PlannedRun]:
    """One run: the acoustic model once per batch, then every decoder on its log-probs, so the rows share the
    acoustic time and differ by the decoder (the paper's pipelines: GPU WFST vs Flashlight on P CPU processes;
    greedy and the CTC prefix beam search for scale)."""
    p = opts.num_processes
    return [PlannedRun("end_to_end", ["experiment.decoders=[greedy,ctc_beam@cuda,wfst@cuda,flashlight]",
                                      f"+experiment.decoder_overrides.flashlight.num_processes={p}",
                                      "experiment.run=end_to_end"])]


# ---------------------------------------------------------------------------------------------------------
# Bootstrap over the run directories
# ---------------------------------------------------------------------------------------------------------


def _hyps_run_dirs(exp_dir: Path) -> list[Path]:
    """The experiment's run directories that hold hypotheses (hyps.jsonl or hyps.jsonl.gz), sorted."""
    from eval.results import HYPS_NAMES

    return sorted({p.parent for name in HYPS_NAMES for p in exp_dir.glob(f"*/{name}")})


def read_hyps(run_dir: Path) -> dict:
    """{(decoder, dataset): {utterance id: (ref, hyp)}} of one run directory."""
    out: dict = {}
    from eval.results import open_hyps

    with open_hyps(run_dir) as f:
        for line in f:
            if line.strip():
                h = json.loads(line)
                out.setdefault((h["decoder"], h["dataset"]), {})[h["id"]] = (h["ref"], h["hyp"])
    return out


def bootstrap_experiment(exp_dir: Path, resamples: int, seed: int, pairs: Sequence[tuple] = ()) -> dict:
    """95 % bootstrap interval of every (run, decoder, dataset) WER of the experiment's run directories (plus
    "all": both sets' utterances pooled), and paired bootstraps of `pairs` ((run_a, decoder_a), (run_b,
    decoder_b)) per dataset. Every system is resampled with the same seed, so the draws are the same utterances
    wherever two systems decoded the same set. Written to <exp_dir>/bootstrap.json and returned."""
    from eval.metrics import bootstrap_wer_ci, paired_bootstrap, utterance_error_counts
    from reports.schema import load_rows

    counts: dict = {}  # (run, decoder, dataset) -> {id: (errors, words)}
    intervals = []
    for run_dir in sorted(p.parent for p in exp_dir.glob("*/results.jsonl")):
        rows = {(r.decoder, r.dataset): r for r in load_rows(run_dir) if r.ok}
        by_system: dict = {}
        for (decoder, dataset), utts in sorted(read_hyps(run_dir).items()):
            ids = sorted(utts)
            errors, words = utterance_error_counts([utts[i][0] for i in ids], [utts[i][1] for i in ids])
            counts[(run_dir.name, decoder, dataset)] = dict(zip(ids, zip(errors, words, (utts[i][1] for i in ids))))
            by_system.setdefault(decoder, []).append((dataset, ids, errors, words))
        for decoder, parts in by_system.items():
            sets = [(ds, e, w) for ds, _, e, w in parts]
            if len(parts) > 1:
                sets.append(("all", [x for p in parts for x in p[2]], [x for p in parts for x in p[3]]))
            for dataset, errors, words in sets:
                ci = bootstrap_wer_ci(errors, words, n_resamples=resamples, seed=seed)
                row = rows.get((decoder, dataset))
                if row is not None and row.wer is not None and abs(row.wer - ci.estimate) > 1e-9:
                    raise RuntimeError(f"{run_dir}: {decoder} {dataset}: WER from hyps.jsonl {ci.estimate} differs "
                                       f"from results.jsonl {row.wer}")
                intervals.append({"run": run_dir.name, "decoder": decoder, "dataset": dataset,
                                  "utterances": len(errors), **ci.as_dict()})
    paired = []
    for (run_a, dec_a), (run_b, dec_b) in pairs:
        for dataset in (*DATASETS, "all"):
            if dataset == "all":
                ca = {(d, i): v for d in DATASETS for i, v in counts.get((run_a, dec_a, d), {}).items()}
                cb = {(d, i): v for d in DATASETS for i, v in counts.get((run_b, dec_b, d), {}).items()}
            else:
                ca, cb = counts.get((run_a, dec_a, dataset)), counts.get((run_b, dec_b, dataset))
            if not ca or not cb:
                continue
            if set(ca) != set(cb):
                raise RuntimeError(f"paired bootstrap {run_a}/{dec_a} vs {run_b}/{dec_b} on {dataset}: the runs "
                                   "decoded different utterances")
            ids = sorted(ca)
            res = paired_bootstrap([ca[i][0] for i in ids], [cb[i][0] for i in ids], [ca[i][1] for i in ids],
                                   n_resamples=resamples, seed=seed)
            paired.append({"a": {"run": run_a, "decoder": dec_a}, "b": {"run": run_b, "decoder": dec_b},
                           "dataset": dataset, "utterances": len(ids),
                           "identical_hypotheses": sum(ca[i][2] == cb[i][2] for i in ids), **res.as_dict()})
    out = {"method": "percentile bootstrap over utterances (eval.metrics.bootstrap_wer_ci / paired_bootstrap)",
           "resamples": resamples, "seed": seed, "confidence": 0.95, "intervals": intervals, "paired": paired}
    (exp_dir / BOOTSTRAP_FILE).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return out


def table1_pairs(opts: PaperOptions) -> list:
    """compact vs normal (the paper's claim), and compact vs minimal, vs HLG, vs Flashlight, on the same graph kind."""
    runs = [r.name for r in plan_table1(opts)]
    first = runs[0]
    pairs = []
    for graph in opts.graphs:
        g = graph.lower()
        if f"compact_{g}" in runs:
            for topo in ("normal", "minimal"):
                if f"{topo}_{g}" in runs:
                    pairs.append(((f"compact_{g}", "wfst"), (f"{topo}_{g}", "wfst")))
    if "compact_tlg" in runs and "compact_hlg" in runs:
        pairs.append((("compact_tlg", "wfst"), ("compact_hlg", "wfst")))
    pairs.append(((first, "wfst"), (first, "flashlight")))
    return pairs


def fig6_pairs(exp_dir: Path) -> list:
    """Every boosted point of every sweep run against the same run's boost 0 (same utterances, same decoder):
    ((run, "<decoder>[boost=b]"), (run, "<decoder>[boost=0]")), for the paired "Δ vs boost 0" of the fig6 report."""
    pairs = []
    for run_dir in _hyps_run_dirs(exp_dir):
        labels = sorted({decoder for decoder, _ in read_hyps(run_dir)})
        for label in labels:
            name, sep, rest = label.partition("[boost=")
            if not sep or not rest.endswith("]") or float(rest[:-1]) == 0:
                continue
            zero = next((x for x in labels if x.startswith(f"{name}[boost=") and float(x[len(name) + 7:-1]) == 0),
                        None)
            if zero is not None:
                pairs.append(((run_dir.name, label), (run_dir.name, zero)))
    return pairs


# ---------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------


def execute(opts: PaperOptions, experiment: str, runs: Sequence[PlannedRun], common: list) -> list[dict]:
    """Run each planned run (those named in --runs when given); returns [{run, seconds, run_dir}]."""
    from eval.config import compose_config
    from eval.runner import run_experiment

    done = []
    for r in runs:
        if opts.runs and r.name not in opts.runs:
            continue
        watch = Stopwatch("cpu")  # wall time of the whole run (progress log), the one timer of eval.metrics
        with watch:
            cfg = compose_config([*common, *r.overrides, *opts.overrides])
            out = run_experiment(cfg)
        seconds = watch.wall_seconds
        log.info("%s/%s: %.1f s -> %s", experiment, r.name, seconds, out.run_dir)
        print(f"{experiment}/{r.name}: {seconds:.1f} s", flush=True)
        done.append({"run": r.name, "seconds": round(seconds, 1), "run_dir": str(out.run_dir)})
    return done


def commands_record(path: Path, record: dict, only: Sequence[str]) -> dict:
    """What commands.json holds after a run: `record`; with --runs (a partial re-run beside earlier run directories)
    the earlier records go under "earlier" (oldest first), each without the runs this one re-ran, so every run
    directory beside the file keeps the command that made it."""
    if not only or not path.is_file():
        return record
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return record
    if not isinstance(old, dict):
        return record
    rerun = {r["run"] for r in record.get("runs", [])}
    earlier = [*old.pop("earlier", []), old]
    for e in earlier:
        e["runs"] = [r for r in e.get("runs", []) if r.get("run") not in rerun]
    return {**record, "earlier": [e for e in earlier if e["runs"]]}


def run(opts: PaperOptions) -> dict:
    """Run the chosen experiment(s); returns {experiment: {"runs": [...], "seconds": ...}}."""
    opts.check()
    manifests = synthesize_test_sets(opts)
    summary = {}
    experiments = EXPERIMENTS if opts.experiment == "all" else (opts.experiment,)
    plans = {}
    for exp in experiments:
        if exp == "table1":
            plans[exp] = plan_table1(opts)
        elif exp == "fig6":
            plans[exp] = plan_fig6(opts, manifests, Path(opts.out_root) / DIRS[exp] / "words")
        elif exp == "table2":
            plans[exp] = plan_table2(opts)
        else:
            plans[exp] = plan_table3(opts)
    unknown = sorted(set(opts.runs) - {r.name for runs in plans.values() for r in runs})
    if unknown:
        raise ValueError(f"--runs {','.join(unknown)}: no such run in {opts.experiment} (planned: "
                         f"{','.join(r.name for runs in plans.values() for r in runs)})")
    for exp in experiments:
        watch = Stopwatch("cpu")
        watch.__enter__()  # closed below, once the experiment's runs and bootstrap are done
        exp_dir = Path(opts.out_root) / DIRS[exp]
        runs = plans[exp]
        done = execute(opts, exp, runs, common_overrides(opts, exp, manifests))
        pairs = table1_pairs(opts) if exp == "table1" else fig6_pairs(exp_dir) if exp == "fig6" else ()
        bootstrap_experiment(exp_dir, opts.resamples, opts.seed, pairs)
        watch.__exit__(None, None, None)
        summary[exp] = {"runs": done, "seconds": round(watch.wall_seconds, 1)}
        # the command and the wall time of each run, beside the evidence (the runs' config.yaml hold the rest)
        record = {"command": "python -m eval.paper " + " ".join(sys.argv[1:]) if sys.argv[0].endswith("paper.py")
                  else None, "options": asdict(opts), **summary[exp]}
        (exp_dir / "commands.json").write_text(json.dumps(commands_record(exp_dir / "commands.json", record, opts.runs),
                                                          indent=1) + "\n", encoding="utf-8")
    return summary


def parse_args(argv: Sequence[str]) -> PaperOptions:
    argv = list(argv)
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    d = PaperOptions()
    p = argparse.ArgumentParser(prog="python -m eval.paper", description=__doc__.splitlines()[0])
    p.add_argument("experiment", choices=[*EXPERIMENTS, "all"])
    p.add_argument("--sentences", type=int, default=d.sentences, help="test sentences per set")
    p.add_argument("--out-root", default=d.out_root)
    p.add_argument("--speech-root", default=d.speech_root)
    p.add_argument("--cache-dir", default=d.cache_dir)
    p.add_argument("--model", default=d.model, help=".nemo checkpoint whose log-probs are decoded")
    p.add_argument("--scale", default=d.scale)
    p.add_argument("--topologies", default=",".join(d.topologies))
    p.add_argument("--graphs", default=",".join(d.graphs))
    p.add_argument("--resamples", type=int, default=d.resamples)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--beams", default=",".join(f"{b:g}" for b in d.beams))
    p.add_argument("--boost-points", type=int, default=d.boost_points)
    p.add_argument("--boost-sentences", type=int, default=d.boost_sentences)
    p.add_argument("--flashlight-boost-sentences", type=int, default=d.flashlight_boost_sentences)
    p.add_argument("--flashlight-boost-points", type=int, default=d.flashlight_boost_points)
    p.add_argument("--ctc-lm-boost-sentences", type=int, default=d.ctc_lm_boost_sentences,
                   help="fig6: sentences per set of the ctc_lm sweep (0: none)")
    p.add_argument("--ctc-lm-boost-points", type=int, default=d.ctc_lm_boost_points,
                   help="fig6: ctc_lm sweeps the union of boost_values(beam, this) over --beams")
    p.add_argument("--ctc-lm-beam-size", type=int, default=d.ctc_lm_beam_size, help="fig6: ctc_lm's beam size")
    p.add_argument("--processes", type=int, default=d.processes, help="Flashlight processes (0: all cores)")
    p.add_argument("--precision", default=d.precision, help="table2: the acoustic model's precision")
    p.add_argument("--runs", default="", help="comma-separated run names to (re)run; default all")
    a = p.parse_args(argv)
    try:
        beams = [float(b) for b in a.beams.split(",") if b]
    except ValueError:
        raise ValueError(f"--beams must be comma-separated numbers, got {a.beams!r}") from None
    split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    return PaperOptions(
        experiment=a.experiment, sentences=a.sentences, out_root=a.out_root, speech_root=a.speech_root,
        cache_dir=a.cache_dir, model=a.model, scale=a.scale, topologies=split(a.topologies), graphs=split(a.graphs),
        resamples=a.resamples, seed=a.seed, beams=beams, boost_points=a.boost_points,
        boost_sentences=a.boost_sentences, flashlight_boost_sentences=a.flashlight_boost_sentences,
        flashlight_boost_points=a.flashlight_boost_points, ctc_lm_boost_sentences=a.ctc_lm_boost_sentences,
        ctc_lm_boost_points=a.ctc_lm_boost_points, ctc_lm_beam_size=a.ctc_lm_beam_size,
        processes=a.processes, precision=a.precision,
        runs=split(a.runs),
        overrides=extra,
    ).check()


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
        os.chdir(REPO_ROOT)  # the default paths are repository-relative
        try:
            from eval.demo import _quiet_nemo

            _quiet_nemo()
        except ImportError:
            pass
        summary = run(opts)
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    for exp, s in summary.items():
        print(f"{exp}: {len(s['runs'])} run(s), {s['seconds']:.0f} s -> {Path(opts.out_root) / DIRS[exp]}")
    print(f"render: python -m reports.paper {opts.out_root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
