"""End-to-end benchmark of the NeMo path: loaded waveforms -> features -> Conformer-CTC -> decoders.

Measures, per batch size: end-to-end RTFx (audio seconds / wall seconds of acoustic model + decoding,
`eval.metrics.rtfx`), acoustic-only and decoder-only RTFx, per-stage seconds and peak CUDA memory per stage.
Warm-up: one untimed pass over the first batch per batch size; every timed region ends with
`torch.cuda.synchronize()` (inside the source's stages and `eval.metrics.Stopwatch`).

Offline by design: with `--model tiny-bpe` / `tiny-char` (or `small-*`: Conformer-CTC Small's shape, ~13M
parameters) it builds a random-weight Conformer-CTC from a NeMo config (`make_tiny_nemo_model`, also used
by the tests), saves it as `.nemo` and restores it through the harness (`eval.acoustic.nemo.build_source`).
Tiny: the numbers measure the pipeline's plumbing and launch overheads; small: the acoustic cost of the
real small model (same shapes, random weights; decoders see near-uniform posteriors, so decoding is slower
than on a trained model). Pass a real `.nemo` path for real numbers. Audio is synthetic
(speech-like amplitude-modulated harmonics + noise), durations drawn like LibriSpeech test utterances.

    python -m eval.bench.nemo_e2e --model tiny-bpe --batch-sizes 1 32 200 --num-utterances 400 \
        --decoders greedy ctc_beam wfst --out runs/bench/nemo_e2e.jsonl

Measured on one H200 (2026-11-29, torch 2.11, NeMo 3.0.0; `bash eval/bench/nemo_h200.sh short`): 400 synthetic
utterances, 2960 s of audio, greedy decoding, fp32; RTFx end-to-end / acoustic only, allocator peak in the
encoder stage:
    tiny (66k params)  batch 1:     326 /   341, 0.08 GB   (launch-bound: ~14 ms of Python + kernels per call)
    tiny               batch 32:   5095 /  5548, 1.5 GB
    tiny               batch 200: 10322 / 11992, 9.2 GB
    small (13M params) batch 200:  3222 /  3357, 18.2 GB  (encoder 0.68 s of the 0.92 s wall)
(bf16 and the CUDA beam decoders were not reached within that call's time.)
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

# ---------------------------------------------------------------------------------------------------------
# A tiny Conformer-CTC built from a NeMo config (random weights; no downloads)
# ---------------------------------------------------------------------------------------------------------

TINY_TEXT = (
    "the quick brown fox jumps over the lazy dog",
    "she sells sea shells by the sea shore",
    "speech recognition with connectionist temporal classification",
    "a graph decoder reads the acoustic model's log probabilities",
    "hello world this is a small test of the decoding harness",
    "we don't know what they're saying but the model will tell",
)
CHAR_LABELS = list(" abcdefghijklmnopqrstuvwxyz'")


def _train_sentencepiece(out_dir: Path, vocab_size: int, text: Sequence[str]) -> Path:
    """Tiny unigram sentencepiece model + NeMo's vocab.txt (the files `tokenizer.dir` must hold)."""
    import sentencepiece as spm

    out_dir.mkdir(parents=True, exist_ok=True)
    corpus = out_dir / "text.txt"
    corpus.write_text("\n".join(list(text) * 20) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(out_dir / "tokenizer"), vocab_size=vocab_size, model_type="unigram",
        character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(out_dir / "tokenizer.model"))
    # NeMo's process_asr_text_tokenizer.py writes vocab.txt: word-initial pieces without "▁", others "##"-prefixed
    with open(out_dir / "vocab.txt", "w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            f.write((piece[1:] if piece.startswith("\u2581") else "##" + piece) + "\n")
    return out_dir


# Encoder sizes: "tiny" for tests; "small" has Conformer-CTC Small's shape (16 layers, d_model 176, 4 heads,
# conv kernel 31; ~13M parameters), so random weights still cost what the real small model costs to run.
ENCODER_SIZES = {
    "tiny": {"n_layers": 2, "d_model": 32, "n_heads": 2, "ff_expansion_factor": 2, "conv_kernel_size": 7},
    "small": {"n_layers": 16, "d_model": 176, "n_heads": 4, "ff_expansion_factor": 4, "conv_kernel_size": 31},
}


def tiny_model_config(
    kind: str = "bpe",
    tokenizer_dir: Optional[Path] = None,
    size: str = "tiny",
    subsampling_factor: int = 4,
    n_mels: int = 80,
) -> dict:
    """NeMo model config of a tiny Conformer-CTC (same modules as stt_en_conformer_ctc_*, smaller)."""
    if kind not in ("bpe", "char"):
        raise ValueError(f"kind must be 'bpe' or 'char', got {kind!r}")
    if size not in ENCODER_SIZES:
        raise ValueError(f"size must be one of {sorted(ENCODER_SIZES)}, got {size!r}")
    enc = ENCODER_SIZES[size]
    cfg = {
        "sample_rate": 16000,
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
            "window": "hann", "features": n_mels, "n_fft": 512, "log": True, "frame_splicing": 1,
            # training-time settings the harness must override for evaluation (dither 0, pad_to 0)
            "dither": 1e-5, "pad_to": 16, "pad_value": 0.0,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder", "feat_in": n_mels, "feat_out": -1,
            **enc, "subsampling": "striding", "subsampling_factor": subsampling_factor,
            "subsampling_conv_channels": enc["d_model"], "self_attention_model": "rel_pos",
            "dropout": 0.0, "dropout_emb": 0.0, "dropout_att": 0.0, "xscaling": True,
        },
        "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": enc["d_model"]},
    }
    if kind == "char":
        cfg["labels"] = CHAR_LABELS
        cfg["decoder"].update(num_classes=len(CHAR_LABELS), vocabulary=CHAR_LABELS)
    else:
        if tokenizer_dir is None:
            raise ValueError("a bpe model needs tokenizer_dir (see _train_sentencepiece)")
        cfg["tokenizer"] = {"dir": str(tokenizer_dir), "type": "bpe"}
        cfg["decoder"].update(num_classes=-1, vocabulary=[])
    return cfg


