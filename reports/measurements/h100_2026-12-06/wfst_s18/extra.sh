#!/usr/bin/env bash
# Session 18's EXTRA_BENCH for eval/bench/wfst_lattice_gpu_run.sh (run there after its bench-scale MBR bench; $G and
# $OUT are the script's): (1) ours with 4x the default frontier (16 x max_active: the CPU reference puts the 11 rescued utterances' peaks at 103k-139k states, so 80k would rescue all 11), three repeats, beside the main
# bench's default; (2) the determinized MBR on the same bench inputs (Riva's decode_mbr is in the main bench's run);
# (3) real speech: the tiny BPE TLG rebuilt here, the Conformer-CTC's log-probs of the demo's 100 test-other sentences
# (data/lp/speech_other_100_f16.pt: LogProbSet.save(packed=True), float16, so every decoder reads the same rounded
# values), ours best / lattice / summed MBR / determinized MBR and Riva's decode_mbr / decode_nbest in one run;
# (4) the CTC gpu tests (the switch checks of d9074fd).
set -uo pipefail
B="python3 -m eval.bench.wfst_mbr_bench --kind bpe --set other"
echo "== frontier 160k"
$B --scale bench --max-utts 200 --batch 200 --graph-dir compact=$G/compact --decoders wfst --frontier-capacity 160000 \
  --repeats 3 --output-dir $OUT/runs --run bench_b200_frontier160k > $OUT/mbr_frontier160k.log 2>&1
grep -E "RTFx" $OUT/mbr_frontier160k.log | head
echo "== determinized MBR, bench"
$B --scale bench --max-utts 200 --batch 200 --graph-dir compact=$G/compact --decoders wfst --outputs mbr \
  --mbr-determinize --repeats 3 --output-dir $OUT/runs --run bench_b200_mbr_det > $OUT/mbr_det_bench.log 2>&1
grep -E "RTFx" $OUT/mbr_det_bench.log | head
echo "== real speech (tiny graphs)"
python3 -m recipes.workload scale=tiny > $OUT/workload_tiny.log 2>&1 && python3 -c "from recipes.build_graphs import build_graphs
build_graphs(scale='tiny', token_kinds=['bpe'], blanks=['last'], topologies=['compact'], max_hlg_arcs=0)" \
  > $OUT/graphs_tiny.log 2>&1 || { tail -5 $OUT/graphs_tiny.log; }
T=data/graphs/tiny/bpe_blanklast/compact
LP="--scale tiny --lp-file data/lp/speech_other_100_f16.pt --max-utts 100 --batch 100 --graph-dir compact=$T"
$B $LP --repeats 3 --output-dir $OUT/runs --run speech_b100_f16 > $OUT/mbr_speech.log 2>&1
grep -E "RTFx" $OUT/mbr_speech.log | head
$B $LP --decoders wfst --outputs mbr --mbr-determinize --repeats 3 --output-dir $OUT/runs --run speech_b100_f16_det \
  > $OUT/mbr_speech_det.log 2>&1
grep -E "RTFx" $OUT/mbr_speech_det.log | head
echo "== CTC gpu tests"
timeout ${CTC_TESTS_TIMEOUT_S:-150} python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=60 \
  tests/test_ctc_gpu.py > $OUT/ctc_gpu_tests.txt 2>&1
echo "ctc gpu tests rc=$?: $(tail -1 $OUT/ctc_gpu_tests.txt)" | tee -a $OUT/summary.txt
