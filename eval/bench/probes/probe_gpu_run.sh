#!/usr/bin/env bash
# GPU host: build and run one hardware probe of this folder (~20-30 s; no carry needed). Probes:
#   barrier  barrier_probe.cu: grid / cluster barriers and dependent round trips, ns per operation (session 23)
#   warp     warp_probe.cu: one warp's dependent steps (REDUX, VOTE, SHFL, FLO, LDS, the CTC round), cycles (session 24)
#   launch   launch_probe.cu: host time per launch and a 3-kernel chain by parameter size, PDL, cluster (session 30)
#   there: bash eval/bench/probes/probe_gpu_run.sh barrier|warp|launch   -> $OUT/<name>_probe.txt (tab-separated rows)
# (sessions 23 and 24 ran the same steps as barrier_probe_gpu_run.sh / warp_probe_gpu_run.sh, merged into this one)
set -euo pipefail
name=${1:?usage: probe_gpu_run.sh barrier|warp|launch}
src=eval/bench/probes/${name}_probe.cu
[ -f "$src" ] || { echo "probe_gpu_run.sh: no probe '$name' ($src)" >&2; exit 2; }
OUT=${OUT:-/tmp/probe_out}; mkdir -p "$OUT"
echo "building $src (nvcc, ~20 s) ..."
nvcc -std=c++17 -O3 -arch=sm_90 -o "/tmp/${name}_probe" "$src"
echo "running (a few seconds) ..."
"/tmp/${name}_probe" | tee "$OUT/${name}_probe.txt"
