"""`python -m eval.demo [scale=tiny] [data=speech|simulator] [sentences=N] [speech_root=DIR] [overrides]`: the
README's first command (`make demo`).

Default, `data=speech` (the embedded default): real audio through a real model. Synthesizes the speech test sets
test-clean and test-other (`sentences` per set, default 100; recipes.speech_corpus: sentences of the
workload's LM spoken by espeak-ng, cached and verified by sha256 under `speech_root`, default data/speech),
runs NeMo features + the project's own Conformer-CTC (models/conformer_ctc_speech, conf/model/
conformer_ctc_speech.yaml; CUDA when present, else CPU) through the harness's NeMo acoustic source, and decodes
its log-probs with every decoder this machine can run on the workload's BPE graphs (built once, then cached).
Writes runs/demo/<scale>/ and gates the WER against reports/baselines/demo_<scale>.json. Decoder scales:
conf/experiment/demo_speech.yaml (chosen on the speech dev set, never on the test sets).

`data=simulator`: the CTC posterior simulator over the embedded synthetic workload's own test sets (no audio,
no NeMo; seconds), written to runs/demo/<scale>_simulator/ and gated against
reports/baselines/demo_<scale>_simulator.json. The simulator's confusions are invented by the project; it
stays for decoder work that needs no acoustic model and for scales the speech model was not trained for.

Both: conf/experiment/demo*.yaml list every decoder (those that cannot run here are listed with the
reason), the comparison table is printed, and a report.md + plot are written beside the results. Exit status
1 when the gate fails, 2 on bad input. Other arguments are Hydra overrides of the evaluation config, e.g.
`python -m eval.demo data.max_utterances=20` or `python -m eval.demo data=simulator scale=small`.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from eval.config import CONF_DIR, REPO_ROOT, compose_config

DEMO_DATA = ("speech", "simulator")
# 100 sentences per test set (~0.15 h of audio, ~1,800 words each): on 2 CPU cores synthesis takes ~7 s, the
# Conformer ~40 s and the decoders ~50 s (k2py and Kaldi search wide on test-other's noisy posteriors), so `make demo`
# stays within its 5-minute budget with the NeMo install and the graph build included; 200 took 3.3 min cached
DEFAULT_SENTENCES = 100
DEFAULT_SPEECH_ROOT = "data/speech"
USAGE = ("usage: python -m eval.demo [scale=<scale>] [data=speech|simulator] [sentences=N] [speech_root=DIR] "
         "[hydra overrides]")


class DemoOptions:
    """The demo's own options (everything else is a Hydra override of the evaluation config)."""

    def __init__(self, argv: list[str]):
        self.scale, self.data, self.sentences, self.speech_root = "tiny", "speech", DEFAULT_SENTENCES, DEFAULT_SPEECH_ROOT
        self.rest: list[str] = []
        for a in argv:
            key, eq, value = a.partition("=")
            if a in ("-h", "--help"):
                raise SystemExit(print(__doc__) or 0)
            if a.startswith("--"):
                raise ValueError(f"unknown option {a!r}; {USAGE}")
            if key == "scale" and eq:
                self.scale = value
            elif key == "data" and eq:
                if value not in DEMO_DATA:
                    raise ValueError(f"data must be one of {list(DEMO_DATA)} (the demo's data), got {value!r}; {USAGE}")
                self.data = value
            elif key == "sentences" and eq:
                try:
                    self.sentences = int(value)
                except ValueError:
                    self.sentences = -1
                if self.sentences < 1:
                    raise ValueError(f"sentences must be an integer >= 1 (test sentences per set), got {value!r}")
            elif key == "speech_root" and eq:
                if not value:
                    raise ValueError("speech_root must be a folder path, got ''")
                self.speech_root = value
            else:
                self.rest.append(a)
        if self.data == "speech" and not (CONF_DIR / "data" / f"speech_{self.scale}.yaml").is_file():
            have = sorted(p.stem[len("speech_"):] for p in (CONF_DIR / "data").glob("speech_*.yaml"))
            raise ValueError(f"scale={self.scale}: no speech model/corpus for this scale (speech scales: {have}); "
                             f"use data=simulator for the simulator at scale {self.scale}")

    @property
    def run(self) -> str:
        return self.scale if self.data == "speech" else f"{self.scale}_simulator"

    @property
    def baseline(self) -> Path:
        return REPO_ROOT / "reports" / "baselines" / f"demo_{self.run}.json"


