#!/usr/bin/env bash
# One device call after a WFST kernel change: the WFST gpu tests and compute-sanitizer (memcheck, racecheck) over
# eval.bench.wfst_smoke on the GPU, while the benchmark's workload, graphs and log-probs are built on the host's CPUs
# beside them; then, on an idle GPU, eval/bench/wfst_gpu_run.sh (ours and OASR in one process, the run directory
# runs/bench/wfst_vs_oasr/$RUN) on those inputs.
#   there: EVAL_GIT_COMMIT=<commit> SCALE=bench bash eval/bench/wfst_verify_gpu_run.sh   (carry .whl-oasr .anchors)
# Env: SCALE (bench), GRAPHS (HLG), TOPOLOGIES (compact), GPU_TESTS (the offline, streaming and device-layout WFST
# tests), SANITIZERS ("memcheck racecheck"), BENCH_DEADLINE_S (skip the benchmark when the call is this far in: 330),
# BENCH=0 (no benchmark and no inputs built: the tests and the sanitizers only).
set -o pipefail
SCALE=${SCALE:-bench}; GRAPHS=${GRAPHS:-HLG}; TOPOLOGIES=${TOPOLOGIES:-compact}; UTTS=${UTTS:-200}
OUT=${OUT:-/tmp/wfst_gpu_out}; mkdir -p "$OUT" data/lp
export PYTHONUNBUFFERED=1 BEAMDEC_COMPONENTS=wfst PYTHONPATH=/tmp/site:.:${PYTHONPATH:-}
stage() { local name=$1 s=$SECONDS; shift; "$@"; local rc=$?; echo "STAGE $name rc=$rc wall_s=$(( SECONDS - s ))"; return $rc; }
stage wheels python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  ${WHEELS:-.whl-oasr}/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LP=data/lp/${SCALE}_other_char_$UTTS.pt; PREP=
[ "${BENCH:-1}" = 0 ] || ( python3 -m recipes.workload scale=$SCALE \
  && { [ -f $LP ] || python3 -m eval.bench.wfst_bench --scale $SCALE --kind char --set other --max-utts $UTTS --dump-lp $LP; } \
  && python3 -c "from recipes.build_graphs import build_graphs
build_graphs(scale='$SCALE', token_kinds=['char'], blanks=['last'], topologies=[$(printf "'%s', " $TOPOLOGIES)])"
) > "$OUT/prepare.log" 2>&1 & PREP=$!
stage ext_build python3 -c "from decoders._ext import ops; ops()" > "$OUT/ext_build.log" 2>&1 || { tail -30 "$OUT/ext_build.log"; exit 1; }
stage gpu_tests timeout ${TESTS_TIMEOUT:-200} python3 -m pytest -q -m gpu -p no:cacheprovider \
  ${GPU_TESTS:-tests/test_wfst_gpu.py tests/test_wfst_stream_gpu.py tests/test_wfst_device_layout.py} > "$OUT/gpu_tests.txt" 2>&1
tail -1 "$OUT/gpu_tests.txt"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.txt" | head -20
for tool in ${SANITIZERS:-memcheck racecheck}; do
  stage "$tool wfst_smoke" timeout ${SANITIZER_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 3 \
    python3 -m eval.bench.wfst_smoke > "$OUT/sanitizer_wfst_smoke_$tool.txt" 2>&1
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|smoke ok|walk forms|fenced arrive|early loads|carried ranges|bound max" "$OUT/sanitizer_wfst_smoke_$tool.txt" | head -14
done
[ -z "$PREP" ] || stage prepare wait $PREP || { tail -20 "$OUT/prepare.log"; exit 1; }
if [ "${BENCH:-1}" = 0 ]; then
  :
elif [ $SECONDS -ge ${BENCH_DEADLINE_S:-330} ]; then
  echo "benchmark skipped: $SECONDS s past BENCH_DEADLINE_S=${BENCH_DEADLINE_S:-330}"
else
  RUN=${RUN:-${SCALE}_verify} SCALE=$SCALE GRAPHS=$GRAPHS TOPOLOGIES=$TOPOLOGIES DECODERS="${DECODERS:-wfst oasr}" \
    WHEELS= OUT="$OUT/bench" timeout ${BENCH_TIMEOUT:-260} bash eval/bench/wfst_gpu_run.sh > "$OUT/bench.log" 2>&1
  echo "bench rc=$?"; grep "STAGE" "$OUT/bench.log" | tr '\n' ' '; echo
  d=runs/bench/wfst_vs_oasr/${RUN:-${SCALE}_verify}
  [ -f $d/results.jsonl ] && python3 -m reports.cli $d > /dev/null 2>&1
  grep "^| compact\|^| normal" $d/report.md 2>/dev/null | cut -c1-200
  ( cd runs/bench && tar czf "$OUT/wfst_verify_runs.tgz" wfst_vs_oasr wfst_vs_riva 2>/dev/null )
fi
echo "total_s=$SECONDS"
( cd "$OUT" && tar czf /tmp/wfst_verify_call.tgz . ) && find "$OUT" -mindepth 1 -delete && mv /tmp/wfst_verify_call.tgz "$OUT/"