def make_tiny_nemo_model(
    out_path: Path, kind: str = "bpe", vocab_size: int = 32, seed: int = 0, text: Sequence[str] = TINY_TEXT, **kw
) -> Path:
    """Build a random-weight tiny Conformer-CTC (char or sentencepiece BPE) and save it as `.nemo`."""
    from omegaconf import OmegaConf

    from nemo.collections.asr.models import EncDecCTCModel, EncDecCTCModelBPE

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tok_dir = _train_sentencepiece(out_path.parent / f"{out_path.stem}_tokenizer", vocab_size, text) if kind == "bpe" else None
    cfg = OmegaConf.create(tiny_model_config(kind, tok_dir, **kw))
    model = (EncDecCTCModelBPE if kind == "bpe" else EncDecCTCModel)(cfg=cfg)
    model.eval()
    model.save_to(str(out_path))
    return out_path


def synth_speechlike(duration_s: float, rng: np.random.Generator, sample_rate: int = 16000) -> np.ndarray:
    """Amplitude-modulated harmonic stack with a wandering pitch plus noise: speech-like spectra, no speech."""
    n = max(int(duration_s * sample_rate), 1)
    t = np.arange(n) / sample_rate
    f0 = 110 + 40 * np.sin(2 * np.pi * rng.uniform(0.2, 0.8) * t + rng.uniform(0, 6.28))
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    wave = sum((0.6 / k) * np.sin(k * phase) for k in range(1, 8))
    envelope = 0.5 * (1 + np.sin(2 * np.pi * rng.uniform(2, 5) * t)) ** 2  # ~syllable rate
    wave = 0.1 * envelope * wave + 0.005 * rng.standard_normal(n)
    return wave.astype(np.float32)


def librispeech_like_durations(num: int, rng: np.random.Generator) -> np.ndarray:
    """LibriSpeech test-clean durations are ~log-normal, median ~6 s, 1.3-35 s."""
    return np.clip(rng.lognormal(mean=np.log(6.0), sigma=0.7, size=num), 1.3, 35.0)


# ---------------------------------------------------------------------------------------------------------
# Benchmark
# ---------------------------------------------------------------------------------------------------------


GRAPH_USERS = {"wfst", "flashlight", "k2py", "k2", "kaldi", "riva"}  # decoders that need a graph / ARPA / lexicon


