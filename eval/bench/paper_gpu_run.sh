#!/usr/bin/env bash
# One device call on the GPU host: the GPU rows of the paper's Table 3 and Table 2 (eval/paper.py) on the
# project's Conformer-CTC. The test sets, the tiny workload and its graphs are regenerated ON THE HOST from their
# seeds (espeak-ng wheel, 16 processes); the model is the committed .nemo.
#
#   here, once (one .whl: the three lists minus riva / tvm-ffi, to stay under the 64 MiB carry limit with the tree):
#     for l in requirements requirements-nemo requirements-speech; do ../shared/gpu-host/fetch-wheels.sh .ci/gpu-host/$l.txt; done
#     rm .whl/riva_asrlib_decoder-* .whl/apache_tvm_ffi-*
#   there:       bash eval/bench/paper_gpu_run.sh     (carry: .whl; timeout_s 600)
#   then here:   python -m reports.paper <$OUT/speech_tiny copied to reports/evidence/<machine>_<date>/speech_tiny>
#
# Env: SENTENCES (500 per test set, as the CPU evidence), PROCESSES (16: the paper's Flashlight processes),
#   EXPERIMENTS (table3 table2), PRECISION (fp32), EVAL_GIT_COMMIT (the commit the results record; the host's
#   copy of .git is stale).
set -o pipefail
SENTENCES=${SENTENCES:-500}; PROCESSES=${PROCESSES:-16}; EXPERIMENTS=${EXPERIMENTS:-table3 table2}
OUT=${OUT:-/tmp/paper_gpu_out}; mkdir -p "$OUT" || exit 1
exec > >(tee -a "$OUT/paper_gpu.log") 2>&1
export PYTHONUNBUFFERED=1 BEAMDEC_COMPONENTS=${BEAMDEC_COMPONENTS:-ctc,wfst}
stage() { local name=$1 s=$SECONDS; shift; "$@"; local rc=$?; echo "STAGE $name rc=$rc wall_s=$(( SECONDS - s ))"; return $rc; }
export PYTHONPATH=.:${PYTHONPATH:-}
if [ -n "${WHEELS-.whl}" ]; then
  stage wheels python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site ${WHEELS:-.whl}/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
stage ext_build python3 -c "from decoders._ext import ops; ops()" > "$OUT/ext_build.log" 2>&1 & EXT=$!
stage workload python3 -m recipes.workload scale=tiny || exit 1
stage graphs python3 -m recipes.build_graphs workload.scale=tiny > "$OUT/graphs.log" 2>&1 || { tail "$OUT/graphs.log"; exit 1; }
wait $EXT; tail -2 "$OUT/ext_build.log"
ROOT=$OUT/speech_tiny
for e in $EXPERIMENTS; do
  stage $e python3 -m eval.paper $e --sentences $SENTENCES --boost-sentences $SENTENCES --processes $PROCESSES \
    --precision ${PRECISION:-fp32} --out-root $ROOT --speech-root data/speech_paper --cache-dir data/logprob_cache_paper
done
stage render python3 -m reports.paper $ROOT

# $OUT gives back at most 8 files, two folders down: the evidence travels as one archive
tar czf "$OUT/speech_tiny.tgz" -C "$OUT" speech_tiny && rm -rf "$ROOT" && ls -la "$OUT"
