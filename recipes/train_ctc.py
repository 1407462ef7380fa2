r"""Train a NeMo Conformer-CTC on the synthesized speech corpus (recipes.speech_corpus), with NeMo's own code.

What runs: NeMo's `EncDecCTCModelBPE` (its preprocessor, SpecAugment, ConformerEncoder, ConvASRDecoder, CTC
loss and `training_step`), driven by a Lightning `Trainer` as NeMo uses it; the tokenizer is the workload's
own sentencepiece BPE (`<workload>/bpe.model`), so the model's vocabulary is the graphs' token table (pieces
in sentencepiece order, blank last, as NeMo puts it). AdamW; the learning rate warms up over `warmup_steps`
then follows a cosine over the wall-clock budget (`schedule=cosine`: the horizon is the budget, so the
schedule ends when training does whatever the GPU's speed) or NeMo's NoamAnnealing (`schedule=noam`).
bf16-mixed on a GPU, fp32 on the CPU. Training stops cleanly at `max_minutes` (Lightning's `max_time`), at
`max_steps` or at `max_epochs`, whichever comes first.

After every epoch the model decodes the dev set greedily (argmax, collapse, drop blank) and the WER from
`eval.metrics.word_error_stats` (the project's one WER) goes to `<out_dir>/dev_wer.jsonl`. At the end the model
is written with NeMo's `save_to` as `<out_dir>/<name>.nemo`, with `<name>.json` beside it: the command, seed,
resolved config, sha256 of the data manifests, dev WER per epoch, parameter count, .nemo size and versions.
`restore_ctc_model(path)` restores it exactly as a user's checkpoint (`ASRModel.restore_from`), with a
one-line error for a missing, truncated or corrupt file.

Default model (8 layers, d_model 128, 4 heads, conv kernel 15, BPE 128 of the tiny workload): 3.7 M
parameters, a ~14 MiB .nemo (under the 16 MiB a file that comes back from the GPU host).

Usage, here (CPU, a smoke run):
    pip install -e '.[nemo,speech]'
    python -m recipes.speech_corpus train_hours=0.2 test_sentences=50 dev_sentences=50
    python -m recipes.train_ctc max_minutes=3 batch_size=8 out_dir=runs/train_ctc_cpu

On the GPU host (offline Python 3.12 + torch 2.11 image), ONE device call (a call may last 600 s, so the
training budget is 6.5 min there: ~30 s of wheel installation, ~5 s workload, ~25 s synthesis of 12 h train +
2 h tests on 16 cores, NeMo start-up and final save). Carry `.whl` (requirements.txt +
requirements-speech.txt, fetched with ../shared/gpu-host/fetch-wheels.sh) and `.whl-nemo` (requirements-nemo.txt):
    set -o pipefail; for d in .whl-nemo .whl; do python3 -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --upgrade --target /tmp/site $d/*.whl || exit 1; done
    export PYTHONPATH=.:/tmp/site PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore; mkdir -p $OUT/train_ctc
    python3 -m recipes.workload scale=tiny >/dev/null && \
    python3 -m recipes.speech_corpus out_root=/tmp/speech train_hours=12 dev_sentences=300 test_sentences=500 \
      num_workers=16 progress=false | tee $OUT/speech_corpus.log && \
    cp /tmp/speech/tiny/stats.json $OUT/train_ctc/corpus_stats.json && \
    cp /tmp/speech/tiny/hashes.json $OUT/train_ctc/corpus_hashes.json && \
    python3 -m recipes.train_ctc corpus=/tmp/speech/tiny out_dir=$OUT/train_ctc max_minutes=6.5 batch_size=64 \
      num_workers=12 2>&1 | grep -v "NeMo [IW]" | tee $OUT/train_ctc.log | tail -30
What comes back under $OUT: train_ctc/conformer_ctc_speech.nemo (~14.3 MiB), conformer_ctc_speech.json (the
sidecar), dev_wer.jsonl (the curve), corpus_stats.json + corpus_hashes.json (the data it saw), the two logs.
With a longer call limit, max_minutes=14 is the issue's 15-minute budget.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

SCHEDULES = ("cosine", "noam")
PRECISIONS = ("auto", "32", "bf16-mixed", "16-mixed")
MAX_NEMO_BYTES = 16 * 2**20  # what one file coming back from the GPU host may weigh


# ---------------------------------------------------------------------------------------------- config
@dataclass
class ConformerSize:
    n_layers: int = 8
    d_model: int = 128
    n_heads: int = 4
    conv_kernel_size: int = 15
    ff_expansion_factor: int = 4
    subsampling_factor: int = 4
    n_mels: int = 80
    dropout: float = 0.1


@dataclass
class SpecAugmentConfig:
    freq_masks: int = 2
    freq_width: int = 27
    time_masks: int = 5
    time_width: float = 0.05  # fraction of the utterance per mask


@dataclass
class TrainWorkloadRef:
    scale: str = "tiny"
    root: str = "data/workload"
    seed: int = 0


@dataclass
class TrainCtcConfig:
    corpus: str = "data/speech/tiny"  # a recipes.speech_corpus folder (train.jsonl, dev.jsonl)
    workload: TrainWorkloadRef = field(default_factory=TrainWorkloadRef)  # its bpe.model is the tokenizer
    out_dir: str = "runs/train_ctc"
    name: str = "conformer_ctc_speech"
    model: ConformerSize = field(default_factory=ConformerSize)
    spec_augment: SpecAugmentConfig = field(default_factory=SpecAugmentConfig)
    seed: int = 0
    batch_size: int = 64
    max_minutes: float = 14.0  # wall-clock training budget (dev evaluations included)
    max_steps: int = -1
    max_epochs: int = 10_000
    lr: float = 2e-3  # peak
    min_lr: float = 1e-5
    weight_decay: float = 1e-3
    betas: list = field(default_factory=lambda: [0.9, 0.98])
    warmup_steps: int = 500
    schedule: str = "cosine"  # cosine (over the wall-clock budget) | noam (NeMo's NoamAnnealing)
    gradient_clip: float = 1.0
    precision: str = "auto"  # auto = bf16-mixed on CUDA, 32 on CPU
    device: str = "auto"  # auto | cpu | cuda
    num_workers: int = 4
    max_duration_s: float = 20.0
    max_train_utterances: int = 0  # 0 = all (smoke runs use a few)
    dev_max_utterances: int = 0  # 0 = all
    dev_batch_size: int = 32
    log_every_n_steps: int = 50
    progress_bar: bool = False


def validate_config(cfg: TrainCtcConfig) -> None:
    """Bad values -> one-line ValueError naming the field and what was expected."""
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got {cfg.schedule!r}")
    if str(cfg.precision) not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {cfg.precision!r}")
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be one of ['auto', 'cpu', 'cuda'], got {cfg.device!r}")
    positive = {"batch_size": cfg.batch_size, "dev_batch_size": cfg.dev_batch_size, "lr": cfg.lr,
                "max_minutes": cfg.max_minutes, "max_duration_s": cfg.max_duration_s,
                "log_every_n_steps": cfg.log_every_n_steps, "max_epochs": cfg.max_epochs}
    for name, v in positive.items():
        if not isinstance(v, (int, float)) or v <= 0:
            raise ValueError(f"{name} must be > 0, got {v!r}")
    for name in ("warmup_steps", "num_workers", "max_train_utterances", "dev_max_utterances"):
        v = getattr(cfg, name)
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    m = cfg.model
    if m.d_model % m.n_heads:
        raise ValueError(f"model.d_model ({m.d_model}) must be a multiple of model.n_heads ({m.n_heads})")
    if m.conv_kernel_size % 2 == 0:
        raise ValueError(f"model.conv_kernel_size must be odd, got {m.conv_kernel_size}")
    if not 0 <= cfg.min_lr <= cfg.lr:
        raise ValueError(f"min_lr must be in [0, lr={cfg.lr}], got {cfg.min_lr}")


# ---------------------------------------------------------------------------------------------- pieces
def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_nemo_tokenizer_dir(sp_model: str | Path, out_dir: str | Path) -> Path:
    """The folder NeMo's `tokenizer: {dir, type: bpe}` reads: tokenizer.model (the workload's BPE, unchanged)
    and vocab.txt (as NeMo's process_asr_text_tokenizer.py writes it)."""
    from recipes.nemo_tokenizer import write_nemo_vocab_txt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = Path(sp_model).read_bytes()
    (out_dir / "tokenizer.model").write_bytes(data)
    write_nemo_vocab_txt(out_dir / "tokenizer.model", out_dir / "vocab.txt")
    return out_dir


def model_config(cfg: TrainCtcConfig, tokenizer_dir: Path, train_manifest: Path, pin_memory: bool = False) -> dict:
    """NeMo model config of a Conformer-CTC (the modules of stt_en_conformer_ctc_*, at cfg.model's size)."""
    m, sa = cfg.model, cfg.spec_augment
    return {
        "sample_rate": 16000,
        "log_prediction": False,
        "tokenizer": {"dir": str(tokenizer_dir), "type": "bpe"},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
            "window": "hann", "features": m.n_mels, "n_fft": 512, "log": True, "frame_splicing": 1,
            "dither": 1e-5, "pad_to": 0, "pad_value": 0.0,
        },
        "spec_augment": {
            "_target_": "nemo.collections.asr.modules.SpectrogramAugmentation",
            "freq_masks": sa.freq_masks, "freq_width": sa.freq_width,
            "time_masks": sa.time_masks, "time_width": sa.time_width,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder", "feat_in": m.n_mels, "feat_out": -1,
            "n_layers": m.n_layers, "d_model": m.d_model, "n_heads": m.n_heads,
            "ff_expansion_factor": m.ff_expansion_factor, "conv_kernel_size": m.conv_kernel_size,
            "subsampling": "striding", "subsampling_factor": m.subsampling_factor,
            "subsampling_conv_channels": m.d_model, "self_attention_model": "rel_pos", "pos_emb_max_len": 5000,
            "conv_norm_type": "batch_norm", "xscaling": True, "untie_biases": True,
            "dropout": m.dropout, "dropout_pre_encoder": m.dropout, "dropout_emb": 0.0, "dropout_att": m.dropout,
        },
        "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": m.d_model,
                    "num_classes": -1, "vocabulary": []},
        "train_ds": {
            "manifest_filepath": str(train_manifest), "sample_rate": 16000, "batch_size": cfg.batch_size,
            "shuffle": True, "num_workers": cfg.num_workers, "pin_memory": pin_memory, "trim_silence": False,
            "max_duration": cfg.max_duration_s, "min_duration": 0.1, "use_start_end_token": False,
        },
        "optim": optim_config(cfg),
    }