def demo_overrides(opts: DemoOptions, manifests: dict | None = None) -> list[str]:
    """The evaluation-config overrides of the demo (`manifests`: the speech test sets' manifest paths)."""
    if opts.data == "speech":
        overrides = ["experiment=demo_speech", f"data=speech_{opts.scale}", "model=conformer_ctc_speech"]
        for name, path in (manifests or {}).items():
            overrides.append(f"data.manifests.{name}={path}")
    else:
        overrides = ["experiment=demo", "model=simulator_bpe"]
        overrides.append(f"data={opts.scale}" if (CONF_DIR / "data" / f"{opts.scale}.yaml").is_file()
                         else f"data.scale={opts.scale}")
    overrides.append(f"experiment.run={opts.run}")
    if opts.baseline.is_file():
        overrides.append(f"experiment.gate_baseline={opts.baseline}")
    return overrides + opts.rest


def synthesize_test_sets(opts) -> dict:
    """test-clean and test-other (`opts.sentences` each, under `opts.speech_root`, in `opts.scale`'s language) ->
    {"clean": manifest, "other": manifest}. Cached: a second call verifies every WAV's sha256 and synthesizes
    nothing. No dev or train audio is made here. The demo and eval.paper both call this."""
    from recipes.speech_corpus import CorpusWorkloadRef, prepare_speech_corpus

    corpus = prepare_speech_corpus(out_root=opts.speech_root, train_hours=0, dev_sentences=0,
                                   test_sentences=opts.sentences, progress=False,
                                   workload=CorpusWorkloadRef(scale=opts.scale))
    return {"clean": corpus.manifests["test-clean"], "other": corpus.manifests["test-other"]}


def _quiet_nemo() -> None:
    """NeMo logs every restore at INFO/WARNING (the training config it would need, telemetry): pages of text around
    the demo's table. Its errors still show."""
    try:
        from nemo.utils import logging as nemo_logging
    except ImportError:
        return  # the nemo source reports the missing install itself, as one line
    nemo_logging.setLevel(logging.ERROR)
    logging.getLogger("nv_one_logger").setLevel(logging.ERROR)


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = DemoOptions(list(argv))
        manifests = None
        if opts.data == "speech":
            manifests = synthesize_test_sets(opts)
            _quiet_nemo()
        cfg = compose_config(demo_overrides(opts, manifests))
        from eval.run import run_and_report

        status = run_and_report(cfg)
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    run_dir = Path(cfg.experiment.output_dir) / cfg.experiment.name / opts.run
    try:
        from reports.plots import plot_wer_vs_rtfx
        from reports.tables import load_results, markdown_report

        rows = load_results([run_dir / "results.jsonl"])
        title = f"Demo ({opts.scale}, {'Conformer-CTC on synthesized speech' if opts.data == 'speech' else 'simulator'})"
        (run_dir / "report.md").write_text(markdown_report(rows, title), encoding="utf-8")
        plot_wer_vs_rtfx(rows, run_dir / "wer_vs_rtfx.png")
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"(report/plot not written: {e})", file=sys.stderr)
    if cfg.experiment.get("gate_baseline") is None:
        print(f"\nno baseline {opts.baseline.relative_to(REPO_ROOT)}: gate skipped "
              f"(create one with: python -m eval.gate {run_dir}/results.jsonl {opts.baseline.relative_to(REPO_ROOT)} "
              "--write-baseline)")
    return status


if __name__ == "__main__":
    sys.exit(main())
