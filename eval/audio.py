"""Audio loading for acoustic models: any file soundfile/torchaudio reads -> mono float32 at the model's rate.

Why soundfile first: it reads FLAC/WAV directly through libsndfile, with no decoder plugin; torchaudio >= 2.9
routes `torchaudio.load` through torchcodec, which many hosts (the H200 image among them) lack. torchaudio is
the fallback loader for formats libsndfile cannot read (e.g. MP3 with an old libsndfile).

Resampling (only when a file's rate differs from the model's): `torchaudio.functional.resample` (windowed
sinc, pure torch) when torchaudio imports, else `scipy.signal.resample_poly`. LibriSpeech is 16 kHz like
NeMo's English models, so the evaluation path normally never resamples.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence, Union

import numpy as np


def _read_soundfile(path: str) -> tuple[np.ndarray, int]:
    import soundfile as sf

    data, sample_rate = sf.read(path, dtype="float32", always_2d=True)  # (samples, channels)
    return data, int(sample_rate)


def _read_torchaudio(path: str) -> tuple[np.ndarray, int]:
    import torchaudio

    wave, sample_rate = torchaudio.load(path)  # (channels, samples) float32
    return wave.numpy().T, int(sample_rate)


def resample(wave: np.ndarray, orig_sample_rate: int, target_sample_rate: int) -> np.ndarray:
    """Resample a mono float32 signal; identity when the rates agree."""
    if orig_sample_rate <= 0 or target_sample_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {orig_sample_rate} -> {target_sample_rate}")
    if orig_sample_rate == target_sample_rate:
        return wave
    try:
        import torch
        import torchaudio.functional as AF

        out = AF.resample(torch.from_numpy(np.ascontiguousarray(wave)), orig_sample_rate, target_sample_rate)
        return out.numpy().astype(np.float32, copy=False)
    except ImportError:
        from scipy.signal import resample_poly

        g = math.gcd(orig_sample_rate, target_sample_rate)
        up, down = target_sample_rate // g, orig_sample_rate // g
        return resample_poly(wave, up, down).astype(np.float32, copy=False)


def load_audio(path: Union[str, Path], sample_rate: int = 16000) -> np.ndarray:
    """Mono float32 samples in [-1, 1] at `sample_rate` (channels averaged, resampled when needed)."""
    path = str(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"audio file not found: {path!r}")
    errors = []
    data = None
    for reader in (_read_soundfile, _read_torchaudio):
        try:
            data, file_rate = reader(path)
            break
        except ImportError as e:
            errors.append(f"{reader.__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - a reader that cannot decode this file: try the next one
            errors.append(f"{reader.__name__}: {type(e).__name__}: {e}")
    if data is None:
        raise RuntimeError(
            f"cannot read audio {path!r} (install `soundfile`, or torchaudio with torchcodec): " + "; ".join(errors)
        )
    mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]  # (samples,)
    return resample(np.ascontiguousarray(mono, dtype=np.float32), file_rate, sample_rate)


def audio_duration_s(path: Union[str, Path]) -> float:
    """Duration in seconds from the file header (no decoding)."""
    try:
        import soundfile as sf

        info = sf.info(str(path))
        return info.frames / float(info.samplerate)
    except ImportError:
        return len(load_audio(path, sample_rate=16000)) / 16000.0


def pad_waveforms(waves: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """List of (samples_i,) arrays -> zero-padded (B, S_max) float32 + (B,) int64 lengths."""
    if not waves:
        raise ValueError("pad_waveforms: empty batch")
    lengths = np.array([len(w) for w in waves], dtype=np.int64)
    out = np.zeros((len(waves), max(int(lengths.max()), 1)), dtype=np.float32)  # (B, S)
    for i, w in enumerate(waves):
        out[i, : len(w)] = w
    return out, lengths
