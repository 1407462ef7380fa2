"""WER and search effort of the WFST search per (search_beam, max_active), from the CPU reference (no GPU needed).

The CPU reference runs exactly the search of the CUDA decoder (same k2 semantics, same results), so this shows
what a wider beam buys in WER and costs in frontier size (the GPU's work per frame grows with it) before any
GPU time is spent. Prints one row per setting and saves JSON.

    python -m eval.bench.wfst_beam_sweep --lp-file data/lp/bench_other_char_200.pt \
        --graph data/graphs/bench/char_blanklast/compact/TLG.bin --beams 17 20 --max-active 10000 20000

(`--lp-file` comes from `python -m eval.bench.wfst_bench --scale S --kind char --set other --dump-lp F`.)
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm


def sweep_row(decoder, data: dict, n: int, chunk: int) -> dict:
    """WER (%) and the mean / p99-peak frontier of one decoder config over the first n utterances."""
    from eval.bench.wfst_bench import wer

    hyps, mean_front, peak_front = [], [], []
    t0 = time.time()
    for i in range(0, n, chunk):
        lp, lengths = data["lp"][i : min(n, i + chunk)].contiguous(), data["len"][i : min(n, i + chunk)]
        result, st = decoder.decode_with_stats(lp, lengths)
        hyps += [" ".join(w) for w in result.word_strings]
        mean_front += st["mean_frontier"]
        peak_front += st["peak_frontier"]
    return dict(wer=round(100 * wer(data["refs"][:n], hyps), 2), mean_frontier=round(float(np.mean(mean_front)), 1),
                peak_frontier_p99=float(np.percentile(peak_front, 99)), cpu_seconds=round(time.time() - t0, 1))


def main(argv=None) -> None:
    from decoders.graph import WfstGraph
    from decoders.wfst import WfstDecoder, WfstDecoderConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lp-file", type=Path, required=True)
    ap.add_argument("--graph", type=Path, required=True, help="TLG.bin / HLG.bin")
    ap.add_argument("--beams", type=float, nargs="+", default=[17.0, 20.0])
    ap.add_argument("--max-active", type=int, nargs="+", default=[10000])
    ap.add_argument("--max-utts", type=int, default=200)
    ap.add_argument("--chunk", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("runs/wfst_beam_sweep.json"))
    args = ap.parse_args(argv)
    data = torch.load(args.lp_file, weights_only=False)
    n = min(args.max_utts, int(data["lp"].shape[0]))
    graph = WfstGraph.load(args.graph)
    rows = []
    for beam, max_active in tqdm(list(itertools.product(args.beams, args.max_active)), desc="settings"):
        dec = WfstDecoder(graph, WfstDecoderConfig(search_beam=beam, max_active=max_active), "cpu")
        rows.append(dict(graph=str(args.graph), utterances=n, search_beam=beam, max_active=max_active,
                         **sweep_row(dec, data, n, args.chunk)))
        tqdm.write(json.dumps(rows[-1]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
