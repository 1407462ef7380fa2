#!/usr/bin/env bash
# One device call: an A/B of one decoder switch on the same graphs and log-probs, beside OASR, then the WFST gpu tests.
#   A: eval/bench/wfst_gpu_run.sh as configured (DECODERS, default "wfst oasr"; RUN default <SCALE>_a)
#   B: ours again once per entry of AB_ENVS (space-separated; default BEAMDEC_WFST_FUSED_MAX=1 BEAMDEC_WFST_FUSED_MAX=2:
#      the two fused-max variants against A's Max walk; an entry's several settings joined by ',', e.g.
#      BEAMDEC_WFST_TOKEN_BOUND=1,BEAMDEC_WFST_FUSED_MAX=1), runs <SCALE>_b1, _b2, ..., right after A on the same warm
#      machine (timings are compared within one call); AB_ENV (one entry) is still read when AB_ENVS is unset
#   then the A/B rendered by reports.ab into $OUT/ab/ (ab.md, ab.png: each setting against A and its repeats),
#   then GPU_TESTS (default the offline, streaming and device-layout WFST tests) unless SKIP_TESTS=1.
#   there:     SCALE=small TOPOLOGIES=compact bash eval/bench/wfst_ab_gpu_run.sh      (carry: .whl .anchors)
#   then here: tar xzf <files_at>/wfst_ab_call.tgz (every log, and wfst_ab_runs.tgz: the run directories; extract
#              that one with -C reports/evidence/<machine>_<date>/)
# The device returns at most 8 files of $OUT, and a call leaves ~12: with PACK=1 (the default) the script ends by
# packing everything under $OUT into wfst_ab_call.tgz (session 21 lost a call's run directories to that limit).
# Each stage has a time limit (A_TIMEOUT 420 s, B_TIMEOUT 150 s, TESTS_TIMEOUT 200 s) so a hang cannot eat the call;
# TESTS_DEADLINE_S skips the gpu tests when the call is already that many seconds in (so the packing still happens).
# SKIP_A=1: no A stage; A is the run directory RUN already made in this call (e.g. by eval/bench/wfst_verify_gpu_run.sh
# with RUN=bench_verify; its graphs and log-probs are reused). BATCHES: the B arms' batch sizes (default the bench's).
# B_DEADLINE_S: B arms not started once the call is that many seconds in. B_DECODERS: the B arms' decoders (default
# wfst; "wfst oasr" gives every arm's process an OASR reading too, for OASR's own spread between processes).
# With BATCHES the B arms are also rendered against the first B arm ($OUT/ab_b/: the batches A did not run).
set -o pipefail
SCALE=${SCALE:-small}; export SCALE; export RUN=${RUN:-${SCALE}_a}; export DECODERS=${DECODERS:-wfst oasr}
OUT=${OUT:-/tmp/wfst_gpu_out}; export OUT; mkdir -p "$OUT"
AB_ENVS=${AB_ENVS:-${AB_ENV:-BEAMDEC_WFST_FUSED_MAX=1 BEAMDEC_WFST_FUSED_MAX=2}}
if [ "${SKIP_A:-0}" != 1 ]; then
  timeout ${A_TIMEOUT:-420} bash eval/bench/wfst_gpu_run.sh > "$OUT/ab_a.log" 2>&1; echo "A rc=$?"
  grep "STAGE\|total_s" "$OUT/ab_a.log" | tr '\n' ' '; echo
