"""How often the one-warp CTC kernel's rank form ranks a frame, and how often it hands the frame to the select rounds
(more than 128 candidates at its threshold), on the benchmark's inputs (OASR's offline shapes, `ctc_bench.inputs`).

A diagnostic for the kernel's A/B runs, not a benchmark: it prints one line per shape and writes no result rows.

    python -m eval.bench.ctc_round_stats            (GPU host; ~10 s after the extension is built)
"""
from __future__ import annotations

import os


def main() -> None:
    os.environ["BEAMDEC_CTC_ROUNDS"] = "rank"
    os.environ["BEAMDEC_CTC_ROUND_STATS"] = "1"
    import torch

    from decoders.ctc import CtcBeamSearchConfig, load_ops
    from eval.bench.ctc_bench import OFFLINE_SHAPES, inputs

    ops = load_ops()
    dev = torch.zeros(1, device="cuda")
    print("shape (B, T, V, beam) | kernel | ranked frames | handed to the rounds | ranked %")
    for B, T, V, beam in OFFLINE_SHAPES:
        lp, lens = inputs(B, T, V)
        seq = T + (T & 1)
        cfg = CtcBeamSearchConfig(beam_size=beam, blank_skip_threshold=1.0, max_seq_len=seq)
        ops.ctc_round_stats(dev, True)
        ops.ctc_decode_offline(lp, lens, beam, 0, 1.0, 1, seq, *cfg.storage_args(seq))
        ranked, fallback = ops.ctc_round_stats(dev, True).tolist()
        total = ranked + fallback
        kernel = "one-warp" if total else "block (the rank form is the one-warp kernel's)"
        pct = f"{100.0 * ranked / total:.1f}" if total else "-"
        print(f"{(B, T, V, beam)} | {kernel} | {ranked} | {fallback} | {pct}")


if __name__ == "__main__":
    main()
