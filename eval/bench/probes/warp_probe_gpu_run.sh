#!/usr/bin/env bash
# GPU host: build and run the warp-step latency probe (eval/bench/probes/warp_probe.cu); ~20 s. No carry needed.
#   there: bash eval/bench/probes/warp_probe_gpu_run.sh      -> $OUT/warp_probe.txt (tab-separated rows: step, configuration, cycles per step)
set -euo pipefail
OUT=${OUT:-/tmp/warp_probe_out}; mkdir -p "$OUT"
echo "building eval/bench/probes/warp_probe.cu (nvcc, ~15 s) ..."
nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/warp_probe eval/bench/probes/warp_probe.cu
echo "running (a second) ..."
/tmp/warp_probe | tee "$OUT/warp_probe.txt"
