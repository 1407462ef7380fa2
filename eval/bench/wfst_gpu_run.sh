#!/usr/bin/env bash
# One device call for the WFST decoder (see eval/bench/wfst_bench.py): wheels, graphs (carried xz-compressed
# under data/carry, since the images exceed the 64 MiB carry limit), extension build (WFST only), GPU tests,
# compute-sanitizer on a small case, and the benchmark. Logs and JSON go to $OUT.
#   prepare here:  bash eval/bench/wfst_gpu_run.sh prepare   (needs data/graphs/tiny/char_blanklast/{compact,normal}
#                  and .whl/; writes data/carry/{whl/*.whl, g/<topology>/{TLG.bin,TLG.fst,HLG.bin}.xz + words.txt,
#                  lp_other_char.pt} from the CURRENT workload, ~48 MB)
#   run there:     bash eval/bench/wfst_gpu_run.sh           (carry: data/carry)
set -o pipefail
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
  --graph-dir compact=$G/compact --graph-dir normal=$G/normal --cuda-graph-modes ${MODES:-0} --fuse-modes ${FUSE:-1 0} --decoders ${DECODERS:-ours riva} --out "$OUT/wfst_bench.json" 2>&1 \
  | grep -v Warning
