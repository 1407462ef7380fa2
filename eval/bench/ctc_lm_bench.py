"""Our CTC prefix beam search + token n-gram LM (`ctc_lm`) vs NeMo's batched beam search + its GPU n-gram LM
(`nemo_beam`), same run, same log-probs, same token ARPA, same beam, LM weight and insertion bonus; NeMo's greedy
(`nemo_greedy`) beside them as the no-LM floor.

Sources (`--sources`):
- `speech`: the project's Conformer-CTC (models/conformer_ctc_speech) on the synthesized test-other set
  (data/speech/tiny/test-other.jsonl; `python -m eval.demo` builds it), log-probs computed once by the harness's
  NeMo source before any decoder is timed; or `--speech-lp-file` (written by `--dump-speech-lp`).
- `simulator`: the tiny workload's posterior simulator, 'other' set, BPE tokens (blank last).
The token LM (NeMo's encoding, order 3) is built from the workload's LM text (recipes/token_lm.py); both decoders
read that one file. Batch sizes `--batches` (default 1 and 200; batch 1 decodes the first `--b1-utts`).
Timing: decoder-only through the adapters (`boundary` "api"), one warm-up pass, `--repeats` timed passes
(eval.bench.common.decode_pass). Rows: one run directory (runs/bench/ctc_lm_vs_nemo/<run>), ours and NeMo's
in one (source, batch) naming each other in `run_mate`, rendered side by side by reports.tables.

    python -m eval.bench.ctc_lm_bench [--sources speech simulator] [--batches 1 200] [--beam 10] [--run NAME]
        [--kernel auto|fused|torch]     # ours: the fused CUDA kernel (auto on CUDA) or the torch path
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

import torch

from eval.bench.common import (
    BenchRun,
    LogProbSet,
    decode_pass,
    describe_error,
    print_rows,
    release_device_memory,
    workload_set,
)

OURS, THEIRS, FLOOR = "ctc_lm", "nemo_beam", "nemo_greedy"
SPEECH_MODEL = "models/conformer_ctc_speech/conformer_ctc_speech.nemo"
SPEECH_MANIFEST = "data/speech/tiny/test-other.jsonl"


def speech_set(manifest: str | Path, model: str, max_utts: int) -> LogProbSet:
    """Log-probs of the real-speech model on a manifest's utterances (NeMo features + Conformer-CTC via the
    harness's NeMo source), on the host."""
    from eval.acoustic.base import Utterance
    from eval.acoustic.nemo import build_source

    manifest = Path(manifest)
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest} not found (synthesize it with `python -m eval.demo`, or pass "
                                f"--speech-lp-file)")
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines() if line.strip()][:max_utts]
    utts = [Utterance(id=r.get("id", f"utt{i:05d}"), text=r["text"], duration=float(r["duration"]),
                      audio_filepath=str((manifest.parent / r["audio_filepath"]).resolve()))
            for i, r in enumerate(rows)]
    source = build_source({"model": model, "sort_by_length": False})
    lps, lens = [], []
    with torch.inference_mode():
        for batch in source.batches(utts, 16):
            lps += [lp[: int(n)].float().cpu() for lp, n in zip(batch.log_probs, batch.lengths)]
            lens += [int(n) for n in batch.lengths]
    T = max(lens)
    V = lps[0].shape[-1]
    out = torch.full((len(lps), T, V), 0.0)
    for i, lp in enumerate(lps):
        out[i, : lp.shape[0]] = lp
    tok = source.tokens
    return LogProbSet(log_probs=out, lengths=torch.tensor(lens), refs=[u.text for u in utts],
                      durations=[u.duration for u in utts], ids=[u.id for u in utts], tokens=list(tok.tokens),
                      blank_id=tok.blank_id, kind=tok.kind, dataset="speech_other")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", nargs="+", default=["speech", "simulator"], choices=["speech", "simulator"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 200])
    ap.add_argument("--b1-utts", type=int, default=30, help="utterances decoded at batch 1")
    ap.add_argument("--max-utts", type=int, default=200)
    ap.add_argument("--beam", type=int, default=10)
    ap.add_argument("--lm-weight", type=float, default=0.5)
    ap.add_argument("--insertion-bonus", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--kernel", default="auto", choices=["auto", "fused", "torch"],
                    help="ctc_lm's implementation (decoders.ctc_lm.CtcLmConfig.kernel; auto: the torch path until "
                         "the fused kernel has run on a GPU, then fused on CUDA)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--speech-model", default=SPEECH_MODEL)
    ap.add_argument("--speech-manifest", default=SPEECH_MANIFEST)
    ap.add_argument("--speech-lp-file", default=None, help="log-probs written by --dump-speech-lp")
    ap.add_argument("--dump-speech-lp", default=None, help="write the speech set's log-probs here and exit")
    ap.add_argument("--decoders", nargs="+", default=[OURS, THEIRS, FLOOR], choices=[OURS, THEIRS, FLOOR])
    ap.add_argument("--output-dir", default="runs/bench")
    ap.add_argument("--experiment", default="ctc_lm_vs_nemo")
    ap.add_argument("--run", default=None)
    args = ap.parse_args(argv)
    if args.beam < 1 or any(b < 1 for b in args.batches):
        print("error: --beam and --batches must be positive", file=sys.stderr)
        return 2

    from eval.adapters.base import DecodingContext, build_decoder
    from recipes.workload import prepare_workload

    if args.dump_speech_lp:
        speech_set(args.speech_manifest, args.speech_model, args.max_utts).save(args.dump_speech_lp)
        print(f"wrote {args.dump_speech_lp}")
        return 0
    wl = prepare_workload("tiny")
    shared = {"beam_size": args.beam}
    cfgs = {
        OURS: {**shared, "lm_weight": args.lm_weight, "insertion_bonus": args.insertion_bonus, "kernel": args.kernel},
        THEIRS: {**shared, "ngram_lm_alpha": args.lm_weight, "beam_beta": args.insertion_bonus},
        FLOOR: {},
    }
    run = BenchRun(args.experiment, args.run, {"args": vars(args), "decoders": cfgs}, output_dir=args.output_dir)
    for src in args.sources:
        try:
            if src == "speech":
                data = (LogProbSet.load(args.speech_lp_file).head(args.max_utts) if args.speech_lp_file
                        else speech_set(args.speech_manifest, args.speech_model, args.max_utts))
            else:
                data = workload_set("tiny", "bpe", "other", args.max_utts)
                data.dataset = "simulator_other"
        except Exception as err:  # noqa: BLE001 - the row says why
            for name in args.decoders:
                run.unavailable(decoder=f"{name}@{args.device}", decoder_name=name, device=args.device,
                                reason=describe_error(err), params={"source": src})
            continue
        tokens = data.token_set()
        if data.kind == "bpe":  # the workload's sentencepiece model (the speech model's tokenizer is the same)
            tokens = wl.token_set("bpe", "last" if data.blank_id == data.vocab_size - 1 else "first")
            if tokens.tokens != list(data.tokens):
                raise SystemExit(f"error: {src}: the log-probs' tokens differ from the workload's BPE pieces")
        ctx = DecodingContext(tokens=tokens, device=args.device, arpa_path=wl.arpa_path, words_path=wl.words_path)
        lp_dev = data.log_probs.to(args.device)
        len_dev = data.lengths.to(args.device)
        for batch in args.batches:
            n = min(len(data), args.b1_utts) if batch == 1 else len(data)
            sub = data.head(n)
            params = {"source": src, "batch": batch, "beam": args.beam}
            for name in args.decoders:
                label = f"{name}@{args.device}"
                mate = {OURS: f"{THEIRS}@{args.device}", THEIRS: f"{OURS}@{args.device}"}.get(name)
                try:
                    dec = build_decoder(name, cfgs[name], ctx)
                    res = decode_pass(dec, lp_dev[:n], len_dev[:n], batch, args.device, repeats=args.repeats)
                    run.scored(decoder=label, decoder_name=name, device=args.device, data=sub, result=res,
                               batch_size=batch, warmup_batches=1, decoder_config=cfgs[name], params=params,
                               run_mate=mate, boundary="api")
                except Exception as err:  # noqa: BLE001
                    run.unavailable(decoder=label, decoder_name=name, device=args.device,
                                    reason=describe_error(err), params=params)
                release_device_memory()
                run.checkpoint()
    run.close()
    print_rows(run.rows, [(OURS, THEIRS, ["source", "batch", "beam"])])
    return 0


if __name__ == "__main__":
    sys.exit(main())