def optim_config(cfg: TrainCtcConfig) -> dict:
    optim = {"name": "adamw", "lr": cfg.lr, "betas": list(cfg.betas), "weight_decay": cfg.weight_decay}
    if cfg.schedule == "noam":
        # NoamAnnealing's peak is lr * d_model^-0.5 * warmup^-0.5: scale so that the peak is cfg.lr
        scale = math.sqrt(cfg.model.d_model) * math.sqrt(max(cfg.warmup_steps, 1))
        optim["lr"] = cfg.lr * scale
        optim["sched"] = {"name": "NoamAnnealing", "d_model": cfg.model.d_model,
                          "warmup_steps": max(cfg.warmup_steps, 1), "min_lr": cfg.min_lr}
    return optim


def greedy_texts(model, log_probs_argmax, lengths) -> list[str]:
    """Greedy CTC: argmax per frame, collapse repeats, drop blank (the last column, as NeMo puts it)."""
    blank = int(model.decoder.num_classes_with_blank) - 1
    out = []
    for row, n in zip(log_probs_argmax.cpu().numpy(), lengths.cpu().numpy()):
        ids, prev = [], -1
        for t in row[: int(n)]:
            if t != prev and t != blank:
                ids.append(int(t))
            prev = t
        out.append(model.tokenizer.ids_to_text(ids) if ids else "")
    return out


