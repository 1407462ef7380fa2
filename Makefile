# The map of everyday commands. `make demo` and `make test` are the two set-up commands of the README:
# each installs what it needs on a fresh machine (via `setup`, idempotent) before doing its job.
PYTHON ?= python3
SCALE ?= tiny
RUN_DIR ?= runs
PYTEST_ARGS ?=

.PHONY: setup demo test test-gpu bench graphs eval report gate workload clean

setup: .setup.stamp
.setup.stamp: pyproject.toml
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q torch==2.13.0
	$(PYTHON) -m pip install -q -e '.[baselines,dev]'
	@touch $@

workload: setup
	$(PYTHON) -m recipes.workload scale=$(SCALE)

graphs: setup
	$(PYTHON) -m recipes.build_graphs workload.scale=$(SCALE)

# Main job on the embedded workload: data + graphs + every decoder available here + comparison table.
demo: setup
	$(PYTHON) -m eval.demo scale=$(SCALE)

eval: setup
	$(PYTHON) -m eval.run $(ARGS)

report: setup
	$(PYTHON) -m reports.cli $(RUN_DIR)

gate: setup
	$(PYTHON) -m eval.gate $(RUN_DIR)/demo/results.jsonl reports/baselines/demo_$(SCALE).json

test: setup
	$(PYTHON) -m pytest -q -m "not slow" $(PYTEST_ARGS)

test-gpu: setup
	$(PYTHON) -m pytest -q -m gpu $(PYTEST_ARGS)

bench: setup
	$(PYTHON) -m eval.bench.ctc_bench
	$(PYTHON) -m eval.bench.wfst_bench

clean:
	rm -rf .setup.stamp runs outputs data/cache
