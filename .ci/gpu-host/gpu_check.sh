#!/usr/bin/env bash
# The GPU test routine, run on the GPU host every time kernel code changes (issue 19): the gpu-marked tests of
# both decoders, then compute-sanitizer memcheck, racecheck and synccheck over the CTC and WFST smokes (which
# exercise every kernel variant: CTC one-warp / block 128-256-512, flat and paged, streaming, state check/seal;
# WFST with and without epsilon closure, boosts, fp16, -inf). Logs and a summary go to $OUT.
#
#   here:   ../shared/gpu-host/fetch-wheels.sh .ci/gpu-host/requirements.txt
#   there:  bash .ci/gpu-host/gpu_check.sh          (device call; carry .whl; ~5 min on an H200)
# Exit status: non-zero when a test fails or a sanitizer reports errors.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=.:${PYTHONPATH:-}
if [ -d .whl ] && [ -z "${NO_WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit 1
fi
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/summary.txt"
echo "== building the extension (first use: ~1-2 min)"
python3 -c "from decoders._ext import load_extension; load_extension()" || exit 1
echo "== gpu tests"
python3 -m pytest -q -m gpu -p no:cacheprovider ${GPU_TESTS:-tests} 2>&1 | tee "$OUT/gpu_tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "gpu tests: $(tail -1 "$OUT/gpu_tests.txt")" >> "$OUT/summary.txt"
for smoke in ctc_smoke wfst_smoke; do
  for tool in memcheck racecheck synccheck; do
    echo "== $tool $smoke"
    log="$OUT/sanitizer_${smoke}_${tool}.txt"
    compute-sanitizer --tool $tool --error-exitcode 3 python3 -m eval.bench.$smoke > "$log" 2>&1
    rc=$?
    line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    echo "$tool $smoke: rc=$rc ${line:-no summary line}" | tee -a "$OUT/summary.txt"
    [ $rc -eq 0 ] || { status=1; tail -30 "$log"; }
  done
done
cat "$OUT/summary.txt"
exit $status
