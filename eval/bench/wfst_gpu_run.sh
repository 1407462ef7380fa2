#!/usr/bin/env bash
# One device call for the WFST decoder (see eval/bench/wfst_bench.py), in two flavours:
#
# 1) tiny (default): wheels, graphs (carried xz-compressed under data/carry, since the images exceed the 64 MiB
#    carry limit), extension build (WFST only), GPU tests, compute-sanitizer on a small case, and the benchmark.
#   prepare here:  bash eval/bench/wfst_gpu_run.sh prepare   (needs data/graphs/tiny/char_blanklast/{compact,normal}
#                  and .whl/; writes data/carry/{whl/*.whl, g/<topology>/{TLG.bin,TLG.fst,HLG.bin}.xz + words.txt,
#                  lp_other_char.pt} from the CURRENT workload, ~48 MB)
#   run there:     bash eval/bench/wfst_gpu_run.sh           (carry: data/carry)
#
# 2) scale: the SMALL or BENCH workload regenerated ON THE HOST from its seed (bench graphs are far over the carry
#    limit; bytes may differ from here with the host's numpy/sentencepiece, the shape does not). Nothing to prepare
#    but .whl/ (../shared/gpu-host/fetch-wheels.sh .ci/gpu-host/requirements.txt); the host image already has
#    numpy, sentencepiece, tqdm, filelock, click, psutil, scipy, pyyaml, packaging (KINDS.md's package list).
#   run there:     SCALE=small bash eval/bench/wfst_gpu_run.sh scale      (carry: .whl; timeout_s 600; the graph
#                  stage gets DEADLINE_S - 100 s: a small run needs DEADLINE_S >= 250, 200 cut its graphs short)
#                  SCALE=bench bash eval/bench/wfst_gpu_run.sh scale      (TLG only, see below)
#   Stages, each under `timeout` with a "STAGE name rc= wall_s= peak_rss_mb=" line, all in $OUT/scale_<S>.log:
#     wheels -> [extension build, background] -> workload (recipes.workload) -> [log-probs of UTTS 'other'
#     utterances, char, background] -> graphs: char/blank-last lang stage (L, G, LG, epsilon-free LG) once, then
#     compact and normal TLG+HLG in two forked processes -> size table ($OUT/graph_sizes_<S>.md) -> wfst_bench
#     ours+riva on both topologies (TLG, and HLG where built), batch 1 (B1 utts)/32/200 -> $OUT/wfst_bench_<S>.json,
#     with k2py (CPU, HLG.k2.txt) on K2_UTTS utterances in a second process beside it (wfst_bench_k2py_<S>.json).
#   Env: SCALE (small|bench), UTTS (200), B1 (30), K2_UTTS (50; 0 = no k2py), K2_PARALLEL (1; 0 = k2py after the
#     GPU runs, so it cannot disturb their timing), DECODERS (ours riva), MODES (0), DEADLINE_S (570),
#     WL_S (240), GRAPH_S (default: what is left minus 100 s for the benchmark), MAX_HLG_ARCS (library default
#     20M for small; 0 = no HLG, the default for bench), WHEELS (.whl; empty = use the packages python3 has).
#   Every stage is cached (workload params.json, lang_info.json, graph_info.json, the log-prob file): a call cut
#   short by the deadline can be run again on the still-warm machine (it stays warm ~30 s) and continues.
#
#   MEASURED HERE (2026-11-30, 2-core AMD EPYC VM, Python 3.11, numpy 2.4.6, kaldifst 1.8.3, no GPU; the script
#   itself with WHEELS= and the CPU torch: ours/riva skipped, "no CUDA device"); wall s / peak RSS:
#     small: workload 17 s / 0.4 GB; graphs 179 s / 3.3 GB (lang 85 s, then compact || normal TLG+HLG 93 s;
#            one after another through recipes.build_graphs: 452 s under heavier load); log-probs (200 utts)
#            12 s / 0.3 GB; k2py 50 utts x 2 HLGs 71 s / 3.0 GB (RTFx 32-38, ~25 s of it loading each HLG.k2.txt);
#            whole script 268 s. Sizes: compact TLG 952,863 states / 2,413,769 arcs, HLG 952,863 / 13,865,931;
#            normal TLG 977,438 / 3,715,398, HLG 952,863 / 13,584,829 (TLG.bin 59/87 MB, HLG.bin 289/284 MB).
#     bench: workload 74 s / 3.1 GB alone (114 s beside a graph build); graphs, TLG only (MAX_HLG_ARCS=0):
#            244 s / 3.8 GB (lang 181 s, then both TLGs side by side 61 s). With the HLG (estimated 19.8M
#            epsilon-free LG arcs, under the 20M default): lang 432 s, the compact HLG FST (52.6M arcs) 3.5 min
#            later, its conversion and k2 text still running 5 min after that at 10 GB RSS (stopped there):
#            far beyond one call. Sizes: LG 1,981,058 states / 3,702,944 arcs; compact TLG 4,226,130 /
#            10,235,274; normal TLG 4,308,905 / 15,123,795 (TLG.bin 251/353 MB, TLG.fst 204/278 MB).
#   MEASURED on the H200 host (2026-11-30, 16 cores; reports/measurements/h200_2026-11-30/*/scale_*.log):
#     small: workload 9 s, graphs 93 s, log-probs 6 s, extension 18 s (background), benchmark 38 s with k2py
#            (45 s) beside it: 148 s in all.
#     bench (TLG only): workload 35 s, graphs 125 s, log-probs 5 s, benchmark 52 s: 214 s in all.
#   Bench with the HLG needs several calls on a warm machine (MAX_HLG_ARCS=20000000); not planned.
set -o pipefail
if [ "${1:-}" = scale ]; then
  SCALE=${SCALE:-small}; UTTS=${UTTS:-200}; K2_UTTS=${K2_UTTS:-50}
  case $SCALE in small|bench) ;; *) echo "SCALE must be small or bench, got '$SCALE'"; exit 2;; esac
  [ $SCALE = bench ] && MAX_HLG_ARCS=${MAX_HLG_ARCS-0}  # bench: TLG only unless asked (HLG: see the header)
  T0=$(date +%s); left() { echo $(( ${DEADLINE_S:-570} - ($(date +%s) - T0) )); }
  export PYTHONUNBUFFERED=1 BEAMDEC_COMPONENTS=wfst TQDM_MININTERVAL=${TQDM_MININTERVAL:-15}  # sparse progress lines
  OUT=${OUT:-runs/gpu_$SCALE}; mkdir -p "$OUT" data/lp || exit 1
  exec > >(tee -a "$OUT/scale_$SCALE.log") 2>&1
  # timed NAME BUDGET_S CMD...: CMD under `timeout`, then its wall time and the peak RSS of its process tree
  TIMED='import resource, subprocess, sys, time
