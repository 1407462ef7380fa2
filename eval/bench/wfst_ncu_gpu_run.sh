#!/usr/bin/env bash
# One device call: where a step of the CUDA WFST 1-best search spends its time, per kernel, with hardware counters
# (Nsight Compute; the next step of issue 16 after session 13's fused-max A/B, reports/measurements/README.md).
# The per-kernel path (BEAMDEC_WFST_PERSISTENT=0: MaxKernel / ExpandKernel / ResolveKernel per step, the same step
# bodies as the persistent kernel) on the workload's char compact graphs, the benchmark's settings (beam 17,
# max_active 10000, acoustic scale 1), batches BATCHES of the 'other' set.
#   there:     SCALE=small GRAPHS="HLG TLG" bash eval/bench/wfst_ncu_gpu_run.sh      (carry .whl; ~4-6 min at small)
#   then here: tar xzf <files_at>/wfst_ncu.tgz; `ncu --import X.ncu-rep --page details` where ncu exists, else the
#              CSVs beside each report (`--page details --csv`, `--page raw --csv`)
# Env: SCALE (small), GRAPHS (HLG TLG), BATCHES (1 200), SKIP (kernel launches skipped before the first profiled one:
# 300, past the warm-up), COUNT (launches profiled per batch: 9 = three steps), SET (ncu --set: detailed), UTTS (200).
# ncu runs with --clock-control none (the device notes: leave the clocks alone).
# PERSISTENT=1: the persistent kernel instead (the default path), one launch (SKIP 1: past the warm-up decode), PC
# sampling per source line (the stall ledger, reports.profile stalls); e.g. on a machine that built the bench graphs:
#   PERSISTENT=1 SCALE=bench GRAPHS=HLG BATCHES="1 32" bash eval/bench/wfst_ncu_gpu_run.sh
set -o pipefail
SCALE=${SCALE:-small}; GRAPHS=${GRAPHS:-HLG TLG}; BATCHES=${BATCHES:-1 200}; UTTS=${UTTS:-200}
OUT=${OUT:-/tmp/wfst_ncu_out}; mkdir -p "$OUT/ncu" data/lp || exit 1
exec > >(tee -a "$OUT/wfst_ncu.log") 2>&1
export PYTHONUNBUFFERED=1 BEAMDEC_COMPONENTS=wfst PYTHONPATH=.:${PYTHONPATH:-}
stage() { local name=$1 s=$SECONDS; shift; "$@"; local rc=$?; echo "STAGE $name rc=$rc wall_s=$(( SECONDS - s ))"; return $rc; }
if [ -d .whl ]; then
  stage wheels python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit 1
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 2; }
stage ext_build python3 -c "from decoders._ext import ops; ops()" > "$OUT/ext_build.log" 2>&1 & EXT=$!
LP=data/lp/${SCALE}_other_char_$UTTS.pt
G=data/graphs/$SCALE/char_blanklast/compact
# a machine that already built this call's inputs (e.g. wfst_ab_gpu_run.sh before it) skips the recipes
PREPARED=0; [ -f $LP ] && for graph in $GRAPHS; do [ -f $G/$graph.bin ] || PREPARED=1; done || PREPARED=1
[ $PREPARED = 0 ] && echo "inputs already built: $LP, $GRAPHS in $G"
[ $PREPARED = 0 ] || stage workload python3 -m recipes.workload scale=$SCALE > "$OUT/workload.log" 2>&1 || exit 1
[ -f $LP ] || stage logprobs python3 -m eval.bench.wfst_bench --scale $SCALE --kind char --set other --max-utts $UTTS \
  --dump-lp $LP > "$OUT/logprobs.log" 2>&1 || exit 1
