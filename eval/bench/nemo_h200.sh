#!/usr/bin/env bash
# One device call for the NeMo path on the offline H200 host (see .ci/gpu-host/requirements-nemo.txt):
# install the carried wheels, eval.bench.nemo_e2e (most important first), then the GPU tests of tests/test_nemo_e2e.py.
#   bash eval/bench/nemo_h200.sh short   # acoustic path only, greedy decoding (~1 min)
#   bash eval/bench/nemo_h200.sh full    # + a run with the CUDA decoders (may JIT-build the extension)
# Needs `.whl` and `.whl-nemo` carried; run directories go to runs/bench/nemo_e2e/{h200_short,h200_decoders}
# and are copied to $OUT/runs (render them with `python -m reports.cli DIR`).
set -uo pipefail
mode=${1:-short}
OUT=${OUT:-/tmp/nemo_h200_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
t0=$(date +%s)
for d in ${NEMO_H200_WHEEL_DIRS-.whl-nemo .whl}; do  # NEMO_H200_WHEEL_DIRS="" skips (dry run elsewhere)
  ls $d/*.whl >/dev/null 2>&1 || { echo "missing wheels in $d"; exit 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-nemo $d/*.whl \
    || { echo "pip install $d failed"; exit 1; }
done
export PYTHONPATH=.:/tmp/site-nemo:${PYTHONPATH:-}
echo "wheels installed in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import importlib.metadata as m; print({p: m.version(p) for p in ('torch', 'nemo_toolkit', 'lightning', 'numpy')})"
timeout 70 python3 -m eval.bench.nemo_e2e --runs tiny-bpe:fp32:1,32,200 small-bpe:fp32:200 small-bpe:bf16:200 \
  --num-utterances 400 --decoders greedy --workdir /tmp/nemo_bench --run h200_short 2>&1 \
  | grep -v "NeMo W\|NeMo I\|^I0000\|warn" | tail -20
echo "bench done at $(( $(date +%s) - t0 )) s"
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_nemo_e2e.py 2>&1 | tail -15
echo "gpu tests done at $(( $(date +%s) - t0 )) s"
if [ "$mode" = full ]; then
  timeout 50 python3 -m eval.bench.nemo_e2e --runs small-bpe:bf16:200 --num-utterances 400 \
    --decoders greedy ctc_beam wfst torchaudio_ctc --workdir /tmp/nemo_bench --run h200_decoders 2>&1 \
    | grep -v "NeMo W\|NeMo I\|^I0000\|warn\|kaldilm\|^\[I\]" | tail -12
  echo "decoder bench done at $(( $(date +%s) - t0 )) s"
fi
mkdir -p "$OUT/runs" && cp -r runs/bench/nemo_e2e "$OUT/runs/" 2>/dev/null
