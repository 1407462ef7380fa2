"""What the WFST search needs, per utterance, against the GPU decoder's default capacities (no GPU needed).

The CPU reference runs the same search as the CUDA decoder (k2 semantics, same dynamic beam) and counts, per
utterance, the peak / mean frontier (distinct states of a step after its epsilon closure: the GPU's
frontier_capacity), the admitted candidates per step (an upper bound of the GPU's candidate count) and the word
links (the GPU arena's entries), via `WfstDecoder.search_stats`. This script prints their distribution per
graph and how many utterances the default capacities would send to the rescue path, and saves JSON.

    python -m eval.bench.wfst_capacity_stats --lp-file data/lp/bench_other_char_200.pt \
        --graph-dir compact=data/graphs/bench/char_blanklast/compact \
        --graph-dir normal=data/graphs/bench/char_blanklast/normal --out runs/wfst_capacity_stats_bench.json

(`--lp-file` comes from `python -m eval.bench.wfst_bench --scale S --kind char --set other --dump-lp F`.)
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm


def graph_stats(graph_path: Path, lp: torch.Tensor, lengths: torch.Tensor, cfg_kwargs: dict, chunk: int) -> dict:
    """Per-utterance search stats of one graph plus the default capacities of `cfg_kwargs`' config."""
    from decoders.graph import WfstGraph
    from decoders.wfst import WfstDecoder, WfstDecoderConfig, _capacities

    cfg = WfstDecoderConfig(**cfg_kwargs)
    dec = WfstDecoder(WfstGraph.load(graph_path), cfg, "cpu")
    per: dict = {}
    t0 = time.time()
    for i in tqdm(range(0, lp.shape[0], chunk), desc=graph_path.parent.name + "/" + graph_path.stem, unit="batch"):
        st = dec.search_stats(lp[i : i + chunk].contiguous(), lengths[i : i + chunk])
        for k, v in st.items():
            per.setdefault(k, []).extend(v)
    caps = _capacities(cfg, 1, int(lengths.max()))
    return dict(per_utterance=per, seconds=time.time() - t0, frontier_capacity=caps["frontier_capacity"],
                candidate_capacity=caps["candidate_capacity"])


def summarize(name: str, s: dict) -> dict:
    """Distribution of the per-utterance peaks and what the default capacities would do with them."""
    per = s["per_utterance"]
    pf, pc = np.asarray(per["peak_frontier"]), np.asarray(per["peak_candidates"])
    links, steps = np.asarray(per["word_links"]), np.asarray(per["steps"])
    q = lambda a: {f"p{p}": float(np.percentile(a, p)) for p in (50, 90, 99)} | {"max": float(a.max())}  # noqa: E731
    return dict(
        graph=name, utterances=int(pf.size), cpu_seconds=round(s["seconds"], 1),
        peak_frontier=q(pf), mean_frontier=float(np.mean(per["mean_frontier"])), peak_candidates=q(pc),
        word_links_per_step=float(links.sum() / steps.sum()), word_links_per_step_max_utt=float((links / steps).max()),
        frontier_capacity=s["frontier_capacity"], over_frontier=int((pf > s["frontier_capacity"]).sum()),
        candidate_capacity=s["candidate_capacity"], over_candidates=int((pc > s["candidate_capacity"]).sum()),
    )


def print_table(rows: list) -> None:
    print("| graph | utts | peak frontier p50 / p90 / p99 / max | mean frontier | peak candidates p99 / max "
          "| word links per step (mean / worst utt) | frontier cap (over) | candidate cap (over) |")
    print("|---|---:|---|---:|---|---|---|---|")
    for r in rows:
        f, c = r["peak_frontier"], r["peak_candidates"]
        print(f"| {r['graph']} | {r['utterances']} | {f['p50']:.0f} / {f['p90']:.0f} / {f['p99']:.0f} / {f['max']:.0f} "
              f"| {r['mean_frontier']:.0f} | {c['p99']:.0f} / {c['max']:.0f} | {r['word_links_per_step']:.0f} / "
              f"{r['word_links_per_step_max_utt']:.0f} | {r['frontier_capacity']} ({r['over_frontier']}) | "
              f"{r['candidate_capacity']} ({r['over_candidates']}) |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lp-file", required=True, help="torch.save'd dict with 'lp' (B, T, V) and 'len' (wfst_bench --dump-lp)")
    ap.add_argument("--graph-dir", action="append", required=True, help="name=path holding TLG.bin (and/or HLG.bin)")
    ap.add_argument("--graphs", nargs="+", default=["TLG", "HLG"])
    ap.add_argument("--max-utts", type=int, default=200)
    ap.add_argument("--search-beam", type=float, default=17.0)
    ap.add_argument("--max-active", type=int, default=10000)
    ap.add_argument("--chunk", type=int, default=8, help="utterances per CPU call (threads split a call)")
    ap.add_argument("--out", default="runs/wfst_capacity_stats.json")
    args = ap.parse_args(argv)
    data = torch.load(args.lp_file)
    lp, lengths = data["lp"][: args.max_utts].float(), data["len"][: args.max_utts].to(torch.int64)
    rows, raw = [], {}
    for spec in args.graph_dir:
        name, _, path = spec.partition("=")
        for gname in args.graphs:
            gp = Path(path) / f"{gname}.bin"
            if not gp.is_file():
                continue
            s = graph_stats(gp, lp, lengths, dict(search_beam=args.search_beam, max_active=args.max_active), args.chunk)
            raw[f"{name}/{gname}"] = s
            rows.append(summarize(f"{name}/{gname}", s))
            print(json.dumps(rows[-1]), flush=True)
    print_table(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(settings=vars(args), rows=rows, per_utterance={k: v["per_utterance"] for k, v in raw.items()}), indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
