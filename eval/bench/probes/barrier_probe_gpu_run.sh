#!/usr/bin/env bash
# GPU host: build and run the barrier / round-trip probe (eval/bench/probes/barrier_probe.cu); ~30 s. No carry needed.
#   there: bash eval/bench/probes/barrier_probe_gpu_run.sh      -> $OUT/barrier_probe.txt (tab-separated rows: primitive, configuration, ns per operation)
set -euo pipefail
OUT=${OUT:-/tmp/barrier_probe_out}; mkdir -p "$OUT"
echo "building eval/bench/probes/barrier_probe.cu (nvcc, ~20 s) ..."
nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/barrier_probe eval/bench/probes/barrier_probe.cu
echo "running (a few seconds) ..."
/tmp/barrier_probe | tee "$OUT/barrier_probe.txt"