def _build_decoders(names: Sequence[str], tokens, device: str, graph_dir: Optional[Path]) -> dict:
    from eval.adapters.base import DecodingContext, build_decoder

    ctx = DecodingContext(tokens=tokens, device=device, graph_dir=graph_dir)
    if graph_dir is not None:  # LM-based baselines read the ARPA and lexicon the graph was built from
        arpa = Path(graph_dir).parent / "tiny.arpa"
        ctx.arpa_path = arpa if arpa.is_file() else None
        lex = Path(graph_dir) / "lexicon.txt"
        ctx.lexicon_path = lex if lex.is_file() else None
        words = Path(graph_dir) / "words.txt"
        ctx.words_path = words if words.is_file() else None
    out, skipped = {}, {}
    for name in names:
        try:
            out[name] = build_decoder(name, {"name": name}, ctx)
        except Exception as e:  # noqa: BLE001 - report which decoders this machine lacks, keep going
            skipped[name] = f"{type(e).__name__}: {e}"
    return out, skipped


def run_benchmark(
    model_spec: str,
    batch_sizes: Sequence[int],
    num_utterances: int,
    decoders: Sequence[str],
    precision: str = "fp32",
    device: str = "auto",
    graph_dir: Optional[Path] = None,
    seed: int = 0,
    workdir: Optional[Path] = None,
    out_path: Optional[Path] = None,
) -> list[dict]:
    from eval.acoustic.base import Utterance
    from eval.acoustic.nemo import build_source
    from eval.metrics import Stopwatch, rtfx

    workdir = Path(workdir or tempfile.mkdtemp(prefix="nemo_e2e_"))
    size, _, kind = model_spec.partition("-")
    if size in ENCODER_SIZES and kind in ("bpe", "char"):  # random-weight model built here (once per workdir)
        path = workdir / f"{model_spec}.nemo"
        model_spec = str(path if path.is_file() else make_tiny_nemo_model(path, kind=kind, size=size))
    t0 = time.perf_counter()
    source = build_source({"model": model_spec, "precision": precision, "device": device})
    load_s = time.perf_counter() - t0
    dev = str(source.device)
    if graph_dir is None and set(decoders) & GRAPH_USERS:
        graph_dir = _maybe_build_graph(source.tokens, workdir)
    decs, skipped = _build_decoders(decoders, source.tokens, dev, graph_dir)
    for name, why in skipped.items():
        print(f"[nemo_e2e] decoder {name} unavailable: {why}", file=sys.stderr)

    rng = np.random.default_rng(seed)
    durations = librispeech_like_durations(num_utterances, rng)
    waves = {f"utt{i:05d}": synth_speechlike(d, rng) for i, d in enumerate(durations)}
    utts = [Utterance(id=k, text="", duration=len(w) / 16000, audio_filepath=None) for k, w in waves.items()]
    source.audio_loader = lambda u: waves[u.id]  # in memory: end-to-end starts from loaded audio
    audio_total_s = float(sum(u.duration for u in utts))
    rows = []
    for bs in batch_sizes:
        # warm-up: the first (longest, after sorting) batch, untimed, through every decoder
        warm = next(source.batches(utts[:bs], bs))
        for d in decs.values():
            d.decode(warm.log_probs, warm.lengths)
        source.reset_stats()
        if source.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        acoustic_s = 0.0
        dec_watch = {n: Stopwatch(dev) for n in decs}
        t_start = time.perf_counter()
        stage_peak: dict[str, int] = {}
        cuda = source.device.type == "cuda"
        decode_peak = 0
        for batch in source.batches(utts, bs):
            acoustic_s += batch.acoustic_seconds
            for k, v in batch.stage_memory_bytes.items():
                stage_peak[k] = max(stage_peak.get(k, 0), v)
            if cuda:  # the source resets the peak per stage; decoding gets its own window
                torch.cuda.reset_peak_memory_stats()
            for name, d in decs.items():
                with dec_watch[name]:
                    d.decode(batch.log_probs, batch.lengths)
            if cuda:
                decode_peak = max(decode_peak, torch.cuda.max_memory_allocated())
        if source.device.type == "cuda":
            torch.cuda.synchronize()
        wall_s = time.perf_counter() - t_start
        decoder_s = {n: w.wall_seconds for n, w in dec_watch.items()}
        row = {
            "bench": "nemo_e2e",
            "model": Path(model_spec).name,
            "num_parameters": source.describe()["num_parameters"],
            "precision": precision,
            "device": dev,
            "gpu": torch.cuda.get_device_name() if source.device.type == "cuda" else None,
            "batch_size": bs,
            "utterances": len(utts),
            "audio_seconds": round(audio_total_s, 2),
            "wall_seconds": round(wall_s, 4),
            "acoustic_seconds": round(acoustic_s, 4),
            "decoder_seconds": {n: round(s, 4) for n, s in decoder_s.items()},
            "rtfx_end_to_end": round(rtfx(audio_total_s, wall_s), 1),  # acoustic + every decoder listed
            "rtfx_acoustic": round(rtfx(audio_total_s, acoustic_s), 1),
            "rtfx_decoder": {n: round(rtfx(audio_total_s, s), 1) for n, s in decoder_s.items()},
            "rtfx_end_to_end_per_decoder": {n: round(rtfx(audio_total_s, acoustic_s + s), 1) for n, s in decoder_s.items()},
            "stage_seconds": {k: round(v, 4) for k, v in source.stage_seconds.items()},
            "stage_peak_mib": {k: round(v / 2**20, 1) for k, v in stage_peak.items()},
            # allocator peaks (bytes in use, model weights included): per acoustic stage, decoding, overall
            "decode_peak_mib": round(decode_peak / 2**20, 1) if cuda else None,
            "peak_cuda_mib": round(max([decode_peak, *stage_peak.values()]) / 2**20, 1) if cuda else None,
            "model_load_seconds": round(load_s, 2),
            "decoders_skipped": skipped,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out_path is not None:  # appended as soon as measured: a later timeout loses nothing
            Path(out_path).parent.mkdir(parents=True, exist_ok=True)
            with open(out_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
    return rows


def _maybe_build_graph(tokens, workdir: Path) -> Optional[Path]:
    """A small TLG from the model's own tokenizer, when the graph recipes exist in this checkout."""
    try:
        return build_tiny_graph(tokens, workdir)
    except ImportError as e:
        print(f"[nemo_e2e] graph recipes unavailable ({e}); wfst decoder skipped", file=sys.stderr)
        return None


def build_tiny_graph(tokens, workdir: Path, topology: str = "compact", text: Sequence[str] = TINY_TEXT) -> Path:
    """Graph directory for `tokens` (the model's tokenizer) over the words of `text`, with a trigram KN LM
    estimated by `recipes.lm` and compiled by `recipes.graphs.build`."""
    from recipes.graphs.build import build_token_set_graphs
    from recipes.lm import build_arpa

    words = sorted({w for line in text for w in line.split()})
    index = {w: i for i, w in enumerate(words)}
    ids = np.array([index[w] for line in text for w in line.split()], dtype=np.int64)
    offsets = np.cumsum([0] + [len(line.split()) for line in text]).astype(np.int64)
    out = workdir / "graphs"
    out.mkdir(parents=True, exist_ok=True)
    arpa = out / "tiny.arpa"
    build_arpa(ids, offsets, words, arpa)
    build_token_set_graphs(out, tokens, words, arpa, topologies=[topology])
    return out / topology


def parse_run(spec: str) -> tuple[str, str, list[int]]:
    """"MODEL[:PRECISION[:B1,B2,...]]" -> (model, precision, batch sizes); missing parts come from the flags."""
    model, _, rest = spec.partition(":")
    precision, _, sizes = rest.partition(":")
    return model, precision, [int(x) for x in sizes.split(",") if x]


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-bpe",
                    help="tiny-bpe | tiny-char | small-bpe | small-char (random weights) | .nemo path | pretrained name")
    ap.add_argument("--runs", nargs="+", default=None,
                    help="several MODEL[:PRECISION[:BATCHES]] runs in one process, e.g. tiny-bpe:fp32:1,32,200 "
                    "small-bpe:bf16:200 (overrides --model; missing parts default to the flags)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32, 200])
    ap.add_argument("--num-utterances", type=int, default=400)
    ap.add_argument("--decoders", nargs="+", default=["greedy"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--graph-dir", type=Path, default=None)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="append result rows (JSONL) here, one per batch size")
    args = ap.parse_args(argv)
    runs = [parse_run(r) for r in args.runs] if args.runs else [(args.model, "", [])]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="nemo_e2e_"))
    for model, precision, sizes in runs:
        precision = precision or args.precision
        sizes = sizes or args.batch_sizes
        if precision not in ("fp32", "fp16", "bf16"):
            ap.error(f"precision must be fp32, fp16 or bf16, got {precision!r}")
        if args.num_utterances < max(sizes):
            ap.error(f"--num-utterances ({args.num_utterances}) must be >= the largest batch size {max(sizes)}")
        run_benchmark(model, sizes, args.num_utterances, args.decoders, precision, args.device, args.graph_dir,
                      workdir=workdir, out_path=args.out)


if __name__ == "__main__":
    main()
