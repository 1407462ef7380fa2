"""End-to-end benchmark of the NeMo path: loaded waveforms -> features -> Conformer-CTC -> decoders.

Measures, per (model, precision, batch size) and decoder: decoder-only and end-to-end RTFx (audio seconds / wall
seconds of acoustic model + that decoder, eval.metrics.rtfx via eval.results.measured_row), acoustic seconds and
the acoustic source's per-stage CUDA peaks, the decoder's memory (eval.metrics.MemoryProbe). Warm-up: one untimed
pass over the first batch per batch size; timed regions are eval.metrics.Stopwatch (synchronised on CUDA).
The audio is synthetic (no references): every row's WER is null. One run directory (default
runs/bench/nemo_e2e/<timestamp>), one row per (decoder, model, precision, batch size), rendered by
reports.tables.results_table.

Offline by design: with `--model tiny-bpe` / `tiny-char` (or `small-*`: Conformer-CTC Small's shape, ~13M
parameters) it builds a random-weight Conformer-CTC from a NeMo config (`make_tiny_nemo_model`, also used
by the tests), saves it as `.nemo` and restores it through the harness (`eval.acoustic.nemo.build_source`).
Tiny: the numbers measure the pipeline's plumbing and launch overheads; small: the acoustic cost of the
real small model (same shapes, random weights; decoders see near-uniform posteriors, so decoding is slower
than on a trained model). Pass a real `.nemo` path for real numbers. Audio is synthetic
(speech-like amplitude-modulated harmonics + noise), durations drawn like LibriSpeech test utterances.

    python -m eval.bench.nemo_e2e --model tiny-bpe --batch-sizes 1 32 200 --num-utterances 400 \
        --decoders greedy ctc_beam wfst

Measured numbers: the committed run directories (bash eval/bench/nemo_h200.sh on the H200; see the README).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
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
    from recipes.nemo_tokenizer import write_nemo_vocab_txt

    write_nemo_vocab_txt(out_dir / "tokenizer.model", out_dir / "vocab.txt")
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
    run: "BenchRun",
    model_spec: str,
    batch_sizes: Sequence[int],
    num_utterances: int,
    decoders: Sequence[str],
    precision: str = "fp32",
    device: str = "auto",
    graph_dir: Optional[Path] = None,
    seed: int = 0,
    workdir: Optional[Path] = None,
) -> list:
    """Rows of one model/precision (added to `run`, checkpointed after each batch size)."""
    from eval.acoustic.base import Utterance
    from eval.acoustic.nemo import build_source
    from eval.bench.common import describe_error, release_device_memory
    from eval.metrics import MemoryProbe, Stopwatch, WerStats

    workdir = Path(workdir or tempfile.mkdtemp(prefix="nemo_e2e_"))
    size, _, kind = model_spec.partition("-")
    if size in ENCODER_SIZES and kind in ("bpe", "char"):  # random-weight model built here (once per workdir)
        path = workdir / f"{model_spec}.nemo"
        model_spec = str(path if path.is_file() else make_tiny_nemo_model(path, kind=kind, size=size))
    load_watch = Stopwatch("cpu")
    with load_watch:
        source = build_source({"model": model_spec, "precision": precision, "device": device})
    dev = str(source.device)
    if graph_dir is None and set(decoders) & GRAPH_USERS:
        graph_dir = _maybe_build_graph(source.tokens, workdir)
    decs, skipped = _build_decoders(decoders, source.tokens, dev, graph_dir)
    model = Path(model_spec).name
    params = {"model": model, "precision": precision, "num_parameters": int(source.describe()["num_parameters"])}
    for name, why in skipped.items():
        run.unavailable(decoder=f"{name}@{dev}[{model} {precision}]", decoder_name=name, device=dev, reason=why,
                        params=params)

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
        acoustic_s, frames = 0.0, 0
        stage_peak: dict[str, int] = {}
        watches = {n: Stopwatch(dev) for n in decs}
        memory = {n: None for n in decs}
        failed: dict[str, str] = {}
        for batch in source.batches(utts, bs):
            acoustic_s += batch.acoustic_seconds
            frames += int(batch.lengths.sum())
            for k, v in batch.stage_memory_bytes.items():
                stage_peak[k] = max(stage_peak.get(k, 0), int(v))
            for name, d in decs.items():
                if name in failed:
                    continue
                probe = MemoryProbe(dev)
                try:
                    with probe, watches[name]:
                        d.decode(batch.log_probs, batch.lengths)
                except Exception as e:  # noqa: BLE001 - one decoder failing is a row, the others go on
                    failed[name] = f"failed while decoding: {describe_error(e)}"
                    continue
                memory[name] = probe.stats if memory[name] is None else memory[name].merge(probe.stats)
        for name in decs:
            label = f"{name}@{dev}[{model} {precision} b={bs}]"
            if name in failed:
                run.unavailable(decoder=label, decoder_name=name, device=dev, reason=failed[name], params=params)
                continue
            rows.append(run.measured(
                decoder=label, decoder_name=name, device=dev, dataset="synthetic", wer=WerStats(utterances=len(utts)),
                references=False, audio_seconds=audio_total_s, decoder_seconds=watches[name].wall_seconds,
                decoder_cuda_seconds=watches[name].cuda_seconds, acoustic_seconds=acoustic_s, frames=frames,
                memory=memory[name], batch_size=bs, warmup_batches=1, params=params,
                acoustic_stage_peak_bytes=stage_peak,
                stats={"model_load_seconds": round(load_watch.wall_seconds, 2),
                       **{f"stage_seconds_{k}": round(v, 4) for k, v in source.stage_seconds.items()}}))
        run.checkpoint()
        release_device_memory()
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


def main(argv: Optional[list[str]] = None) -> int:
    from eval.bench.common import BenchRun, print_rows

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
    ap.add_argument("--output-dir", default="runs/bench")
    ap.add_argument("--experiment", default="nemo_e2e")
    ap.add_argument("--run", default=None, help="run name (default: a timestamp)")
    args = ap.parse_args(argv)
    runs = [parse_run(r) for r in args.runs] if args.runs else [(args.model, "", [])]
    for model, precision, sizes in runs:
        sizes = sizes or args.batch_sizes
        if (precision or args.precision) not in ("fp32", "fp16", "bf16"):
            ap.error(f"precision must be fp32, fp16 or bf16, got {precision!r}")
        if args.num_utterances < max(sizes) or min(sizes) <= 0:
            ap.error(f"batch sizes must be positive and <= --num-utterances ({args.num_utterances}), got {sizes}")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="nemo_e2e_"))
    run = BenchRun(args.experiment, args.run, config={
        "benchmark": "eval.bench.nemo_e2e", "runs": [list(r) for r in runs], "batch_sizes": args.batch_sizes,
        "num_utterances": args.num_utterances, "decoders": args.decoders, "precision": args.precision,
        "device": args.device, "graph_dir": args.graph_dir}, output_dir=args.output_dir)
    for model, precision, sizes in runs:
        run_benchmark(run, model, sizes or args.batch_sizes, args.num_utterances, args.decoders,
                      precision or args.precision, args.device, args.graph_dir, workdir=workdir)
    run.close()
    print_rows(run.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