fi
export PYTHONPATH=/tmp/site:.:${PYTHONPATH:-} PYTHONUNBUFFERED=1 BEAMDEC_COMPONENTS=wfst
G=data/graphs/$SCALE/char_blanklast
GDIRS=$(for t in ${TOPOLOGIES:-compact normal}; do printf -- "--graph-dir %s=%s " $t $G/$t; done)
n=0
for ab in $AB_ENVS; do
  n=$((n + 1)); s=$SECONDS
  if [ $SECONDS -ge ${B_DEADLINE_S:-100000} ]; then echo "B$n ($ab) skipped: $SECONDS s past B_DEADLINE_S"; continue; fi
  env ${ab//,/ } timeout ${B_TIMEOUT:-150} python3 -m eval.bench.wfst_bench --lp-file data/lp/${SCALE}_other_char_${UTTS:-200}.pt \
    --scale $SCALE --max-utts ${UTTS:-200} --b1-utts ${B1:-30} $GDIRS --graphs ${GRAPHS:-TLG HLG} --decoders ${B_DECODERS:-wfst} ${BATCHES:+--batches $BATCHES} \
    --run ${SCALE}_b$n --isolate > "$OUT/ab_b$n.log" 2>&1; echo "B$n ($ab) rc=$? wall_s=$(( SECONDS - s ))"
done
# The A/B rendered by reports.ab (per graph and batch: each process's RTFx, the change vs A's processes, A's spread,
# a WER check) into $OUT/ab/: one arm per distinct setting; A and every entry whose only settings are BEAMDEC_REPEAT
# are the "default" arm's processes, an entry's BEAMDEC_REPEAT part is dropped from its arm's name
declare -A ARM=()
ADIR=runs/bench/wfst_vs_riva/$RUN; [ -f $ADIR/results.jsonl ] || ADIR=runs/bench/wfst_vs_oasr/$RUN
ARM[default]=$ADIR; ORDER=(default); n=0
for ab in $AB_ENVS; do
  n=$((n + 1)); d=runs/bench/wfst_vs_riva/${SCALE}_b$n; [ -f $d/results.jsonl ] || continue
  key=$(echo "$ab" | tr ',' '\n' | grep -v '^BEAMDEC_REPEAT=' | paste -sd, -); key=${key:-default}
  [ -n "${ARM[$key]:-}" ] && ARM[$key]="${ARM[$key]},$d" || { ARM[$key]=$d; ORDER+=("$key"); }
done
ARGS=(); for k in "${ORDER[@]}"; do ARGS+=(--arm "$k::${ARM[$k]}"); done
python3 -m reports.ab "${ARGS[@]}" --decoder wfst --out "$OUT/ab" --title "A/B on the $SCALE graphs" > /dev/null \
  && grep "^| wfst" "$OUT/ab/ab.md" | cut -c1-240 || echo "reports.ab: no A/B rendered"
# BATCHES: the batch sizes A did not run are compared among the B arms alone, the first B arm as the base ($OUT/ab_b/)
if [ -n "${BATCHES:-}" ] && [ ${#ORDER[@]} -gt 2 ]; then
  python3 -m reports.ab "${ARGS[@]:2}" --decoder wfst --out "$OUT/ab_b" \
    --title "The B arms at BATCHES=$BATCHES, $SCALE graphs" > /dev/null \
    && grep "^| wfst" "$OUT/ab_b/ab.md" | cut -c1-240 || echo "reports.ab: no B-only A/B rendered"
fi
( cd runs/bench && tar czf "$OUT/wfst_ab_runs.tgz" $(ls -d wfst_vs_riva wfst_vs_oasr 2>/dev/null) )
for d in runs/bench/wfst_vs_oasr/$RUN runs/bench/wfst_vs_riva/${SCALE}_b*; do
  [ -f $d/results.jsonl ] && python3 -m reports.cli $d > /dev/null 2>&1; echo "== $d"; grep "^| wfst\|^| oasr\|^| compact\|^| normal" $d/report.md 2>/dev/null | cut -c1-200
done
if [ "${SKIP_TESTS:-0}" = 1 ]; then
  :
elif [ $SECONDS -ge ${TESTS_DEADLINE_S:-100000} ]; then
  echo "gpu tests skipped: $SECONDS s past TESTS_DEADLINE_S=$TESTS_DEADLINE_S"
else
  s=$SECONDS
  timeout ${TESTS_TIMEOUT:-200} python3 -m pytest -q -m gpu -p no:cacheprovider \
    ${GPU_TESTS:-tests/test_wfst_gpu.py tests/test_wfst_stream_gpu.py tests/test_wfst_device_layout.py} > "$OUT/gpu_tests.txt" 2>&1
  echo "gpu tests rc=$? wall_s=$(( SECONDS - s )): $(tail -1 "$OUT/gpu_tests.txt")"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.txt" | head -20
fi
echo "total_s=$SECONDS"
if [ "${PACK:-1}" = 1 ] && [ -d "$OUT" ] && [ "$OUT" != / ]; then
  ( cd "$OUT" && tar czf /tmp/wfst_ab_call.tgz --exclude=wfst_ab_call.tgz . ) && find "$OUT" -mindepth 1 -delete \
    && mv /tmp/wfst_ab_call.tgz "$OUT/" && echo "packed: $OUT/wfst_ab_call.tgz"
fi
