#!/usr/bin/env bash
# Builds, on this (CPU) machine, every git-ignored folder the GPU-host calls carry (a fresh checkout has none):
#   .whl         requirements.txt (hydra, jiwer, kaldifst, kaldilm, k2py, flashlight-text, riva, kaldi-decoder, tvm-ffi)
#   .whl-lite    the part of .whl the NeMo / speech calls need beside .whl-nemo and .whl-speech (64 MiB carry limit)
#   .whl-oasr    .whl-lite + tvm-ffi: the WFST-vs-OASR bench calls (WHEELS=.whl-oasr; carry it with .anchors)
#   .whl-bench   .whl less the CPU-only baselines: WFST vs Riva and OASR in one call (WHEELS=.whl-bench, with .anchors)
#   .whl-nemo    requirements-nemo.txt
#   .whl-speech  requirements-speech.txt (espeak-ng for the synthesized test sets)
#   .anchors     the seed system's source (OASR), unpacked from ../shared/anchors
# and, with LP=1, data/lp/speech_other_100.pt (the Conformer-CTC's log-probs of the demo's 100 test-other sentences;
# runs `make demo` first when its speech sets are not built: ~5 min).
#   usage: bash .ci/gpu-host/prepare_carry.sh        (~1-2 min; idempotent: existing folders are kept)
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
fetch=../shared/gpu-host/fetch-wheels.sh
[ -x "$fetch" ] || { echo "prepare_carry: $fetch not found (run from the project checkout beside ../shared)" >&2; exit 2; }
exclude() { grep -qx "/$1/" .git/info/exclude 2>/dev/null || echo "/$1/" >> .git/info/exclude; }
# fetch-wheels.sh always writes .whl/: park an existing .whl while the other lists are fetched
wheels_into() {  # wheels_into DIR LIST
  local dir=$1 list=$2
  if [ -d "$dir" ] && ls "$dir"/*.whl > /dev/null 2>&1; then echo "== $dir: kept ($(ls "$dir" | wc -l) wheels)"; return; fi
  echo "== $dir <- $list"
  local parked=""
  if [ "$dir" != .whl ] && [ -d .whl ]; then mv .whl .whl.parked; parked=1; fi
  "$fetch" "$list" > /tmp/prepare_carry_$$.log 2>&1 || { cat /tmp/prepare_carry_$$.log; exit 1; }
  if grep -q "could not fetch" /tmp/prepare_carry_$$.log; then grep "could not fetch" /tmp/prepare_carry_$$.log; exit 1; fi
  [ "$dir" != .whl ] && mv .whl "$dir"
  [ -n "$parked" ] && mv .whl.parked .whl
  exclude "$dir"
}
wheels_into .whl .ci/gpu-host/requirements.txt
wheels_into .whl-nemo .ci/gpu-host/requirements-nemo.txt
wheels_into .whl-speech .ci/gpu-host/requirements-speech.txt
if [ ! -d .whl-lite ]; then
  echo "== .whl-lite <- .whl (hydra, omegaconf, antlr4, jiwer, rapidfuzz, kaldilm, kaldifst, flashlight-text)"
  mkdir -p .whl-lite
  for p in hydra_core omegaconf antlr4 jiwer rapidfuzz kaldilm kaldifst flashlight_text; do cp .whl/${p}*.whl .whl-lite/; done
  exclude .whl-lite
fi
if [ ! -d .whl-oasr ]; then
  # the WFST-vs-OASR calls (DECODERS="wfst oasr") without riva / k2py / kaldi-decoder: .whl (18 MB) + .anchors + the
  # tree (~47 MB) passed the carry limit in session 20; WHEELS=.whl-oasr eval/bench/wfst_ab_gpu_run.sh
  echo "== .whl-oasr <- .whl-lite + apache_tvm_ffi (OASR's JIT)"
  mkdir -p .whl-oasr && cp .whl-lite/*.whl .whl/apache_tvm_ffi*.whl .whl-oasr/
  exclude .whl-oasr
fi
if [ ! -d .whl-bench ]; then
  # the WFST bench calls with Riva AND OASR in one process (DECODERS="wfst riva oasr"): .whl without the CPU-only
  # baselines' wheels (k2py, kaldi-decoder, flashlight-text), so that it, .anchors and the tree fit the carry limit;
  # WHEELS=.whl-bench eval/bench/wfst_gpu_run.sh
  echo "== .whl-bench <- .whl less k2py, kaldi_decoder, flashlight_text"
  mkdir -p .whl-bench && cp .whl/*.whl .whl-bench/ && rm -f .whl-bench/{k2py,kaldi_decoder,flashlight_text}-*.whl
  exclude .whl-bench
fi
if [ ! -f .anchors/oasr/oasr/jit/wfst_decoder.py ]; then
  echo "== .anchors/oasr <- ../shared/anchors/oasr-*.tar.xz"
  mkdir -p .anchors/oasr && tar -xJf ../shared/anchors/oasr-*.tar.xz -C .anchors/oasr
  exclude .anchors
fi
if [ "${LP:-0}" = 1 ] && [ ! -f data/lp/speech_other_100.pt ]; then
  echo "== data/lp/speech_other_100.pt (make demo first if needed, then eval.bench.ctc_lm_bench --dump-speech-lp)"
  [ -d data/speech ] || make demo
  mkdir -p data/lp && python3 -m eval.bench.ctc_lm_bench --max-utts 100 --dump-speech-lp data/lp/speech_other_100.pt
fi
du -sh .whl .whl-lite .whl-oasr .whl-bench .whl-nemo .whl-speech .anchors 2>/dev/null
echo "carry limit 64 MiB with the tree ($(git ls-files | xargs du -cb 2>/dev/null | tail -1 | cut -f1) bytes tracked)"