t0 = time.time(); rc = subprocess.call(["timeout", sys.argv[2], *sys.argv[3:]])
mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"STAGE {sys.argv[1]} rc={rc} wall_s={time.time() - t0:.1f} peak_rss_mb={mb:.0f}", flush=True); sys.exit(rc)'
  timed() { python3 -c "$TIMED" "$@"; }
  # lang stage once, then one forked process per topology: recipes.graphs.build builds the topologies one after
  # another (under one lock), so its per-topology step is swapped for one that forks and returns at once
  GRAPHS='import logging, multiprocessing as mp, sys
from recipes.build_graphs import build_graphs
from recipes.graphs import build as B
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
serial, procs = B.build_topology_graphs, []
def forked(*a, **kw):
    procs.append(mp.get_context("fork").Process(target=serial, args=a, kwargs=kw)); procs[-1].start(); return {}
B.build_topology_graphs = forked
kw = {"max_hlg_arcs": int(sys.argv[2])} if len(sys.argv) > 2 and sys.argv[2] else {}  # library default else
build_graphs(scale=sys.argv[1], token_kinds=["char"], blanks=["last"], topologies=["compact", "normal"], **kw)
for p in procs:
    p.join()
sys.exit(1 if any(p.exitcode for p in procs) else 0)'
  SIZES='import json, pathlib, sys
from recipes.graphs.info import size_table
g = pathlib.Path(sys.argv[1])
print(size_table({(sys.argv[2], "char_blanklast", t): json.loads((g / t / "graph_info.json").read_text())
                  for t in ("compact", "normal") if (g / t / "graph_info.json").is_file()}))
