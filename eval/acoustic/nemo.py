"""Acoustic source `model.source=nemo`: a NeMo CTC model (Conformer-CTC, Citrinet, hybrid RNNT/CTC's CTC
head) run on audio: waveform -> preprocessor (log-mel) -> encoder -> CTC head -> (B, T, V) log-probs.

Evaluation settings are fixed, whatever the checkpoint was trained with: `dither = 0` (training-time noise
would make log-probs non-deterministic) and `pad_to = 0` (NeMo pads features to a multiple of 16 for
tensor cores in training; that only adds padded frames here). The model runs in eval mode under
`torch.inference_mode`, in fp32 or under fp16/bf16 autocast (`precision`); NeMo's featurizer keeps the STFT
in fp32 itself.

Batches are formed after sorting utterances by duration (longest first: less padding, and an
out-of-memory shows up in the first batch). Each batch's `acoustic_seconds` covers host->device copy,
features, encoder and CTC head, each bracketed by `torch.cuda.synchronize()` on CUDA; audio file decoding is
timed separately (`stage_seconds["load_audio"]`), because end-to-end RTFx starts from loaded waveforms.

Frame arithmetic (why `lengths` can be one less than T): the featurizer yields floor(samples / hop) valid
frames, but its centred STFT emits one more frame, which the encoder's striding convolutions carry along;
e.g. 32000 samples, hop 160, 4x striding: 200 valid feature frames -> 50 encoded frames, in a tensor of 51.
Frames past `lengths` are overwritten with "certain blank" (blank 0, others -30), the same convention as the
simulator source, so no decoder can read garbage there.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Optional, Sequence

import numpy as np
import torch

from eval.acoustic.base import AcousticBatch, Utterance
from eval.metrics import Stopwatch
from recipes.tokens import TokenSet

Precision = Literal["fp32", "fp16", "bf16"]
PRECISIONS: dict[str, Optional[torch.dtype]] = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}
_PAD_LOGP = -30.0  # padded frames: certain blank, finite (same as eval.acoustic.simulator)

STAGES = ("load_audio", "to_device", "features", "encoder", "ctc_head")


@dataclass
class NemoSourceConfig:
    """How to run a NeMo CTC model for evaluation (`model.params` of the eval config)."""

    model: str = ""  # pretrained name (ASRModel.from_pretrained) or path to a .nemo file
    precision: Precision = "fp32"
    device: str = "auto"  # "auto" = cuda when available, else cpu
    sort_by_length: bool = True
    output_dtype: Literal["float32", "float16"] = "float32"
    preload_audio: bool = False  # decode every audio file before the first batch
    sync_stages: bool = True  # synchronize around each stage (exact per-stage time and memory)
    progress: bool = False


def _resolve_device(device: str) -> torch.device:
    if device in ("auto", "", None):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} requested but CUDA is not available; use device=cpu or auto")
    return dev


def load_nemo_model(model: str, map_location: str | torch.device = "cpu"):
    """`ASRModel.restore_from(path)` for a .nemo file, `ASRModel.from_pretrained(name)` for a name."""
    if not model:
        raise ValueError("model: give a .nemo path or a pretrained NeMo model name (e.g. stt_en_conformer_ctc_small)")
    try:
        from nemo.collections.asr.models import ASRModel
    except ImportError as e:
        raise RuntimeError(
            "the nemo acoustic source needs NeMo: pip install -e '.[nemo]' "
            f"(nemo_toolkit[asr]==3.0.0 with omegaconf==2.3.0); import failed: {e}"
        ) from e
    path = Path(model).expanduser()
    if model.endswith(".nemo") or path.exists():
        # the archive is checked first (every member read), and restore failures are one-line errors naming
        # the file: a truncated or corrupt .nemo otherwise surfaces as a tarfile/torch traceback from NeMo
        from recipes.train_ctc import restore_ctc_model

        return restore_ctc_model(path, map_location=map_location)
    try:
        return ASRModel.from_pretrained(model, map_location=map_location)
    except Exception as e:  # noqa: BLE001 - NeMo raises bare ValueError/Exception for network failures
        raise RuntimeError(
            f"could not get pretrained NeMo model {model!r}: {type(e).__name__}: {e}. "
            "If this machine cannot reach NGC / Hugging Face, download the .nemo file elsewhere and pass "
            "its path (model=nemo_file model.nemo_model=/path/to/model.nemo)."
        ) from e


def ctc_head(model) -> torch.nn.Module:
    """The module mapping encoder output to CTC log-probs (hybrid RNNT/CTC models: `ctc_decoder`)."""
    head = getattr(model, "ctc_decoder", None)
    if head is None:
        head = getattr(model, "decoder", None)
    if head is None or not hasattr(head, "num_classes_with_blank"):
        raise ValueError(
            f"{type(model).__name__} has no CTC head (decoder with num_classes_with_blank); "
            "only CTC and hybrid RNNT/CTC models can feed CTC decoders"
        )
    return head


def subsampling_factor(model) -> int:
    """Encoder time reduction: Conformer/FastConformer expose it; Citrinet/QuartzNet: product of strides."""
    enc = model.encoder
    factor = getattr(enc, "subsampling_factor", None)
    if factor:
        return int(factor)
    enc_cfg = model.cfg.encoder
    if enc_cfg.get("subsampling_factor"):
        return int(enc_cfg.subsampling_factor)
    blocks = enc_cfg.get("jasper")
    if blocks:
        return int(np.prod([int(list(b.get("stride", [1]))[0]) for b in blocks]))
    raise ValueError(f"cannot determine the subsampling factor of encoder {type(enc).__name__}")


class NemoSource:
    """AcousticSource over a loaded NeMo CTC model."""

    def __init__(self, model, cfg: NemoSourceConfig, model_name: str = ""):
        if cfg.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {cfg.precision!r}")
        if cfg.output_dtype not in ("float32", "float16"):
            raise ValueError(f"output_dtype must be float32 or float16, got {cfg.output_dtype!r}")
        from recipes.nemo_tokenizer import token_set_from_nemo

        self.cfg = cfg
        self.model_name = model_name or cfg.model
        self.device = _resolve_device(cfg.device)
        self.model = model.to(self.device).eval()
        self.head = ctc_head(self.model)
        featurizer = self.model.preprocessor.featurizer
        # evaluation settings (see module docstring)
        featurizer.dither = 0.0
        featurizer.pad_to = 0
        self.sample_rate = int(getattr(featurizer, "sample_rate", None) or self.model.cfg.preprocessor.sample_rate)
        self.hop_length = int(featurizer.hop_length)
        self.subsampling = subsampling_factor(self.model)
        self.frame_shift_s = self.hop_length / self.sample_rate * self.subsampling
        self.tokens: TokenSet = token_set_from_nemo(self.model)
        if self.tokens.vocab_size != int(self.head.num_classes_with_blank):
            raise ValueError(
                f"tokenizer gives {self.tokens.vocab_size} columns, CTC head {self.head.num_classes_with_blank}"
            )
        self.stage_seconds: dict[str, float] = {s: 0.0 for s in STAGES}
        self.stage_peak_bytes: dict[str, int] = {}
        self.audio_seconds_done = 0.0
        self._audio_cache: dict[str, np.ndarray] = {}
        # Utterance -> mono float32 waveform at self.sample_rate; replaceable (benchmarks keep audio in memory)
        self.audio_loader: Callable[[Utterance], np.ndarray] = self._load_file

    # ---- description (for run directories) ----
    def describe(self) -> dict:
        return {
            "source": "nemo",
            "model": self.model_name,
            "model_class": type(self.model).__name__,
            "precision": self.cfg.precision,
            "device": str(self.device),
            "sample_rate": self.sample_rate,
            "hop_length": self.hop_length,
            "subsampling_factor": self.subsampling,
            "frame_shift_s": self.frame_shift_s,
            "vocab_size": self.tokens.vocab_size,
            "blank_id": self.tokens.blank_id,
            "token_kind": self.tokens.kind,
            "num_parameters": int(sum(p.numel() for p in self.model.parameters())),
        }

    def reset_stats(self) -> None:
        self.stage_seconds = {s: 0.0 for s in STAGES}
        self.stage_peak_bytes = {}
        self.audio_seconds_done = 0.0

    # ---- stages ----
    @contextlib.contextmanager
    def _stage(self, name: str, memory: dict):
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        # sync_stages: the Stopwatch of the device syncs at both ends, so each stage is billed its own kernels
        watch = Stopwatch(str(self.device) if self.cfg.sync_stages else "cpu")
        with watch:
            yield
        self.stage_seconds[name] = self.stage_seconds.get(name, 0.0) + watch.wall_seconds
        if cuda:
            peak = int(torch.cuda.max_memory_allocated(self.device))
            memory[name] = peak
            self.stage_peak_bytes[name] = max(self.stage_peak_bytes.get(name, 0), peak)

    def _autocast(self):
        dtype = PRECISIONS[self.cfg.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def _load_file(self, utt: Utterance) -> np.ndarray:
        from eval.audio import load_audio

        if utt.audio_filepath is None:
            raise ValueError(f"utterance {utt.id!r} has no audio_filepath; the nemo source needs audio")
        return load_audio(utt.audio_filepath, self.sample_rate)

    def _load(self, utt: Utterance) -> np.ndarray:
        wave = self._audio_cache.get(utt.id)
        if wave is None:
            wave = self.audio_loader(utt)
            if self.cfg.preload_audio:
                self._audio_cache[utt.id] = wave
        return wave

    @torch.inference_mode()
    def forward_waveforms(
        self, waves: Sequence[np.ndarray], memory: Optional[dict] = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Loaded waveforms -> ((B, T, V) log-probs, (B,) int64 encoded lengths) on `self.device`."""
        from eval.audio import pad_waveforms

        memory = {} if memory is None else memory
        signal_np, sig_len_np = pad_waveforms(waves)  # (B, S), (B,)
        with self._stage("to_device", memory):
            signal = torch.from_numpy(signal_np)
            if self.device.type == "cuda":
                signal = signal.pin_memory()
            signal = signal.to(self.device, non_blocking=True)
            sig_len = torch.from_numpy(sig_len_np).to(self.device)
        with self._autocast():
            with self._stage("features", memory):
                feats, feat_len = self.model.preprocessor(input_signal=signal, length=sig_len)  # (B, F, T_feat)
            with self._stage("encoder", memory):
                encoded, enc_len = self.model.encoder(audio_signal=feats, length=feat_len)  # (B, D, T)
            with self._stage("ctc_head", memory):
                log_probs = self.head(encoder_output=encoded)  # (B, T, V)
                out_dtype = torch.float16 if self.cfg.output_dtype == "float16" else torch.float32
                log_probs = log_probs.to(out_dtype)
                enc_len = enc_len.to(torch.int64)
                frames = log_probs.shape[1]
                pad = torch.arange(frames, device=log_probs.device)[None, :] >= enc_len[:, None]  # (B, T)
                if bool(pad.any()):
                    filler = torch.full((log_probs.shape[-1],), _PAD_LOGP, dtype=out_dtype, device=log_probs.device)
                    filler[self.tokens.blank_id] = 0.0
                    log_probs = torch.where(pad[:, :, None], filler, log_probs)
        if log_probs.shape[-1] != self.tokens.vocab_size:
            raise RuntimeError(f"model produced {log_probs.shape[-1]} columns, token set has {self.tokens.vocab_size}")
        if int(enc_len.max()) > log_probs.shape[1]:
            raise RuntimeError(f"encoded lengths {enc_len.tolist()} exceed the {log_probs.shape[1]} output frames")
        return log_probs, enc_len

    def batches(self, utterances: Sequence[Utterance], batch_size: int) -> Iterator[AcousticBatch]:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        utts = list(utterances)
        if self.cfg.sort_by_length:
            utts.sort(key=lambda u: (-u.duration, u.id))
        if self.cfg.preload_audio:
            from tqdm import tqdm

            watch = Stopwatch("cpu")
            with watch:
                for u in tqdm(utts, desc="loading audio", disable=not self.cfg.progress, unit="utt"):
                    self._load(u)
            self.stage_seconds["load_audio"] += watch.wall_seconds
        for start in range(0, len(utts), batch_size):
            chunk = utts[start : start + batch_size]
            load = Stopwatch("cpu")
            with load:
                waves = [self._load(u) for u in chunk]
            if not self.cfg.preload_audio:
                self.stage_seconds["load_audio"] += load.wall_seconds
            memory: dict = {}
            forward = Stopwatch(str(self.device))  # syncs on CUDA: the batch's kernels are billed here
            with forward:
                log_probs, lengths = self.forward_waveforms(waves, memory)
            acoustic_s = forward.wall_seconds
            self.audio_seconds_done += sum(len(w) for w in waves) / self.sample_rate
            yield AcousticBatch(
                utterances=list(chunk),
                log_probs=log_probs,
                lengths=lengths,
                acoustic_seconds=acoustic_s,
                stage_memory_bytes=memory,
            )

    def expected_lengths(self, num_samples: Sequence[int]) -> list[int]:
        """Encoded lengths the model reports for waveforms of these sizes (via NeMo's own arithmetic).

        Used by tests to pin the padding/subsampling behaviour described in the module docstring.
        """
        feat = self.model.preprocessor.featurizer.get_seq_len(torch.tensor(num_samples, dtype=torch.float32))
        return [int(x) for x in _encoder_lengths(self.model.encoder, feat)]


