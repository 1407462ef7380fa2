# The map of everyday commands. `make demo` and `make test` are the two set-up commands of the README:
# each installs what it needs on a fresh machine (via `setup`, idempotent) before doing its job.
PYTHON ?= python3
SCALE ?= tiny
RUN_DIR ?= runs
ARGS ?=
PYTEST_ARGS ?=

.PHONY: setup setup-nemo demo test test-fast test-gpu gpu-check bench graphs eval report report-evidence compress-evidence gate workload clean

setup: .setup.stamp
.setup.stamp: pyproject.toml
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q torch==2.13.0
	$(PYTHON) -m pip install -q -e '.[baselines,dev]'
	@# pyctcdecode 0.5.0 (pure Python) pins numpy<2 in its metadata; --no-deps keeps the numpy 2 that pandas 3 needs
	@# (its dependencies kenlm and pygtrie come with the baselines extra)
	$(PYTHON) -m pip install -q --no-deps pyctcdecode==0.5.0
	@# the decoders' extension, built ahead of first use (~1 min on 2 cores; cached per Python environment)
	$(PYTHON) -c "from decoders._ext import load_extension; load_extension()"
	@touch $@

# The embedded synthetic workload (vocabulary, ARPA, BPE, test sets); cached under data/workload.
workload: setup
	$(PYTHON) -m recipes.workload scale=$(SCALE)

# Decoding graphs (TLG/HLG, every topology) for the workload; cached under data/graphs.
graphs: setup
	$(PYTHON) -m recipes.build_graphs workload.scale=$(SCALE)

# Main job (`python -m eval.demo --help`): DEMO_DATA=speech (default) synthesizes the speech test sets (cached under
# data/speech), runs NeMo features + the project's Conformer-CTC (models/conformer_ctc_speech; CUDA when present)
# and decodes with every decoder available here on the workload's graphs (built once, cached under data/graphs),
# prints the comparison table and gates WER against reports/baselines/demo_$(SCALE).json; it installs the nemo and
# speech extras first (setup-nemo). DEMO_DATA=simulator: the posterior simulator instead (no audio, no NeMo),
# runs/demo/$(SCALE)_simulator gated against reports/baselines/demo_$(SCALE)_simulator.json. DEMO_ARGS: more
# demo options / Hydra overrides, e.g. DEMO_ARGS="sentences=100".
DEMO_DATA ?= speech
DEMO_ARGS ?=
DEMO_RUN = $(if $(filter simulator,$(DEMO_DATA)),$(SCALE)_simulator,$(SCALE))
demo: setup $(if $(filter speech,$(DEMO_DATA)),setup-nemo)
	$(PYTHON) -m eval.demo scale=$(SCALE) data=$(DEMO_DATA) $(DEMO_ARGS)

# Any evaluation: make eval ARGS="decoder=flashlight decoder.beam_size=64"  (Hydra overrides, see conf/)
eval: setup
	$(PYTHON) -m eval.run $(ARGS)

# Markdown table + plots from a run directory (default: the demo's).
REPORT_DIR ?= $(RUN_DIR)/demo/$(DEMO_RUN)
report: setup
	@test -d $(REPORT_DIR) || { echo "report: $(REPORT_DIR) does not exist; run 'make demo' first or pass REPORT_DIR=runs/<experiment>/<run>"; exit 2; }
	$(PYTHON) -m reports.cli $(REPORT_DIR)

# Every committed GPU evidence run directory (reports/evidence/<machine>_<date>/<experiment>/<run>) -> tables + plots.
report-evidence: setup
	@for d in $$(find reports/evidence -name results.jsonl -exec dirname {} \; | sort); do \
	  echo "== $$d"; $(PYTHON) -m reports.cli $$d || exit 1; done

# Committed evidence keeps its hypothesis files gzip-compressed (hyps.jsonl.gz, read like hyps.jsonl everywhere), so
# the tree stays small enough to travel to the GPU host beside the wheels (64 MiB in all): run after adding evidence.
compress-evidence:
	$(PYTHON) -c "from eval.results import compress_hyps; print(len(compress_hyps('reports/evidence', 100_000)), 'compressed')"

