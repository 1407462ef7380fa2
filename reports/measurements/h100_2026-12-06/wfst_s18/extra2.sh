#!/usr/bin/env bash
# Session 18 call 2's EXTRA_BENCH for eval/bench/wfst_lattice_gpu_run.sh (after its bench MBR bench, whose MBR rows
# are now the determinized MBR, the default since d976252's faster determinization): (1) the summed MBR
# (--mbr-summed) on the same bench inputs; (2) real speech as in extra.sh (float16-packed Conformer-CTC log-probs of
# the demo's 100 test-other sentences, tiny BPE TLG rebuilt here): ours best / lattice / MBR (determinized) beside
# Riva's decode_nbest / decode_mbr in one run, then ours' summed MBR.
set -uo pipefail
B="python3 -m eval.bench.wfst_mbr_bench --kind bpe --set other"
echo "== summed MBR, bench"
$B --scale bench --max-utts 200 --batch 200 --graph-dir compact=$G/compact --decoders wfst --outputs mbr \
  --mbr-summed --repeats 3 --output-dir $OUT/runs --run bench_b200_mbr_summed > $OUT/mbr_summed_bench.log 2>&1
grep -E "RTFx" $OUT/mbr_summed_bench.log | head
echo "== real speech (tiny graphs)"
python3 -m recipes.workload scale=tiny > $OUT/workload_tiny.log 2>&1 && python3 -c "from recipes.build_graphs import build_graphs
build_graphs(scale='tiny', token_kinds=['bpe'], blanks=['last'], topologies=['compact'], max_hlg_arcs=0)" \
  > $OUT/graphs_tiny.log 2>&1 || { tail -5 $OUT/graphs_tiny.log; }
T=data/graphs/tiny/bpe_blanklast/compact
LP="--scale tiny --lp-file data/lp/speech_other_100_f16.pt --max-utts 100 --batch 100 --graph-dir compact=$T"
$B $LP --repeats 3 --output-dir $OUT/runs --run speech_b100_f16 > $OUT/mbr_speech.log 2>&1
grep -E "RTFx" $OUT/mbr_speech.log | head
$B $LP --decoders wfst --outputs mbr --mbr-summed --repeats 3 --output-dir $OUT/runs --run speech_b100_f16_summed \
  > $OUT/mbr_speech_summed.log 2>&1
grep -E "RTFx" $OUT/mbr_speech_summed.log | head