def _encoder_lengths(encoder, feat_lengths: torch.Tensor) -> torch.Tensor:
    pre = getattr(encoder, "pre_encode", None)
    if pre is not None and hasattr(pre, "calc_output_length"):
        return pre.calc_output_length(feat_lengths)
    factor = getattr(encoder, "subsampling_factor", 1)
    return torch.tensor([math.ceil(int(x) / factor) for x in feat_lengths])


# ---------------------------------------------------------------------------------------------------------
# Registry entry point
# ---------------------------------------------------------------------------------------------------------


def source_config_from(cfg: Any) -> NemoSourceConfig:
    """NemoSourceConfig from the whole eval config (`model.nemo_model` + `model.params`), a dict, or itself."""
    from omegaconf import OmegaConf

    if isinstance(cfg, NemoSourceConfig):
        return cfg
    if OmegaConf.is_config(cfg):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    cfg = dict(cfg or {})
    if "model" in cfg and isinstance(cfg["model"], dict):  # the whole evaluation config
        model_cfg = dict(cfg["model"])
        params = dict(model_cfg.get("params") or {})
        params.setdefault("model", model_cfg.get("nemo_model") or "")
        cfg = params
    known = set(NemoSourceConfig.__dataclass_fields__)
    unknown = sorted(set(cfg) - known - {"cache_rebuild", "build_if_missing"})
    if unknown:
        raise ValueError(f"unknown nemo source parameters {unknown}; valid: {sorted(known)}")
    out = NemoSourceConfig(**{k: v for k, v in cfg.items() if k in known})
    if out.precision not in PRECISIONS:
        raise ValueError(f"model.params.precision must be one of {list(PRECISIONS)}, got {out.precision!r}")
    return out