# The GPU test routine, on a CUDA host, every time kernel code changes: gpu tests + compute-sanitizer
# memcheck / racecheck / synccheck over both smokes (summary and logs under $$OUT, default /tmp/gpu_check_out).
gpu-check:
	bash .ci/gpu-host/gpu_check.sh

# Regression gate of a run against a committed baseline: WER (throughput only where the baseline or GATE_ARGS asks:
# GATE_ARGS="--metrics wer,rtfx_ratio --rtfx-reference wfst" gates each decoder's RTFx relative to wfst's in the same
# run, which machine load leaves alone). Default: the demo run; any run directory, e.g. a GPU benchmark:
# make gate GATE_RUN=runs/wfst_bench/h200 GATE_BASELINE=reports/baselines/x.json
GATE_RUN ?= $(RUN_DIR)/demo/$(DEMO_RUN)
GATE_BASELINE ?= reports/baselines/demo_$(DEMO_RUN).json
GATE_ARGS ?=
gate: setup
	@test -f $(GATE_RUN)/results.jsonl || { echo "gate: no $(GATE_RUN)/results.jsonl; run 'make demo' first or pass GATE_RUN=runs/<experiment>/<run>"; exit 2; }
	$(PYTHON) -m eval.gate $(GATE_RUN) $(GATE_BASELINE) $(GATE_ARGS)

# The `nemo` extra (NeMo 3.0 on the CPU torch; ~70 s in a fresh venv) and the `speech` extra (espeak-ng wheel,
# soxr): what the speech demo needs, and what the tests install so the Conformer-CTC end-to-end and speech corpus
# tests run instead of skipping; NEMO=0 leaves them out of `make test` (those tests then skip).
NEMO ?= 1
setup-nemo: .setup-nemo.stamp
.setup-nemo.stamp: .setup.stamp
	$(PYTHON) -m pip install -q -e '.[baselines,dev,nemo,speech]'
	@touch $@

# Everything that runs without a GPU, `slow` included (the WFST-vs-k2py/Kaldi agreement on the embedded
# sets, ~2 min), in PYTEST_WORKERS pytest-xdist processes (2: ~9 min of tests on 2 cores instead of ~15 serially;
# whole files per worker, so a module's fixtures run once; shared builds are staged and locked; 0 = one process).
# `make test-fast` leaves the slow ones out.
PYTEST_WORKERS ?= 2
test: setup $(if $(filter 1,$(NEMO)),setup-nemo)
	$(PYTHON) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast: setup
	$(PYTHON) -m pytest -q -m "not slow" $(PYTEST_ARGS)

test-gpu: setup
	@$(PYTHON) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || echo "test-gpu: no CUDA device on this machine, GPU tests will be skipped"
	$(PYTHON) -m pytest -q -m gpu $(PYTEST_ARGS)

# GPU benchmarks, each writing a run directory under runs/bench (render: python -m reports.cli runs/bench/...):
# CTC vs the seed system (OASR unpacked in .anchors/oasr, else its rows say why), WFST vs Riva on the
# $(BENCH_SCALE) workload's graphs (`make graphs SCALE=...` first; on the GPU host SCALE=small bash
# eval/bench/wfst_gpu_run.sh does workload, graphs and benchmark in one call).
BENCH_SCALE ?= $(SCALE)
BENCH_GRAPHS ?= data/graphs/$(BENCH_SCALE)/char_blanklast
bench: setup
	@status=0; $(PYTHON) -m eval.bench.ctc_bench || status=1; \
	$(PYTHON) -m eval.bench.wfst_bench --scale $(BENCH_SCALE) \
	  --graph-dir compact=$(BENCH_GRAPHS)/compact --graph-dir normal=$(BENCH_GRAPHS)/normal || status=1; \
	exit $$status

clean:
	rm -rf .setup.stamp runs outputs data/cache
