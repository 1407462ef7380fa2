"""Session 18: nbest(10) on this machine, the Python A* + Python hypotheses (the code before f2fc760, kept as
_nbest_paths_reference / _path_hypothesis) against the two C++ ops; best of 3 each, same lattices."""
import time, torch
from decoders.graph import WfstGraph
from decoders.wfst import WfstDecoder, WfstDecoderConfig
from eval.bench.common import LogProbSet
for name, gp, lp, n in (("real speech, tiny BPE TLG", "data/graphs/tiny/bpe_blanklast/compact/TLG.bin", "data/lp/speech_other_100_f16.pt", 100),
                        ("bench BPE compact TLG", "data/graphs/bench/bpe_blanklast/compact/TLG.bin", "data/lp/bench_other_bpe_200.pt", 200)):
    g = WfstGraph.load(gp); d = LogProbSet.load(lp).head(n)
    dec = WfstDecoder(g, WfstDecoderConfig(search_beam=17.0, output_beam=8.0, max_active=10000, acoustic_scale=1.0), device="cpu")
    lats = dec.decode_lattice(d.log_probs, d.lengths)
    def py():
        return [[lats._path_hypothesis(lats._utt(i), p, s) for p, s in lats._nbest_paths_reference(i, 10)] for i in range(len(lats))]
    def op():
        return lats.nbest(10)
    res = {}
    for tag, f in (("python", py), ("ops", op)):
        best = 1e9
        for _ in range(3):
            t = time.perf_counter(); out = f(); best = min(best, time.perf_counter() - t)
        res[tag] = (best, out)
    print(f"{name}, {n} lattices, {int(lats.arc_splits[-1]):,} arcs: nbest(10) python {res['python'][0]*1000:.0f} ms, "
          f"ops {res['ops'][0]*1000:.0f} ms, identical {res['python'][1] == res['ops'][1]}")
