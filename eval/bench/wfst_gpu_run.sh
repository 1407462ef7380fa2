#!/usr/bin/env bash
# One device call on the GPU host: the WFST decoder vs riva-asrlib-decoder (eval/bench/wfst_bench.py), with the
# workload and graphs regenerated ON THE HOST from their seeds (graph images exceed the 64 MiB carry limit).
#
#   here, once:  ../shared/gpu-host/fetch-wheels.sh .ci/gpu-host/requirements.txt     (-> .whl/)
#   here, once:  mkdir -p .anchors/oasr && tar -xJf ../shared/anchors/oasr-9c1a3ce.tar.xz -C .anchors/oasr
#                (the seed system's source for the OASR column; .anchors/ is git-excluded, so carry it)
#   there:       SCALE=small bash eval/bench/wfst_gpu_run.sh     (carry: .whl .anchors; timeout_s 600)
#   then here:   tar xzf <files_at>/wfst_runs.tgz -C reports/evidence/<machine>_<date>/; python -m reports.cli <run dir>
#
# Stages, each logged as "STAGE name rc= wall_s=" in $OUT/wfst_gpu_<SCALE>.log: wheels -> [extension build,
# background] -> workload (recipes.workload) -> [log-probs of UTTS 'other' utterances, char, background:
# wfst_bench --dump-lp] -> graphs (char, blank last: compact and normal TLG, HLG up to MAX_HLG_ARCS) ->
# [OASR's WFST decoder JIT build, background, when .anchors/oasr is there] ->
# wfst_bench (wfst + riva + oasr on both topologies, batch 1 (B1 utts) / 32 / 200) writing the run directories
# runs/bench/wfst_vs_riva/<SCALE> and runs/bench/wfst_vs_oasr/<SCALE> (OASR beside a copy of ours' rows) ->
# [k2py on K2_UTTS utterances of the HLG, after the GPU runs] -> the run directories as one archive, $OUT/wfst_runs.tgz.
# Env: SCALE (tiny|small|bench; bench: TLGs and HLGs (~52M arcs each), its graphs take ~5 min on a 2-core machine), UTTS (200), B1 (30), K2_UTTS (0 = no k2py),
#   DECODERS (wfst riva oasr; oasr only when OASR_ROOT, default .anchors/oasr, holds its source), MAX_HLG_ARCS (library default; 0 = no HLG),
#   TOPOLOGIES (compact normal), GRAPHS (TLG HLG: which of each topology's graphs are decoded), RUN (the run name; default the scale),
#   WHEELS (.whl; empty = use the packages python3 has), ISOLATE (1: each configuration in its own process). Stages are cached (workload params.json, graph_info.json,
#   the log-prob file): a call cut short can be run again on the still-warm machine and continues.
# Host timings seen before (H200, 16 cores): small = workload 9 s, graphs 93 s, log-probs 6 s, benchmark ~40 s.
set -o pipefail
SCALE=${SCALE:-small}; UTTS=${UTTS:-200}; K2_UTTS=${K2_UTTS:-0}; TOPOLOGIES=${TOPOLOGIES:-compact normal}; GRAPHS=${GRAPHS:-TLG HLG}; RUN=${RUN:-$SCALE}
case $SCALE in tiny|small|bench) ;; *) echo "SCALE must be tiny, small or bench, got '$SCALE'"; exit 2;; esac
OUT=${OUT:-/tmp/wfst_gpu_out}; mkdir -p "$OUT" data/lp || exit 1
exec > >(tee -a "$OUT/wfst_gpu_$SCALE.log") 2>&1
export PYTHONUNBUFFERED=1 BEAMDEC_COMPONENTS=wfst TQDM_MININTERVAL=${TQDM_MININTERVAL:-15}
stage() { local name=$1 s=$SECONDS; shift; "$@"; local rc=$?; echo "STAGE $name rc=$rc wall_s=$(( SECONDS - s ))"; return $rc; }
export PYTHONPATH=.:${PYTHONPATH:-}
if [ -n "${WHEELS-.whl}" ]; then
  stage wheels python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site ${WHEELS:-.whl}/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
stage ext_build python3 -c "from decoders._ext import ops; ops()" > "$OUT/ext_build.log" 2>&1 & EXT=$!
DECODERS=${DECODERS:-wfst riva oasr}; OASR=
if [[ " $DECODERS " == *" oasr "* ]]; then
  if [ -f "${OASR_ROOT:-.anchors/oasr}/oasr/jit/wfst_decoder.py" ]; then  # OASR's JIT build (~1 min) beside the graphs
    stage oasr_build python3 -c "from eval.bench.oasr_wfst import load_oasr_module; load_oasr_module()" \
      > "$OUT/oasr_build.log" 2>&1 & OASR=$!
  else
    echo "note: no OASR source at ${OASR_ROOT:-.anchors/oasr} (carry .anchors): its rows will say so"
  fi
fi
stage workload python3 -m recipes.workload scale=$SCALE || exit 1
LP=data/lp/${SCALE}_other_char_$UTTS.pt
[ -f $LP ] || { stage logprobs python3 -m eval.bench.wfst_bench --scale $SCALE --kind char --set other \
  --max-utts $UTTS --dump-lp $LP > "$OUT/logprobs.log" 2>&1 & }
LPJ=$!
HLG_ARG=${MAX_HLG_ARCS:+, max_hlg_arcs=$MAX_HLG_ARCS}
stage graphs python3 -c "from recipes.build_graphs import build_graphs
build_graphs(scale='$SCALE', token_kinds=['char'], blanks=['last'], topologies=[$(printf "'%s', " $TOPOLOGIES)]$HLG_ARG)" || exit 1
wait $LPJ 2>/dev/null; wait $EXT; tail -3 "$OUT/ext_build.log"
[ -n "$OASR" ] && { wait $OASR; tail -3 "$OUT/oasr_build.log"; }
[ -f $LP ] || { cat "$OUT/logprobs.log"; exit 1; }
G=data/graphs/$SCALE/char_blanklast
GDIRS=$(for t in $TOPOLOGIES; do printf -- "--graph-dir %s=%s " $t $G/$t; done)
# every configuration in a fresh process (wfst_bench --isolate, its default on cuda: rows after Riva's ran 2.5x
# slower in one process); ISOLATE=0 measures them all in one process (saves one process start per row, ~5-15 s)
stage bench python3 -m eval.bench.wfst_bench --lp-file $LP --scale $SCALE --max-utts $UTTS --b1-utts ${B1:-30} \
  $GDIRS --graphs $GRAPHS --decoders $DECODERS --run $RUN $( [ "${ISOLATE:-1}" = 0 ] && echo --in-process || echo --isolate )
if [ "$K2_UTTS" -gt 0 ]; then  # CPU baseline after the GPU runs, so it cannot disturb their timing
  stage k2py python3 -m eval.bench.wfst_bench --lp-file $LP --scale $SCALE --max-utts $UTTS --decoders k2py \
    --k2py-utts $K2_UTTS $GDIRS --graphs $GRAPHS --experiment wfst_k2py --run $RUN
fi
# $OUT gives back at most 8 files, two folders down: the run directories travel as one archive
# (wfst_runs.tgz: wfst_vs_riva/<run>, wfst_vs_oasr/<run>, wfst_k2py/<run>; untar under reports/evidence/<machine>_<date>/)
( cd runs/bench && tar czf "$OUT/wfst_runs.tgz" $(ls -d wfst_vs_riva wfst_vs_oasr wfst_k2py 2>/dev/null) ) && ls -la "$OUT"
echo "total_s=$SECONDS"; sleep 1  # let tee flush the log
