"""Hypothesis agreement between two decoders' rows: how many utterances got the identical hypothesis, each side's
WER, and the paired bootstrap of the WER difference (eval.metrics, the harness's one definition), from the
hyps.jsonl(.gz) of run directories. The rows may come from different runs: the inputs must then be the same
utterances with the same references (checked), and only the WER side is comparable -- timings are not.

    python -m reports.agreement RUN_DIR_A DECODER_A RUN_DIR_B DECODER_B [--dataset NAME]

e.g. our determinized MBR on the CPU against Riva's decode_mbr from a GPU run on the same log-probs file:
    python -m reports.agreement runs/bench/wfst_mbr/speech_cpu wfst@cpu[compact\\ TLG,\\ mbr] \\
        reports/evidence/h200_2026-12-02/wfst_mbr/speech_b100_s6 "riva@cuda[compact TLG, mbr]"
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Optional

from eval.metrics import normalize_text, paired_bootstrap, utterance_error_counts


def load_hyps(run_dir: str | Path, decoder: str, dataset: Optional[str] = None) -> dict[str, tuple[str, str]]:
    """{utterance id: (reference, hypothesis)} of one decoder's rows in a run directory (hyps.jsonl or .gz)."""
    run_dir = Path(run_dir)
    path = run_dir / "hyps.jsonl"
    if not path.is_file():
        path = run_dir / "hyps.jsonl.gz"
    if not path.is_file():
        raise FileNotFoundError(f"agreement: no hyps.jsonl(.gz) in {run_dir}")
    opener = gzip.open if path.suffix == ".gz" else open
    out: dict[str, tuple[str, str]] = {}
    with opener(path, "rt") as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"agreement: {path}:{n} is not a JSON line ({e.msg})") from None
            if r.get("decoder") == decoder and (dataset is None or r.get("dataset") == dataset):
                out[str(r["id"])] = (str(r["ref"]), str(r["hyp"]))
    if not out:
        raise ValueError(f"agreement: no hypotheses of {decoder!r} in {path}")
    return out


def agreement(a: dict[str, tuple[str, str]], b: dict[str, tuple[str, str]]) -> dict:
    """Identical hypotheses (after the harness's text normaliser), both WERs and the paired bootstrap of WER(a) -
    WER(b) over the utterances both sides decoded, which must have the same references."""
    ids = sorted(set(a) & set(b))
    if not ids:
        raise ValueError("agreement: the two sides share no utterance id")
    bad = [i for i in ids if normalize_text(a[i][0]) != normalize_text(b[i][0])]
    if bad:
        raise ValueError(f"agreement: {len(bad)} shared utterances have different references (first: {bad[0]}): "
                         "not the same inputs")
    refs = [a[i][0] for i in ids]
    err_a, words = utterance_error_counts(refs, [a[i][1] for i in ids])
    err_b, _ = utterance_error_counts(refs, [b[i][1] for i in ids])
    same = sum(normalize_text(a[i][1]) == normalize_text(b[i][1]) for i in ids)
    n_words = max(sum(words), 1)
    return {"utterances": len(ids), "only_a": len(set(a) - set(b)), "only_b": len(set(b) - set(a)),
            "identical": same, "wer_a": sum(err_a) / n_words, "wer_b": sum(err_b) / n_words,
            "paired": paired_bootstrap(err_a, err_b, words).as_dict()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a")
    ap.add_argument("decoder_a")
    ap.add_argument("run_b")
    ap.add_argument("decoder_b")
    ap.add_argument("--dataset", default=None, help="only rows of this dataset (default: every row of the decoder)")
    args = ap.parse_args(argv)
    try:
        res = agreement(load_hyps(args.run_a, args.decoder_a, args.dataset),
                        load_hyps(args.run_b, args.decoder_b, args.dataset))
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    p = res["paired"]
    print(f"{res['utterances']} shared utterances ({res['only_a']} only in A, {res['only_b']} only in B): "
          f"{res['identical']} identical hypotheses")
    print(f"WER A {100 * res['wer_a']:.2f} %  ({args.decoder_a})")
    print(f"WER B {100 * res['wer_b']:.2f} %  ({args.decoder_b})")
    print(f"A - B {100 * p['estimate']:+.2f} points, {int(100 * p['confidence'])} % paired bootstrap "
          f"[{100 * p['low']:+.2f}, {100 * p['high']:+.2f}], P(A better) {p['prob_a_better']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