[ $PREPARED = 0 ] || stage graphs python3 -c "from recipes.build_graphs import build_graphs
build_graphs(scale='$SCALE', token_kinds=['char'], blanks=['last'], topologies=['compact'])" > "$OUT/graphs.log" 2>&1 || exit 1
wait $EXT || { cat "$OUT/ext_build.log"; exit 1; }
cat > /tmp/wfst_ncu_driver.py <<'PY'
"""Decode the first `batch` utterances twice (warm-up, then the profiled pass) with the benchmark's settings."""
import sys
import torch
from decoders.graph import WfstGraph
from decoders.wfst import WfstDecoder, WfstDecoderConfig
graph_path, lp_path, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = torch.load(lp_path, weights_only=False)
lp, lengths = d["lp"][:batch].cuda(), d["len"][:batch]
dec = WfstDecoder(WfstGraph.load(graph_path), WfstDecoderConfig(search_beam=17.0, max_active=10000, acoustic_scale=1.0), "cuda")
for _ in range(2):
    res = dec.decode(lp, lengths)
torch.cuda.synchronize()
print(f"decoded {batch} utterances, {int(lengths.sum())} frames, overflow {sum(1 for o in res.overflow if o)}")
PY
if [ "${PERSISTENT:-0}" = 1 ]; then
  # The persistent kernel (the default path: one cooperative launch per batch), one launch after the warm-up decode,
  # with PC sampling (SourceCounters: warp stall samples per SASS instruction; the CUDA view came back without them
  # on the H100 of session 34) and the kernel-level warp states; reports.profile's stall ledger summarizes the SASS
  # page, eval/bench/probes/ncu_sass_lines.py joins it to source lines on a machine with nvcc
  for graph in $GRAPHS; do
    for b in $BATCHES; do
      rep="$OUT/ncu/${SCALE}_${graph}_b${b}_persistent"
      stage "ncu persistent $graph b$b" timeout ${NCU_TIMEOUT:-240} "$NCU" --clock-control none --target-processes all \
        -k "regex:PersistentKernel" --launch-skip ${SKIP:-1} --launch-count ${COUNT:-1} --import-source yes \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section SourceCounters -f -o "$rep" \
        python3 /tmp/wfst_ncu_driver.py $G/$graph.bin $LP $b > "$rep.log" 2>&1
      tail -2 "$rep.log"
      "$NCU" --import "$rep.ncu-rep" --page details --csv > "$rep.details.csv" 2>/dev/null
      "$NCU" --import "$rep.ncu-rep" --page raw --csv > "$rep.raw.csv" 2>/dev/null
      for view in cuda sass; do
        "$NCU" --import "$rep.ncu-rep" --page source --csv --print-source $view > "$rep.source_$view.csv" 2> "$rep.source_$view.err"
      done
      grep -E '"(Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per Thread)"' \
        "$rep.details.csv" | cut -d, -f5,13-16 | head -20
      python3 -m reports.profile stalls "$rep.source_sass.csv" --top ${TOP:-40} --png "$rep.stalls.png" \
        --title "PersistentKernel, $SCALE $graph, batch $b: warp stall samples" > "$rep.stalls.md" 2>&1; head -40 "$rep.stalls.md"
    done
  done
  ( cd "$OUT" && tar czf wfst_ncu.tgz ncu ) && rm -rf "$OUT/ncu"
  echo "total_s=$SECONDS"
  exit 0
fi
for graph in $GRAPHS; do
  for b in $BATCHES; do
    rep="$OUT/ncu/${SCALE}_${graph}_b$b"
    BEAMDEC_WFST_PERSISTENT=0 stage "ncu $graph b$b" timeout 240 "$NCU" --clock-control none --target-processes all \
      -k "regex:MaxKernel|ExpandKernel|ResolveKernel" --launch-skip ${SKIP:-300} --launch-count ${COUNT:-9} \
      --set ${SET:-detailed} -f -o "$rep" python3 /tmp/wfst_ncu_driver.py $G/$graph.bin $LP $b > "$rep.log" 2>&1
    tail -2 "$rep.log"
    "$NCU" --import "$rep.ncu-rep" --page details --csv > "$rep.details.csv" 2>/dev/null
    "$NCU" --import "$rep.ncu-rep" --page raw --csv > "$rep.raw.csv" 2>/dev/null
    grep -E '"(Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|L2 Hit Rate|Registers Per Thread)"' \
      "$rep.details.csv" | cut -d, -f5,13-16 | head -40
  done
done
( cd "$OUT" && tar czf wfst_ncu.tgz ncu ) && rm -rf "$OUT/ncu"
echo "total_s=$SECONDS"