print("lang:", json.loads((g / "lang" / "lang_info.json").read_text())["sizes"])'
  echo "scale=$SCALE utts=$UTTS k2py_utts=$K2_UTTS $(date -u +%FT%TZ) $(nproc) cores"
  S=$(date +%s); export PYTHONPATH=.:$PYTHONPATH
  if [ -n "${WHEELS-.whl}" ]; then  # WHEELS= (empty): use what the python3 on PATH has (a CPU check, say)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      ${WHEELS:-.whl}/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH || exit 1
  fi
  echo "STAGE wheels wall_s=$(( $(date +%s) - S ))"
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
  # the extension (nvcc, parallel) builds while the CPU stages run; wfst_bench would build it too if this failed
  timed ext_build 300 python3 -c "from decoders._ext import ops; ops()" > "$OUT/ext_build.log" 2>&1 & EXT=$!
  timed workload ${WL_S:-240} python3 -m recipes.workload scale=$SCALE || exit 1
  LP=data/lp/${SCALE}_other_char_$UTTS.pt
  timed logprobs 120 python3 -m eval.bench.wfst_bench --scale $SCALE --kind char --set other --max-utts $UTTS \
    --dump-lp $LP > "$OUT/logprobs.log" 2>&1 & LPJ=$!
  timed graphs ${GRAPH_S:-$(( $(left) - 100 ))} python3 -c "$GRAPHS" $SCALE "${MAX_HLG_ARCS:-}" || exit 1
  G=data/graphs/$SCALE/char_blanklast
  python3 -c "$SIZES" $G $SCALE | tee "$OUT/graph_sizes_$SCALE.md"
  du -sh $G/*/TLG.bin $G/*/HLG.bin $G/*/TLG.fst 2>/dev/null
  wait $LPJ; tail -2 "$OUT/logprobs.log"; wait $EXT; tail -3 "$OUT/ext_build.log"
  [ -f $LP ] || exit 1
  GDIRS="--graph-dir compact=$G/compact --graph-dir normal=$G/normal"
  k2() {
    [ "$(left)" -gt 20 ] || { echo "k2py: no time left"; return 1; }
    timed k2py $(left) python3 -m eval.bench.wfst_bench --lp-file $LP --max-utts $UTTS --decoders k2py \
    --k2py-utts $K2_UTTS $GDIRS --out "$OUT/wfst_bench_k2py_$SCALE.json" > "$OUT/k2py.log" 2>&1; }
  [ "$K2_UTTS" -gt 0 ] && [ -f $G/compact/HLG.k2.txt ] || { echo "k2py: not run (K2_UTTS=0 or no HLG)"; K2_UTTS=0; }
  [ "$K2_UTTS" -gt 0 ] && [ "${K2_PARALLEL:-1}" = 1 ] && { k2 & K2J=$!; }
  echo "bench: $(left) s left"; [ "$(left)" -gt 30 ] || { echo "no time left for the benchmark"; exit 1; }
  timed bench $(( $(left) - 5 )) python3 -m eval.bench.wfst_bench --lp-file $LP --max-utts $UTTS \
    --b1-utts ${B1:-30} $GDIRS --cuda-graph-modes ${MODES:-0} --decoders ${DECODERS:-ours riva} \
    --out "$OUT/wfst_bench_$SCALE.json" 2>&1 | grep -v Warning
  if [ "$K2_UTTS" -gt 0 ]; then
    if [ -n "${K2J:-}" ]; then wait $K2J; else k2; fi
    grep -v Warning "$OUT/k2py.log" | tail -8
  fi
  echo "total_s=$(( $(date +%s) - T0 ))"; sleep 1  # let tee flush the log
  exit 0
fi
if [ "${1:-}" = prepare ]; then
  rm -rf data/carry && mkdir -p data/carry/whl || exit 1
  cp .whl/jiwer* .whl/rapidfuzz* .whl/riva* .whl/kaldifst* data/carry/whl/ || exit 1
  for t in compact normal; do
    mkdir -p data/carry/g/$t
    for f in TLG.bin TLG.fst HLG.bin; do xz -T2 -6 -c data/graphs/tiny/char_blanklast/$t/$f > data/carry/g/$t/$f.xz || exit 1; done
    cp data/graphs/tiny/char_blanklast/$t/words.txt data/carry/g/$t/
  done
  python -m eval.bench.wfst_bench --dump-lp data/carry/lp_other_char.pt && du -sh data/carry
  exit $?
fi
T0=$(date +%s); left() { echo $(( ${DEADLINE_S:-570} - ($(date +%s) - T0) )); }
export PYTHONUNBUFFERED=1 BEAMDEC_COMPONENTS=wfst
OUT=${OUT:-runs/gpu}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  data/carry/whl/*.whl && export PYTHONPATH=/tmp/site:.:$PYTHONPATH || exit 1
python3 - <<'PY'
import lzma, pathlib, shutil
for f in pathlib.Path("data/carry/g").glob("*/*"):
    out = pathlib.Path("data/graphs/tiny/char_blanklast") / f.parent.name / f.name.removesuffix(".xz")
    out.parent.mkdir(parents=True, exist_ok=True)
    if f.suffix == ".xz":
        with lzma.open(f) as i, open(out, "wb") as o:
            shutil.copyfileobj(i, o, 1 << 22)
    else:
        shutil.copy(f, out)
PY
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
S=$(date +%s); python3 -c "from decoders._ext import ops; ops()" 2>&1 | tail -5; echo "build_s=$(( $(date +%s) - S ))"
S=$(date +%s); timeout ${TEST_S:-150} python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_wfst_gpu.py 2>&1 | tail -25
echo "gpu_tests_s=$(( $(date +%s) - S ))"
S=$(date +%s); timeout ${SAN_S:-90} compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m eval.bench.wfst_smoke 2>&1 | tail -6
echo "sanitizer_rc=$? sanitizer_s=$(( $(date +%s) - S ))"
G=data/graphs/tiny/char_blanklast
timeout $(left) python3 -m eval.bench.wfst_bench --lp-file data/carry/lp_other_char.pt --b1-utts ${B1:-30} \
  --graph-dir compact=$G/compact --graph-dir normal=$G/normal --cuda-graph-modes ${MODES:-0} --decoders ${DECODERS:-ours riva} --out "$OUT/wfst_bench.json" 2>&1 \
  | grep -v Warning
