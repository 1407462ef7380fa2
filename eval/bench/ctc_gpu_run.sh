#!/usr/bin/env bash
# One device call for the CTC prefix beam search (issue 16's CTC goals): the CTC gpu tests, the same-run side by side
# with the seed system's decoder (eval.bench.ctc_bench: offline kernel / api, streaming, streaming at fixed stream
# lengths), Nsight Compute profiles of the decode kernels, and compute-sanitizer over the CTC smoke.
#
#   here:   bash .ci/gpu-host/prepare_carry.sh       (.whl with apache-tvm-ffi for OASR's JIT, .anchors/oasr)
#   there:  EVAL_GIT_COMMIT=<hash> bash eval/bench/ctc_gpu_run.sh   (device call; carry .whl .anchors; ~2-7 min)
# Session 14's call (H100, 104 s with a 2-arm A/B and a test subset; nsys is not installed there):
#   DEADLINE_S=250 BEAMDEC_COMPONENTS=ctc STAGES="tests bench nsys" GPU_TESTS="..." BENCH_ARGS="--repeats 10
#   --stream-lengths 32 1000 2000" AB_ENVS="BEAMDEC_CTC_ROUNDS=branch BEAMDEC_CTC_PREPASS=rank;BEAMDEC_CTC_ROUNDS=select
#   BEAMDEC_CTC_PREPASS=warp" bash eval/bench/ctc_gpu_run.sh
# Env: STAGES (default "tests bench ncu sanitizers"; "profile": eval.bench.ctc_stream_profile once per ';'-separated
# PROFILE_ENVS entry, PROFILE_ARGS its arguments), RUN (run name: default h200_<commit>), BENCH_ARGS (more
# eval.bench.ctc_bench arguments, e.g. "--no-streaming --repeats 20"), AB_ENVS (';'-separated environment settings:
# the bench runs once per entry, run name suffixed by the entry's index, e.g. "BEAMDEC_CTC_KERNEL=block;"),
# AB_IN_PROCESS (switches for ctc_bench --ab-env: the A/B interleaved per repeat in one process, e.g.
# "BEAMDEC_CTC_ROUNDS=branch BEAMDEC_CTC_PREPASS=rank"; several arms separated by ';', each measured beside the
# defaults, e.g. "BEAMDEC_CTC_CHECK=separate;BEAMDEC_CTC_ZERO=memset BEAMDEC_CTC_FILL=torch"), NCU_SHAPES ("B:T:V:beam ..." profiled shapes, default "1:200:5000:10 16:200:5000:10 64:200:5000:10"),
# GPU_TESTS_THEN_K (a -k expression run as a second pytest process after GPU_TESTS_K's: new forms' tests apart),
# GPU_TESTS_K (a pytest -k expression for the gpu tests: GPU_TESTS is split on spaces, so an expression with spaces
# there fails, as in session 19's first call), TESTS_TIMEOUT_S (300: the gpu tests stage's cap), NCU_SET (full), "nsys" in STAGES: Nsight Systems timelines of offline B=1 and one 16-frame stream, SANITIZERS (memcheck racecheck synccheck).
# Results: $OUT/summary.txt, $OUT/ctc_gpu.log, $OUT/ctc_gpu.tgz (runs/, ncu/ reports and their CSV pages, logs).
set -o pipefail
OUT=${OUT:-/tmp/ctc_gpu_out}; W=$OUT/work; mkdir -p "$W/runs" "$W/ncu" || exit 1
exec > >(tee -a "$OUT/ctc_gpu.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=.:${PYTHONPATH:-}
STAGES=${STAGES:-tests bench ncu sanitizers}
# the device copy's .git can be a stale commit of the session: pass EVAL_GIT_COMMIT=<hash> literally in the command
COMMIT=${EVAL_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'h100|h200|a100|l40s?' | head -1 | tr 'A-Z' 'a-z')
RUN=${RUN:-${GPU:-gpu}_$COMMIT}
DEADLINE_S=${DEADLINE_S:-560}  # a stage that would start later than this is skipped (the call's limit is 600 s)
stage() { local name=$1 s=$SECONDS; shift
  if [ $SECONDS -gt $DEADLINE_S ]; then echo "STAGE $name skipped (deadline)" | tee -a "$OUT/summary.txt"; return 124; fi
  echo "== [$SECONDS s] $name"; timeout $(( DEADLINE_S + 30 - SECONDS )) "$@"; local rc=$?
  echo "STAGE $name rc=$rc wall_s=$(( SECONDS - s ))" | tee -a "$OUT/summary.txt"; return $rc; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/summary.txt"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit 1
fi
stage ext_build python3 -c "from decoders._ext import load_extension; load_extension()" > "$W/ext_build.log" 2>&1 \
  || { tail -30 "$W/ext_build.log"; exit 1; }
status=0
if has tests; then
  # a hung kernel costs TESTS_TIMEOUT_S (300 s), not the call: the whole stage is capped, and pytest's faulthandler
  # prints every thread's stack (the hung test's name in it) after 120 s in one test (session 17: a kernel form
  # hung and took the call's ten minutes)
  stage gpu_tests timeout ${TESTS_TIMEOUT_S:-300} python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 ${GPU_TESTS:-tests/test_ctc_gpu.py tests/test_ctc_lm_fused.py} ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} \
    > "$W/gpu_tests.txt" 2>&1 || status=1
  tail -3 "$W/gpu_tests.txt"; echo "gpu tests: $(tail -1 "$W/gpu_tests.txt")" >> "$OUT/summary.txt"
  if [ -n "${GPU_TESTS_THEN_K:-}" ]; then
    # a second process for the tests of forms not yet run on a GPU: a sticky CUDA error in one of them (an illegal
    # address) would fail every later test of its process, so they run after the others and apart from them
    if ! stage gpu_tests_then timeout ${TESTS_TIMEOUT_S:-300} python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=120 ${GPU_TESTS:-tests/test_ctc_gpu.py tests/test_ctc_lm_fused.py} -k "$GPU_TESTS_THEN_K" \
      > "$W/gpu_tests_then.txt" 2>&1; then
      status=1
      # a form that fails its tests is not measured: the bench's in-process arm would time (or crash on) it
      [ -n "${AB_IN_PROCESS:-}" ] && echo "AB_IN_PROCESS dropped ($AB_IN_PROCESS): gpu_tests_then failed" | tee -a "$OUT/summary.txt"
      AB_IN_PROCESS=""
    fi
    tail -3 "$W/gpu_tests_then.txt"; echo "gpu tests (then): $(tail -1 "$W/gpu_tests_then.txt")" >> "$OUT/summary.txt"
  fi
fi
if has bench; then
  IFS=';' read -r -a envs <<< "${AB_ENVS:-}"; [ ${#envs[@]} -eq 0 ] && envs=("")
  i=0
  for e in "${envs[@]}"; do
    name=$RUN; [ ${#envs[@]} -gt 1 ] && name=${RUN}_$i
    stage "bench[$e]" env $e EVAL_GIT_COMMIT=$COMMIT python3 -m eval.bench.ctc_bench --run "$name" --output-dir "$W/runs" \
      ${AB_IN_PROCESS:+--ab-env "$AB_IN_PROCESS"} ${BENCH_ARGS:-} > "$W/bench_$i.log" 2>&1 || status=1
    grep -E "^(offline|streaming|stream length)" "$W/bench_$i.log" | sed "s/^/[$i] /"
    i=$((i + 1))
  done
fi
if has profile; then  # where one stream's chunk call spends its time (eval/bench/ctc_stream_profile.py), per PROFILE_ENVS entry
  IFS=';' read -r -a penvs <<< "${PROFILE_ENVS:-}"; [ ${#penvs[@]} -eq 0 ] && penvs=("")
  j=0
  for e in "${penvs[@]}"; do
    stage "stream_profile[$e]" env $e python3 -m eval.bench.ctc_stream_profile ${PROFILE_ARGS:-} > "$W/stream_profile_$j.txt" 2>&1 \
      || status=1
    sed "s/^/[profile $j: $e] /" "$W/stream_profile_$j.txt"
    j=$((j + 1))
  done
fi
if has ncu || has nsys; then
  cat > /tmp/ctc_ncu_driver.py <<'PY'
"""Decode one OASR-benchmark shape three times with the raw op (the profiled launches are the third call's)."""
import sys
import torch
from decoders.ctc import load_ops, CtcBeamSearchConfig, CtcStreamingDecoder
B, T, V, beam = map(int, sys.argv[1:5])
g = torch.Generator(device="cuda").manual_seed(0)
if len(sys.argv) > 5 and sys.argv[5] == "stream":  # B streams as one state, chunks of T frames, 40 chunks
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=beam, blank_skip_threshold=1.0, max_seq_len=2048))
    st = dec.create_state(B, V, device="cuda")
    chunk = torch.log_softmax(torch.randn(B, T, V, device="cuda", generator=g), dim=-1)
    for _ in range(40):
        dec.decode_chunk(chunk, state=st)
    torch.cuda.synchronize()
    print("done stream", B, T, V, beam)
    sys.exit(0)
lp = torch.log_softmax(torch.randn(B, T, V, device="cuda", generator=g), dim=-1)
lens = torch.full((B,), T, dtype=torch.int32, device="cuda")
seq = T + (T & 1)
cfg = CtcBeamSearchConfig(beam_size=beam, blank_skip_threshold=1.0, max_seq_len=seq)
for _ in range(3):
    load_ops().ctc_decode_offline(lp, lens, beam, 0, 1.0, 1, seq, *cfg.storage_args(seq))
torch.cuda.synchronize()
print("done", B, T, V, beam)
PY
fi
if has nsys; then  # the GPU timeline (kernel durations and the gaps between them) of offline B=1 and one stream
  NSYS=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
  for spec in "1 200 5000 10" "1 16 5000 10 stream"; do
    rep="$W/ncu/nsys_$(echo $spec | tr ' ' _)"
    stage "nsys $spec" timeout 120 "$NSYS" profile -t cuda -o "$rep" -f true python3 /tmp/ctc_ncu_driver.py $spec > "$rep.log" 2>&1
    "$NSYS" stats --report cuda_gpu_trace --format csv -o "$rep" "$rep.nsys-rep" > /dev/null 2>&1
    "$NSYS" stats --report cuda_api_sum,cuda_gpu_kern_sum "$rep.nsys-rep" 2>/dev/null | head -60
  done
fi
if has ncu; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for spec in ${NCU_SHAPES:-1:200:5000:10 64:200:5000:10}; do
    # B:T:V:beam[:ENV=VALUE,...] (the environment of that profile, e.g. BEAMDEC_CTC_ROUNDS=select)
    IFS=: read -r b t v k envs <<< "$spec"; rep="$W/ncu/ctc_B${b}_T${t}_V${v}_k${k}${envs:+_$(echo $envs | tr ',=' '__')}"
    shape=$spec
    # every kernel of the third call (the op launches state-init/seal, pre-pass, decode, finalize per call)
    stage "ncu $shape" env ${envs//,/ } timeout 200 "$NCU" --clock-control none -k "regex:ctc_" --launch-skip 0 --launch-count ${NCU_LAUNCHES:-12} \
      --set ${NCU_SET:-full} --import-source yes -f -o "$rep" python3 /tmp/ctc_ncu_driver.py $b $t $v $k > "$rep.log" 2>&1
    "$NCU" --import "$rep.ncu-rep" --page details --csv > "$rep.details.csv" 2>/dev/null
    "$NCU" --import "$rep.ncu-rep" --page raw --csv > "$rep.raw.csv" 2>/dev/null
    "$NCU" --import "$rep.ncu-rep" --page source --csv --print-source sass -k regex:ctc_decode > "$rep.sass.csv" 2>"$rep.sass.err"
    "$NCU" --import "$rep.ncu-rep" --page source --csv --print-source cuda -k regex:ctc_decode > "$rep.cuda.csv" 2>"$rep.cuda.err"
    grep -E '"(Duration|Registers Per Thread|Achieved Occupancy|Executed Ipc Active|Warp Cycles Per Issued Instruction)"' \
      "$rep.details.csv" | awk -F'","' '{print $5 " | " $(NF-2) " " $(NF-1) " " $NF}' | head -60
  done
fi
if has sanitizers; then
  for tool in ${SANITIZERS-memcheck racecheck synccheck}; do
    log="$W/sanitizer_ctc_smoke_$tool.txt"
    stage "$tool ctc_smoke" compute-sanitizer --tool $tool --error-exitcode 3 python3 -m eval.bench.ctc_smoke > "$log" 2>&1 \
      || status=1
    echo "$tool ctc_smoke: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)" | tee -a "$OUT/summary.txt"
  done
fi
( cd "$W" && tar czf "$OUT/ctc_gpu.tgz" . ) && rm -rf "$W"
echo "total_s=$SECONDS status=$status" | tee -a "$OUT/summary.txt"
exit $status
