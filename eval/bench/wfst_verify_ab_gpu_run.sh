#!/usr/bin/env bash
# One device call after an opt-in WFST kernel switch is written: eval/bench/wfst_verify_gpu_run.sh (the WFST gpu
# suites and memcheck / racecheck over the 1-best smoke while the bench inputs are built beside them, then ours and
# OASR's WFST decoder in one process on those inputs: run RUN), then on the same warm machine and inputs the B arms of
# eval/bench/wfst_ab_gpu_run.sh (SKIP_A=1: A is that run) for AB_ENVS, each started only while it still fits the call.
#   there:     EVAL_GIT_COMMIT=<commit> AB_ENVS="BEAMDEC_WFST_EARLY_LOADS=2 BEAMDEC_REPEAT=1" \
#                bash eval/bench/wfst_verify_ab_gpu_run.sh                                   (carry .whl-oasr .anchors)
#   then here: tar xzf <files_at>/v/wfst_verify_call.tgz (logs, the verify run directories) and
#              <files_at>/ab_call.tgz (the B arms' logs, run directories and the rendered A/B)
# Env: SCALE (bench), TOPOLOGIES (compact), GRAPHS (HLG), BATCHES (the B arms': "1 4 32"), AB_ENVS (required),
# B_DECODERS (the B arms' decoders: "wfst oasr", so each arm's process also reads OASR; "wfst": ours only),
# CALL_S (the call's limit, 600), ARM_S (an arm's limit, 65: none starts later than CALL_S - ARM_S - 20 s into the
# call), VERIFY_TESTS_TIMEOUT (150), HOST_PROBE (1: eval/bench/probes/wfst_host_overhead.py on the bench HLG at
# batch 1 when 80 s of the call are left; 0: not), and the verify script's own settings (GPU_TESTS, SANITIZERS, ...).
# The NeMo model file has to be moved out of the tree for the carry limit (reports/measurements/README.md).
set -o pipefail
: "${AB_ENVS:?set AB_ENVS (the B arms, as eval/bench/wfst_ab_gpu_run.sh reads them)}"
export BEAMDEC_COMPONENTS=wfst WFST_SMOKE_LATTICE=${WFST_SMOKE_LATTICE:-0} WHEELS=${WHEELS:-.whl-oasr}
export SCALE=${SCALE:-bench} TOPOLOGIES=${TOPOLOGIES:-compact} GRAPHS=${GRAPHS:-HLG} RUN=${RUN:-bench_verify}
O=${OUT:-/tmp/wfst_gpu_out}; mkdir -p "$O"
CALL_S=${CALL_S:-600}; ARM_S=${ARM_S:-65}
OUT=$O/v TESTS_TIMEOUT=${VERIFY_TESTS_TIMEOUT:-150} SANITIZER_TIMEOUT=${SANITIZER_TIMEOUT:-150} BENCH_TIMEOUT=180 \
  BENCH_DEADLINE_S=360 bash eval/bench/wfst_verify_gpu_run.sh
echo "verify done at $SECONDS s"
# the A/B script counts its own seconds: its deadline is what is left of the call less one arm and the packing
OUT=$O/ab PACK=0 SKIP_A=1 BATCHES=${BATCHES:-1 4 32} B_TIMEOUT=$ARM_S B_DECODERS=${B_DECODERS:-wfst oasr} \
  B_DEADLINE_S=$(( CALL_S - ARM_S - 20 - SECONDS )) SKIP_TESTS=1 bash eval/bench/wfst_ab_gpu_run.sh
echo "ab done at $SECONDS s"
# what a batch-1 call spends outside the kernels (eval/bench/probes/wfst_host_overhead.py), when a minute is left
G=data/graphs/$SCALE/char_blanklast/compact/HLG.bin; LP=data/lp/${SCALE}_other_char_200.pt
if [ "${HOST_PROBE:-1}" = 1 ] && [ -f $G ] && [ -f $LP ] && [ $SECONDS -lt $(( CALL_S - 80 )) ]; then
  PYTHONPATH=/tmp/site:. timeout $(( CALL_S - 25 - SECONDS )) python3 -m eval.bench.probes.wfst_host_overhead $G $LP \
    --utts 30 > "$O/ab/host_overhead.txt" 2>&1; echo "host probe rc=$?"; tail -15 "$O/ab/host_overhead.txt"
fi
( cd "$O" && tar czf /tmp/wfst_ab_call.tgz ab && rm -rf ab && mv /tmp/wfst_ab_call.tgz ab_call.tgz )
ls -la "$O" "$O/v"
