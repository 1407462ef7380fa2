#!/usr/bin/env bash
# One GPU-host call for the WFST lattice mode (issue 14): the lattice GPU tests, compute-sanitizer memcheck and
# racecheck over the WFST smoke (1-best and lattice kernels, the device prune included), the lattice benchmark
# (ours best / lattice / MBR vs Riva decode_mbr / decode_nbest, eval.bench.wfst_mbr_bench) and the per-kernel profile
# of lattice mode vs 1-best (eval.bench.wfst_profile), on the tiny workload's BPE TLGs rebuilt here from seeds.
#
#   here:   ../shared/gpu-host/fetch-wheels.sh .ci/gpu-host/requirements.txt
#   there:  bash eval/bench/wfst_lattice_gpu_run.sh        (device call; carry .whl; ~5 min on an H200)
# Env: SCALE (tiny), BATCH (200), UTTS (200), TESTS_TIMEOUT_S (400: the gpu tests stage's cap), LP_FILE (log-probs file instead of the simulator's; see below), SKIP_TESTS=1 (benchmarks only), SANITIZERS (memcheck racecheck; empty = none), DEADLINE_S (seconds from the start by which every stage has ended), SKIP_MBR=1 (no lattice bench), TOPOLOGIES (the BPE TLGs built: "compact normal"; the benchmarks read compact), GPU_TESTS (test files, default tests/test_wfst_lattice_gpu.py), PROFILES ("best: lattice::token lattice::warp lattice::adaptive lattice::adaptive:hash
# mbr::token mbr::warp mbr::adaptive", output:blocks-per-lane:arc-walk:state-map; empty = none), MBR_ARGS (more
# eval.bench.wfst_mbr_bench arguments, e.g. "--decoders wfst --repeats 3"), EXTRA_BENCH (a command run last; $G is
# the graph directory), BEAMDEC_LATTICE_TIMING=1 (per-phase host timings of the lattice path in the logs).
# Results: $OUT/summary.txt and $OUT/results.tar.gz (logs, and runs/: the run directories; `python -m reports.cli DIR`
# renders each) -- two files, since a device call returns at most eight.
set -uo pipefail
TOP=${OUT:-/tmp/wfst_lattice_out}; OUT=$TOP/results; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=.:${PYTHONPATH:-}
SCALE=${SCALE:-tiny} BATCH=${BATCH:-200} UTTS=${UTTS:-200}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit 1
fi
t0=$(date +%s)
# DEADLINE_S: every stage ends by then (timeout; a stage with < 20 s left is skipped), so the archive is written
# inside the device call's limit and a long stage costs its own results only
stage() {
  local name=$1 left=""; shift
  if [ -n "${DEADLINE_S:-}" ]; then
    left=$(( DEADLINE_S - ($(date +%s) - t0) ))
    [ $left -ge 20 ] || { echo "== [$(( $(date +%s) - t0 )) s] $name: skipped (deadline)" | tee -a "$OUT/summary.txt"; return 124; }
  fi
  echo "== [$(( $(date +%s) - t0 )) s] $name"
  if [ -n "$left" ]; then timeout $left "$@"; else "$@"; fi
}
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/summary.txt"
(python3 -c "from decoders._ext import load_extension; load_extension()" > "$OUT/ext_build.log" 2>&1) & EXT=$!
stage workload python3 -m recipes.workload scale=$SCALE > "$OUT/workload.log" 2>&1 || { cat "$OUT/workload.log"; exit 1; }
stage graphs python3 -c "from recipes.build_graphs import build_graphs
build_graphs(scale='$SCALE', token_kinds=['bpe'], blanks=['last'], topologies='${TOPOLOGIES:-compact normal}'.split(), max_hlg_arcs=0)" \
  > "$OUT/graphs.log" 2>&1 || { tail -20 "$OUT/graphs.log"; exit 1; }
