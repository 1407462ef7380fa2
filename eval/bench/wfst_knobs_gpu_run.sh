#!/usr/bin/env bash
# GPU-host calls for the WFST knobs written in session 6 (issues 14 and 16), first run in session 7 (PART=both; the
# winners became the defaults: reports/evidence/h200_2026-12-02/README_session7.md) -- the knobs as they were then:
#   BEAMDEC_WFST_PERSISTENT=1      the 1-best step loop as one cooperative kernel (decoders/csrc/wfst_launch.cu)
#   BEAMDEC_WFST_BLOCKS_PER_SM=n   a smaller 1-best walk grid
#   BEAMDEC_LATTICE_WALK=adaptive  the lattice kernels' warp walk with adaptive items per warp
#   BEAMDEC_LATTICE_MAP=hash       the lattice pass's state map as per-lane hash tables (not B x num_states)
# Two parts, each one device call (carry .whl; `bash .ci/gpu-host/prepare_carry.sh` builds it):
#   PART=tests bash eval/bench/wfst_knobs_gpu_run.sh   their gpu tests (tests/test_wfst_gpu.py, every lattice gpu test
#                                                      runs walk x map), memcheck + racecheck over the WFST smoke (which
#                                                      runs each knob)                                       ~7 min
#   PART=ab bash eval/bench/wfst_knobs_gpu_run.sh      the A/B profiles, tiny BPE compact TLG, 'other', acoustic scale 1:
#                                                      1-best at batch 1 / 32 / 200 plain, persistent, 1 and 2 blocks per
#                                                      SM, persistent + 1; lattice at batch 1 / 200 token / warp /
#                                                      adaptive, dense / hash                                ~6 min
#   PART=both                                          the two in one call, the sanitizers left out (DEADLINE_S 540)
#   PART=lattice                                       session 7's opt-in BEAMDEC_LATTICE_PERSISTENT=1 (the lattice
#                                                      forward pass as one cooperative kernel): lattice gpu tests,
#                                                      sanitizers, lattice / MBR A/B and the MBR bench with it ~8 min
# Then: make the winners the defaults where they win (reports/measurements/README.md, pending runs). Results as
# eval/bench/wfst_lattice_gpu_run.sh's ($OUT/summary.txt, $OUT/results.tar.gz).
set -uo pipefail
AB_PROFILES="lattice::token lattice::warp lattice::adaptive lattice::warp:hash lattice::adaptive:hash"
AB_BEST='for v in "" BEAMDEC_WFST_PERSISTENT=1 BEAMDEC_WFST_BLOCKS_PER_SM=1 BEAMDEC_WFST_BLOCKS_PER_SM=2 \
        "BEAMDEC_WFST_PERSISTENT=1 BEAMDEC_WFST_BLOCKS_PER_SM=1"; do
      tag=${v// /_}; tag=${tag:-plain}
      echo "== 1-best ${v:-plain}"
      env $v python3 -m eval.bench.wfst_profile --scale tiny --kind bpe --set other --graph-dir compact=$G/compact \
        --batch 1 32 200 --b1-utts 20 --utts 200 --output-dir $OUT/runs --run "tiny_best_$tag" 2>&1 | grep -E " wall "
    done'
TESTS="tests/test_wfst_gpu.py tests/test_wfst_lattice_gpu.py"
AB_LATTICE='for v in "" BEAMDEC_LATTICE_PERSISTENT=1; do
      for output in lattice mbr; do
        tag=${v:+persistent}; tag=${tag:-launches}
        echo "== $output ${v:-launches}"
        env $v python3 -m eval.bench.wfst_profile --scale tiny --kind bpe --set other --output $output \
          --graph-dir compact=$G/compact --batch 1 200 --b1-utts 20 --utts 200 --output-dir $OUT/runs \
          --run "tiny_${output}_$tag" 2>&1 | grep -E " wall "
      done
    done
    for v in BEAMDEC_LATTICE_PERSISTENT=0 BEAMDEC_LATTICE_PERSISTENT=1; do
      echo "== MBR bench $v"
      env $v python3 -m eval.bench.wfst_mbr_bench --scale tiny --kind bpe --set other --max-utts 200 --batch 200 \
        --graph-dir compact=$G/compact --output-dir $OUT/runs --run "tiny_b200_${v##*=}" \
        $( [ "${v##*=}" = 0 ] && echo --decoders wfst ) 2>&1 | tee "$OUT/mbr_bench_${v##*=}.log" | grep -E "^\| compact"
    done' 
case ${PART:-} in
  tests)
    GPU_TESTS=$TESTS PROFILES="" SKIP_MBR=1 exec bash eval/bench/wfst_lattice_gpu_run.sh ;;
  ab)
    SKIP_TESTS=1 PROFILES=$AB_PROFILES EXTRA_BENCH=$AB_BEST exec bash eval/bench/wfst_lattice_gpu_run.sh ;;
  both)  # the tests without the sanitizers (they run after the defaults change), then the A/B, in one call
    GPU_TESTS=$TESTS SANITIZERS="" SKIP_MBR=1 PROFILES=$AB_PROFILES EXTRA_BENCH=$AB_BEST DEADLINE_S=${DEADLINE_S:-540} \
      exec bash eval/bench/wfst_lattice_gpu_run.sh ;;
  lattice)  # session 7's opt-in persistent lattice forward pass (BEAMDEC_LATTICE_PERSISTENT=1): every lattice gpu
            # test (its own test, and the memory tests on their new inputs), memcheck + racecheck over the smoke (which
            # runs it), then the A/B of lattice / MBR profiles and the MBR bench vs Riva with it
    GPU_TESTS=tests/test_wfst_lattice_gpu.py PROFILES="" SKIP_MBR=1 EXTRA_BENCH=$AB_LATTICE DEADLINE_S=${DEADLINE_S:-540} \
      exec bash eval/bench/wfst_lattice_gpu_run.sh ;;
  *) echo "PART must be tests, ab, both or lattice, got '${PART:-}'"; exit 2 ;;
esac