def _verbose(cfg: Any) -> bool:
    try:
        return bool((cfg.get("experiment") or {}).get("verbose", False))
    except AttributeError:
        return False


def build_source(cfg: Any, *, tokens: Optional[TokenSet] = None, model=None, workload: Any = None,
                 dataset: Optional[str] = None, device: Optional[str] = None, manifest_path: Any = None) -> NemoSource:
    """Build the NeMo source. `model`: an already-loaded ASRModel (tests, benchmarks) instead of loading
    `cfg.model`. `tokens`: the token set the caller expects; it must equal the model's. The model runs on
    the config's `model.params.device`; `device`, `workload`, `dataset` and `manifest_path` are not used (the
    utterances come with each `batches` call)."""
    scfg = source_config_from(cfg)
    if model is None:
        from recipes.cli import quiet_native_output

        map_location = "cuda" if _resolve_device(scfg.device).type == "cuda" else "cpu"
        # NeMo's import and restore print telemetry notices and the checkpoint's training-config warnings: shown
        # only with experiment.verbose=true (or when the restore fails)
        with quiet_native_output(not _verbose(cfg), python_too=True):
            model = load_nemo_model(scfg.model, map_location=map_location)
    source = NemoSource(model, scfg, model_name=scfg.model)
    if tokens is not None:
        from recipes.nemo_tokenizer import check_vocab_matches

        check_vocab_matches(tokens, source.tokens)
    return source
