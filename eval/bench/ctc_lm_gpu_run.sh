#!/usr/bin/env bash
# One GPU-host call for the fused CTC + LM kernel (issue 20): its gpu tests (kernel == its CPU op == the torch path ==
# the reference, thread-count invariance, long and wide inputs, compute-sanitizer memcheck/racecheck on the kernel),
# then ours (fused and torch paths) vs NeMo's batched beam search + NGramGPULanguageModel on the simulator.
# The kernel's gpu tests first passed on the H200 in `bash .ci/gpu-host/gpu_check.sh` (2026-12-01, session 4), so
# FUSED_VERIFIED_ON_GPU = True in decoders/ctc_lm.py (kernel='auto' picks it on CUDA); this call reruns them.
#
#   here:   ../shared/gpu-host/fetch-wheels.sh .ci/gpu-host/requirements.txt        (-> .whl)
#           ../shared/gpu-host/fetch-wheels.sh .ci/gpu-host/requirements-nemo.txt   (NeMo's; put them in .whl-nemo:
#           the tree + .whl + NeMo's wheels may exceed the 64 MiB carry limit -- then carry only the small
#           pure-Python wheels of .whl the harness imports (Hydra, OmegaConf, antlr4, the WER package, rapidfuzz) in
#           .whl-lite)
#   there:  bash eval/bench/ctc_lm_gpu_run.sh          (device call; carry .whl or .whl-lite, and .whl-nemo; ~4 min)
# Without NeMo's wheels its rows are unavailable rows with the reason; ours are still measured.
# SOURCES="speech simulator" adds the real-speech rows: the test-other set is synthesized on the host first
#   (recipes.speech_corpus, SPEECH_SENTENCES of them, default 200; carry .whl-speech too:
#   ../shared/gpu-host/fetch-wheels.sh .ci/gpu-host/requirements-speech.txt, moved to .whl-speech) and the
#   committed Conformer-CTC computes its log-probs once before any decoder is timed.
set -uo pipefail
TOP=${OUT:-/tmp/ctc_lm_out}; OUT=$TOP/results; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=.:${PYTHONPATH:-} BEAMDEC_COMPONENTS=ctc  # one build for the whole call
SOURCES=${SOURCES:-simulator}
wheels=$(ls .whl/*.whl .whl-lite/*.whl .whl-nemo/*.whl .whl-speech/*.whl 2>/dev/null)
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels \
    && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit 1
fi
t0=$(date +%s)
stage() { echo "== [$(( $(date +%s) - t0 )) s] $1"; shift; "$@"; }
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/summary.txt"
stage build python3 -c "from decoders._ext import load_extension; load_extension()" > "$OUT/ext_build.log" 2>&1 \
  || { cat "$OUT/ext_build.log"; exit 1; }
stage gpu-tests python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_ctc_lm.py tests/test_ctc_lm_fused.py 2>&1 \
  | tee "$OUT/gpu_tests.txt" | tail -20
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "ctc_lm gpu tests: $(tail -1 "$OUT/gpu_tests.txt")" >> "$OUT/summary.txt"
case " $SOURCES " in *" speech "*)
  stage speech-synthesis python3 -m recipes.speech_corpus out_root=data/speech train_hours=0 dev_sentences=0 \
    test_sentences=${SPEECH_SENTENCES:-200} > "$OUT/speech_synthesis.log" 2>&1 || { tail -5 "$OUT/speech_synthesis.log"; status=1; };;
esac
for kernel in fused torch; do
  stage "bench ($kernel)" python3 -m eval.bench.ctc_lm_bench --sources $SOURCES --batches 1 200 --b1-utts 30 \
    --kernel $kernel --output-dir "$OUT/runs" --run h200_$kernel 2>&1 | tee "$OUT/bench_$kernel.log" | tail -12
done
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
cp "$OUT/summary.txt" "$TOP/summary.txt"
tar czf "$TOP/results.tar.gz" -C "$TOP" results && rm -rf "$OUT"
cat "$TOP/summary.txt"
exit $status