wait $EXT || { cat "$OUT/ext_build.log"; exit 1; }
tail -2 "$OUT/ext_build.log"
export G=data/graphs/$SCALE/bpe_blanklast
if [ -z "${SKIP_TESTS:-}" ]; then
  stage gpu-tests timeout ${TESTS_TIMEOUT_S:-400} python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 ${GPU_TESTS:-tests/test_wfst_lattice_gpu.py} 2>&1 \
    | tee "$OUT/gpu_tests.txt" | tail -15
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  echo "lattice gpu tests: $(tail -1 "$OUT/gpu_tests.txt")" >> "$OUT/summary.txt"
  for tool in ${SANITIZERS-memcheck racecheck}; do
    log="$OUT/sanitizer_wfst_smoke_${tool}.txt"
    stage "$tool wfst_smoke" compute-sanitizer --tool $tool --error-exitcode 3 python3 -m eval.bench.wfst_smoke > "$log" 2>&1
    rc=$?
    line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    echo "$tool wfst_smoke: rc=$rc ${line:-no summary line}" | tee -a "$OUT/summary.txt"
    [ $rc -eq 0 ] || { status=1; tail -30 "$log"; }
  done
fi
# LP_FILE: a LogProbSet file (eval.bench.common) instead of the workload's simulator, e.g. the Conformer-CTC's log-probs of
# the demo's 100 synthesized test-other sentences, written on the CPU machine after `make demo` by `python -m
# eval.bench.ctc_lm_bench --max-utts 100 --dump-speech-lp data/lp/speech_other_100.pt` (16 MB) and carried with it
# (SCALE=tiny: the model's vocabulary is the tiny workload's BPE; UTTS=100; .whl + the file + the tree ~64 MB, under
# the 64 MiB carry limit)
LP=${LP_FILE:+--lp-file $LP_FILE}
[ -z "${SKIP_MBR:-}" ] && stage mbr-bench python3 -m eval.bench.wfst_mbr_bench --scale $SCALE --kind bpe --set other --max-utts $UTTS $LP \
  --batch $BATCH --graph-dir compact=$G/compact --output-dir "$OUT/runs" --run ${SCALE}_b$BATCH ${MBR_ARGS:-} 2>&1 \
  | tee "$OUT/mbr_bench.log" | grep -v "^  " | tail -25
# per-kernel profiles, each spec output[:blocks per lane[:arc walk[:state map]]]: by default 1-best, lattice and MBR with
# every arc walk of the lattice kernels (BEAMDEC_LATTICE_WALK token / warp / adaptive) and the hashed state map
# (BEAMDEC_LATTICE_MAP=hash), an A/B in one call
for spec in ${PROFILES-best: lattice::token lattice::warp lattice::adaptive lattice::adaptive:hash mbr::token mbr::warp mbr::adaptive}; do
  IFS=: read -r output bpl walk map <<< "$spec"
  tag=$output${bpl:+_bpl$bpl}${walk:+_$walk}${map:+_$map}
  stage "profile $output ${bpl:+(blocks per lane $bpl)} ${walk:+(walk $walk)} ${map:+(state map $map)}" \
    env ${bpl:+BEAMDEC_LATTICE_BLOCKS_PER_LANE=$bpl} ${walk:+BEAMDEC_LATTICE_WALK=$walk} ${map:+BEAMDEC_LATTICE_MAP=$map} \
    python3 -m eval.bench.wfst_profile --scale $SCALE --kind bpe --set other --output $output $LP \
    --graph-dir compact=$G/compact --batch 1 $BATCH --utts $UTTS --b1-utts 20 --output-dir "$OUT/runs" \
    --run ${SCALE}_$tag 2>&1 | tee "$OUT/profile_$tag.log" | grep -E "wall|^\| [a-z_]+(kernel|Kernel)" | head -24
done
[ -n "${EXTRA_BENCH:-}" ] && stage extra bash -c "$EXTRA_BENCH"
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
cp "$OUT/summary.txt" "$TOP/summary.txt"
tar czf "$TOP/results.tar.gz" -C "$TOP" results && rm -rf "$OUT"
cat "$TOP/summary.txt"
exit $status
