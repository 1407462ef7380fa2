"""What a WFST 1-best step hands the GPU walks, from a numpy simulation of the search on an epsilon-free graph (an
HLG): tokens per step, emitting arcs per token, the share of scored arcs admitted, and the rounds of 32 arcs the
slowest warp walks at batch 1 under the walks' token distribution (for_each_item: ceil(tokens / warps) tokens a warp,
then warp_arc_rounds over their arcs). A fixed beam and max_active (no k2 dynamic beam): the shape of the work, not
the decoder's exact frontier. Session 31 (reports/measurements/README.md) used it on the small char compact HLG:

    python -m eval.bench.probes.wfst_step_sim data/graphs/small/char_blanklast/compact/HLG.bin \\
        data/lp/small_other_char_200.pt --utts 5

--max-bounds adds a design question of session 35: a step without its Max walk, whose Expand admits against a
lower bound P of the step's maximum M instead and whose Resolve drops the tokens that do not beat the exact cutoff
M - beam once the Expand's atomics have found M (BEAMDEC_WFST_BOUND_MAX, wfst_kernels.cuh). Three bounds, each a real
arc's end: every token's first emitting arc, every arc of the best-scoring token, every arc of the 4 best. What each
costs: the gap M - P, and the arcs admitted and destination states claimed (hash inserts, Resolve items) against the
exact cutoff's.
"""
from __future__ import annotations

import argparse

import numpy as np

from decoders.graph import WfstGraph
from eval.bench.common import LogProbSet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph", help="an epsilon-free graph (HLG.bin)")
    ap.add_argument("lp_file", help="log-probs written by eval.bench.wfst_bench --dump-lp")
    ap.add_argument("--utts", type=int, default=5)
    ap.add_argument("--beam", type=float, default=17.0)
    ap.add_argument("--max-active", type=int, default=10000)
    ap.add_argument("--warps", type=int, default=132 * 4 * 8, help="resident warps of the walk grid (H100: 4224)")
    ap.add_argument("--max-bounds", action="store_true",
                    help="also the admissions against lower bounds of each step's maximum")
    args = ap.parse_args()
    g = WfstGraph.load(args.graph)
    data = LogProbSet.load(args.lp_file)
    rs = np.asarray(g.row_splits, np.int64)
    il = np.asarray(g.ilabel, np.int64)
    dest = np.asarray(g.dest, np.int64)
    w = np.asarray(g.weight, np.float32)
    src = np.repeat(np.arange(g.num_states), np.diff(rs))
    emit = np.bincount(src, weights=(il >= 0), minlength=g.num_states).astype(np.int64)
    stats, bound = [], []
    for u in range(min(args.utts, len(data))):
        lp = data.log_probs[u, : int(data.lengths[u])].numpy()
        fs, sc = np.array([g.start_state]), np.array([0.0])
        for t in range(lp.shape[0]):
            d = emit[fs]
            idx = np.repeat(rs[fs] - (np.cumsum(d) - d), d) + np.arange(d.sum())
            own = np.repeat(np.arange(len(fs)), d)
            ends = sc[own] + lp[t, il[idx]] + w[idx]
            if ends.size == 0:
                break
            adm = ends > ends.max() - args.beam
            if args.max_bounds:  # lower bounds P of the step's maximum: real arcs' ends
                lowers = [ends[(np.cumsum(d) - d)[d > 0]].max()]  # every token's first emitting arc
                by_score = np.argsort(-sc, kind="stable")
                for k in (1, 4):  # every arc of the k best-scoring tokens (ties: any of them)
                    top = by_score[:k]
                    lowers.append(ends[np.isin(own, top)].max() if d[top].sum() else lowers[0])
                row = [int(adm.sum()), len(np.unique(dest[idx[adm]]))]
                for lower in lowers:
                    adm_p = ends > lower - args.beam
                    row += [ends.max() - lower, int(adm_p.sum()), len(np.unique(dest[idx[adm_p]]))]
                bound.append(row)
            dd, e = dest[idx[adm]], ends[adm]
            order = np.lexsort((-e, dd))
            dd, e = dd[order], e[order]
            first = np.r_[True, dd[1:] != dd[:-1]]
            nfs, nsc = dd[first], e[first]
            if len(nfs) > args.max_active:
                keep = np.argpartition(-nsc, args.max_active)[: args.max_active]
                nfs, nsc = nfs[keep], nsc[keep]
            n = len(fs)
            span = -(-n // args.warps)
            chunk = min(32, span)
            rounds = [sum(-(-int(d[c: min(n, s + span, c + chunk)].sum()) // 32)
                          for c in range(s, min(n, s + span), chunk)) for s in range(0, n, span)]
            # 2 rounds ahead (the HLG default): a warp's groups of 2 rounds; with the spread form (walk_token_arcs
            # kSpread, steps of at most warps / 2 tokens: R = warps // n warps a token) a token's groups are shared by
            # its R warps
            groups = -(-d // 64)  # ceil(ceil(d / 32) / 2)
            spread = -(-groups // (args.warps // n)) if 2 * n <= args.warps else None
            stats.append((n, int(d.sum()), int(d.max()), int(adm.sum()), max(rounds), float(np.mean(rounds)),
                          int(groups.max()), int(spread.max()) if spread is not None else -1))
            fs, sc = nfs, nsc
    a = np.array(stats, dtype=float)
    print(f"steps {len(a)}: tokens mean {a[:, 0].mean():.0f} (p90 {np.percentile(a[:, 0], 90):.0f}, "
          f"max {a[:, 0].max():.0f}); emitting arcs per step {a[:, 1].mean():.0f}, largest degree {a[:, 2].mean():.1f}")
    print(f"admitted {a[:, 3].sum() / a[:, 1].sum():.3f} of the scored arcs")
    print(f"batch 1: the slowest warp walks {a[:, 4].mean():.2f} rounds a step (p90 {np.percentile(a[:, 4], 90):.0f}), "
          f"the mean warp with a token {a[:, 5].mean():.2f}")
    small = a[:, 7] >= 0
    print(f"2 rounds ahead: the slowest warp walks {a[:, 6].mean():.2f} groups of 2 rounds a step; "
          f"{small.mean():.0%} of the steps have at most warps / 2 tokens (the spread form's), where it walks "
          f"{a[small, 6].mean():.2f} groups, spread {a[small, 7].mean():.2f}")
    if bound:
        b = np.array(bound, dtype=float)
        for j, name in enumerate(("every token's first arc", "the best token's arcs", "the 4 best tokens' arcs")):
            gap, arcs, dests = b[:, 2 + 3 * j], b[:, 3 + 3 * j], b[:, 4 + 3 * j]
            print(f"P = {name}: M - P mean {gap.mean():.2f} (p50 {np.median(gap):.2f}, p90 {np.percentile(gap, 90):.2f}, "
                  f"max {gap.max():.2f}, 0 on {np.mean(gap == 0):.0%} of the steps); admitted {arcs.sum() / b[:, 0].sum():.2f}x "
                  f"the exact cutoff's arcs (p90 step {np.percentile(arcs / np.maximum(b[:, 0], 1), 90):.2f}x), "
                  f"destination states {dests.sum() / b[:, 1].sum():.2f}x (p90 step "
                  f"{np.percentile(dests / np.maximum(b[:, 1], 1), 90):.2f}x)")


if __name__ == "__main__":
    main()