def load_dev_set(manifest: Path, max_utterances: int = 0) -> list[dict]:
    """Dev utterances with their 16 kHz float32 waveforms (decoded once, reused every epoch)."""
    import soundfile as sf

    from recipes.librispeech import read_manifest

    entries = read_manifest(manifest)
    if max_utterances:
        entries = entries[:max_utterances]
    for e in entries:
        wav, sr = sf.read(e["audio_filepath"], dtype="float32")
        if sr != 16000 or wav.ndim != 1:
            raise ValueError(f"{e['audio_filepath']}: expected 16 kHz mono audio, got {sr} Hz, shape {wav.shape}")
        e["wave"] = wav
    return entries


def dev_wer(model, dev: Sequence[dict], batch_size: int, device, autocast_dtype=None) -> dict:
    """Greedy WER of `model` on `dev` (eval mode, no gradients; restores train mode after)."""
    import torch

    # The one exception to "recipes never import eval": the project has exactly one WER (eval.metrics), and a
    # training curve scored any other way would not be comparable with the harness's tables.
    from eval.metrics import word_error_stats

    was_training = model.training
    model.eval()
    order = sorted(range(len(dev)), key=lambda i: -len(dev[i]["wave"]))
    hyps: dict = {}
    try:
        with torch.no_grad():
            for b in range(0, len(order), batch_size):
                idx = order[b: b + batch_size]
                lens = [len(dev[i]["wave"]) for i in idx]
                batch = np.zeros((len(idx), max(lens)), dtype=np.float32)
                for r, i in enumerate(idx):
                    batch[r, : lens[r]] = dev[i]["wave"]
                sig = torch.from_numpy(batch).to(device)
                sig_len = torch.tensor(lens, dtype=torch.long, device=device)
                ctx = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else _nullcontext()
                with ctx:
                    _, enc_len, greedy = model.forward(input_signal=sig, input_signal_length=sig_len)
                for i, text in zip(idx, greedy_texts(model, greedy, enc_len)):
                    hyps[i] = text
    finally:
        model.train(was_training)
    refs = [dev[i]["text"] for i in range(len(dev))]
    stats = word_error_stats(refs, [hyps[i] for i in range(len(dev))])
    return {"dev_wer": round(stats.wer, 5), "dev_utterances": len(dev),
            "dev_errors": stats.substitutions + stats.deletions + stats.insertions}


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _callbacks(cfg: TrainCtcConfig, dev: list, log_path: Path, device, autocast_dtype, t_start: list):
    """Lightning callbacks: the wall-clock cosine schedule and the per-epoch dev WER log."""
    import lightning.pytorch as pl

    budget_s = cfg.max_minutes * 60.0

    class WallClockCosine(pl.Callback):
        """Linear warm-up over `warmup_steps`, then cosine from lr to min_lr over the wall-clock budget:
        the horizon is known in seconds, not steps, so the schedule ends when the budget does."""

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            step = trainer.global_step
            frac = min(max((time.perf_counter() - t_start[0]) / budget_s, 0.0), 1.0)
            lr = cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * frac))
            if cfg.warmup_steps and step < cfg.warmup_steps:
                lr = min(lr, cfg.lr * (step + 1) / cfg.warmup_steps)
            for opt in trainer.optimizers:
                for group in opt.param_groups:
                    group["lr"] = lr

    class DevWerLog(pl.Callback):
        def __init__(self):
            self.rows: list[dict] = []
            self._loss_sum, self._loss_n = 0.0, 0

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if loss is not None:
                self._loss_sum += float(loss.detach().float().cpu())
                self._loss_n += 1

        def on_train_epoch_end(self, trainer, pl_module):
            self.evaluate(trainer, pl_module)

        def evaluate(self, trainer, pl_module, final: bool = False):
            if self.rows and self.rows[-1]["step"] == trainer.global_step:
                return
            row = {"epoch": trainer.current_epoch + (0 if final else 1), "step": int(trainer.global_step),
                   "elapsed_s": round(time.perf_counter() - t_start[0], 1),
                   "train_loss": round(self._loss_sum / self._loss_n, 4) if self._loss_n else None,
                   "lr": float(trainer.optimizers[0].param_groups[0]["lr"]) if trainer.optimizers else None,
                   "partial_epoch": bool(final)}
            if dev:
                row.update(dev_wer(pl_module, dev, cfg.dev_batch_size, device, autocast_dtype))
            self._loss_sum, self._loss_n = 0.0, 0
            self.rows.append(row)
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            wer = f"dev WER {100 * row['dev_wer']:.2f} %" if "dev_wer" in row else "no dev set"
            print(f"[train_ctc] epoch {row['epoch']} step {row['step']} {row['elapsed_s']:.0f} s "
                  f"loss {row['train_loss']} lr {row['lr']:.2e} {wer}", flush=True)

    class StartClock(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            t_start[0] = time.perf_counter()

    cbs = [StartClock(), DevWerLog()]
    if cfg.schedule == "cosine":
        cbs.append(WallClockCosine())
    return cbs


# ---------------------------------------------------------------------------------------------- restore
def check_nemo_file(path: str | Path) -> Path:
    """A readable .nemo archive (a tar holding model_config.yaml and model_weights.ckpt), else one-line error."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"model: no such .nemo file {str(path)!r}")
    try:
        with tarfile.open(path, "r:*") as tar:
            names = {Path(m.name).name for m in tar.getmembers()}  # reads every header: catches truncation
            for m in tar.getmembers():
                if m.isfile():
                    f = tar.extractfile(m)
                    while f is not None and f.read(1 << 20):
                        pass  # reading every member's data catches a file cut inside the weights
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        raise ValueError(f"model: {str(path)!r} is not a readable .nemo archive (truncated or corrupt: {reason})") from None
    missing = [n for n in ("model_config.yaml", "model_weights.ckpt") if n not in names]
    if missing:
        raise ValueError(f"model: {str(path)!r} is not a NeMo model file (lacks {', '.join(missing)})")
    return path


def restore_ctc_model(path: str | Path, map_location: str = "cpu"):
    """`ASRModel.restore_from(path)` as for any user's checkpoint, after checking the archive; failures are
    one-line errors naming the file."""
    try:
        from nemo.collections.asr.models import ASRModel
    except ImportError as e:
        raise RuntimeError(f"restoring a .nemo needs NeMo: pip install -e '.[nemo]' ({e})") from None
    path = check_nemo_file(path)
    try:
        return ASRModel.restore_from(str(path), map_location=map_location)
    except Exception as e:  # noqa: BLE001 - NeMo raises anything from tar, torch.load or Hydra instantiation
        msg = " ".join(str(e).split())[:300]
        raise ValueError(f"model: {str(path)!r} could not be restored by NeMo ({type(e).__name__}: {msg})") from None


# ---------------------------------------------------------------------------------------------- driver
def _resolve_device(device: str):
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda requested but CUDA is not available; use device=cpu or auto")
    return torch.device(device)


def _git_commit() -> Optional[str]:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _subset_manifest(src: Path, dst: Path, n: int) -> Path:
    """The first n lines of a manifest, with audio paths made absolute (the copy lives elsewhere)."""
    from recipes.librispeech import read_manifest

    entries = read_manifest(src)[:n]
    dst.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries), encoding="utf-8")
    return dst


def train_ctc(cfg: Optional[TrainCtcConfig] = None, command: Optional[str] = None) -> dict:
    """Train, save `<out_dir>/<name>.nemo` + `<name>.json`; returns the sidecar dict."""
    cfg = cfg or TrainCtcConfig()
    validate_config(cfg)
    try:
        import lightning.pytorch as pl
        import torch
        from omegaconf import OmegaConf

        from nemo.collections.asr.models import EncDecCTCModelBPE
    except ImportError as e:
        raise RuntimeError(f"training needs NeMo and Lightning: pip install -e '.[nemo]' ({e})") from None
    from recipes.workload import workload_dir

    corpus = Path(cfg.corpus)
    manifests = {s: corpus / f"{s}.jsonl" for s in ("train", "dev")}
    for split, p in manifests.items():
        if not p.is_file():
            raise FileNotFoundError(f"corpus: no {split} manifest {str(p)!r}; make it with python -m recipes.speech_corpus")
    bpe = workload_dir(cfg.workload.scale, cfg.workload.root, cfg.workload.seed) / "bpe.model"
    if not bpe.is_file():
        raise FileNotFoundError(f"workload: no BPE model {str(bpe)!r}; make it with python -m recipes.workload "
                                f"scale={cfg.workload.scale} root={cfg.workload.root}")
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / f".{cfg.name}_work"
    work.mkdir(exist_ok=True)
    train_manifest = manifests["train"]
    if cfg.max_train_utterances:
        train_manifest = _subset_manifest(train_manifest, work / "train_subset.jsonl", cfg.max_train_utterances)
    device = _resolve_device(cfg.device)
    precision = str(cfg.precision)
    if precision == "auto":
        precision = "bf16-mixed" if device.type == "cuda" else "32"
    autocast_dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)

    pl.seed_everything(cfg.seed, workers=True)
    tok_dir = write_nemo_tokenizer_dir(bpe, work / "tokenizer")
    log_path = out_dir / "dev_wer.jsonl"
    log_path.unlink(missing_ok=True)
    dev = load_dev_set(manifests["dev"], cfg.dev_max_utterances)
    t_start = [time.perf_counter()]
    callbacks = _callbacks(cfg, dev, log_path, device, autocast_dtype, t_start)
    trainer = pl.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, precision=precision,
        max_epochs=cfg.max_epochs, max_steps=cfg.max_steps, max_time={"seconds": cfg.max_minutes * 60.0},
        gradient_clip_val=cfg.gradient_clip or None, logger=False, enable_checkpointing=False,
        enable_progress_bar=cfg.progress_bar, enable_model_summary=False, log_every_n_steps=cfg.log_every_n_steps,
        limit_val_batches=0, num_sanity_val_steps=0, callbacks=callbacks,
    )
    model_cfg = OmegaConf.create(model_config(cfg, tok_dir, train_manifest, pin_memory=device.type == "cuda"))
    model = EncDecCTCModelBPE(cfg=model_cfg, trainer=trainer)
    n_params = int(sum(p.numel() for p in model.parameters()))
    print(f"[train_ctc] {n_params / 1e6:.2f} M parameters, vocabulary {model.decoder.num_classes_with_blank} "
          f"(blank last), {precision} on {device}, budget {cfg.max_minutes} min", flush=True)
    t0 = time.perf_counter()
    trainer.fit(model)
    train_seconds = time.perf_counter() - t0
    dev_log = next(cb for cb in callbacks if type(cb).__name__ == "DevWerLog")
    dev_log.evaluate(trainer, model, final=True)  # a budget stop mid-epoch still gets its dev WER

    model = model.to("cpu").eval()
    nemo_path = out_dir / f"{cfg.name}.nemo"
    tmp = out_dir / f".{cfg.name}.nemo.tmp"
    model.save_to(str(tmp))
    os.replace(tmp, nemo_path)
    import shutil

    shutil.rmtree(work, ignore_errors=True)  # the tokenizer copy and subset manifest: the .nemo holds what counts
    nemo_bytes = nemo_path.stat().st_size
    if nemo_bytes > MAX_NEMO_BYTES:
        print(f"[train_ctc] warning: {nemo_path} is {nemo_bytes / 2**20:.1f} MiB, over the 16 MiB a file the GPU "
              "host returns; use a smaller model", flush=True)
    import lightning
    import nemo

    data = {}
    for split, p in manifests.items():
        lines = [l for l in p.read_text(encoding="utf-8").splitlines() if l.strip()]
        data[split] = {"manifest": str(p), "sha256": sha256_file(p), "utterances": len(lines),
                       "hours": round(sum(json.loads(l)["duration"] for l in lines) / 3600.0, 4)}
    if cfg.max_train_utterances:
        data["train"]["used_utterances"] = min(cfg.max_train_utterances, data["train"]["utterances"])
    hashes = corpus / "hashes.json"
    sidecar = {
        "command": command or " ".join([Path(sys.executable).name, "-m", "recipes.train_ctc", *sys.argv[1:]]),
        "seed": cfg.seed,
        "config": asdict(cfg),
        "data": data,
        "corpus_hashes_sha256": sha256_file(hashes) if hashes.is_file() else None,
        "tokenizer": {"bpe_model": str(bpe), "sha256": sha256_file(bpe),
                      "vocab_size_with_blank": int(model.decoder.num_classes_with_blank), "blank": "last"},
        "dev_wer_per_epoch": dev_log.rows,
        "final_dev_wer": dev_log.rows[-1].get("dev_wer") if dev_log.rows else None,
        "params": n_params,
        "nemo_file": nemo_path.name,
        "nemo_bytes": nemo_bytes,
        "nemo_sha256": sha256_file(nemo_path),
        "train_seconds": round(train_seconds, 1),
        "steps": int(trainer.global_step),
        "epochs_completed": int(trainer.current_epoch),
        "precision": precision,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "versions": {"torch": torch.__version__, "nemo": nemo.__version__, "lightning": lightning.__version__,
                     "python": platform.python_version()},
        "commit": _git_commit(),
    }
    side_path = out_dir / f"{cfg.name}.json"
    side_path.write_text(json.dumps(sidecar, indent=2) + "\n", encoding="utf-8")
    final = sidecar["final_dev_wer"]
    final_text = "n/a" if final is None else f"{100 * final:.2f} %"
    print(f"[train_ctc] saved {nemo_path} ({nemo_bytes / 2**20:.1f} MiB, {n_params / 1e6:.2f} M parameters) after "
          f"{train_seconds:.0f} s, {sidecar['steps']} steps; final dev WER {final_text}; {side_path}", flush=True)
    return sidecar


# ---------------------------------------------------------------------------------------------- CLI
def main(argv: Optional[list[str]] = None) -> None:
    """`python -m recipes.train_ctc corpus=data/speech/tiny max_minutes=14 out_dir=...` (Hydra app)."""
    import hydra
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from recipes.speech_corpus import exit_on_bad_input, run_recipe_app

    ConfigStore.instance().store(name="train_ctc_cli", node=TrainCtcConfig)
    argv = list(sys.argv[1:] if argv is None else argv)
    command = " ".join(["python", "-m", "recipes.train_ctc", *argv])

    @hydra.main(version_base=None, config_name="train_ctc_cli")
    @exit_on_bad_input
    def _app(cfg: TrainCtcConfig) -> None:
        train_ctc(OmegaConf.to_object(cfg), command=command)

    run_recipe_app(_app, argv)


if __name__ == "__main__":
    main()
