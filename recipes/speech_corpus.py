r"""Synthesized speech corpus: sentences of the embedded workload's language model, spoken by espeak-ng.

Why: no real speech can be downloaded here, but a NeMo model trained by NeMo's own code on real audio makes
every decoder's WER come from a real model's real errors. The sentences are drawn from the workload's own
sentence generator (recipes.workload.sentence_source), so its lexicon, ARPA and graphs apply unchanged.

What is produced (under <out_root>/<workload scale>[-seed<k>]/):
- audio/<split>/<split>-NNNNNN.wav: 16 kHz mono int16 WAV (espeak-ng's 22,050 Hz output resampled with soxr);
- <split>.jsonl for split in train, dev, test-clean, test-other: NeMo manifests (audio_filepath relative to
  the manifest's folder, duration, text; plus id, voice, rate_wpm, pitch, and snr_db/rt60_s on test-other);
- hashes.json: sha256 of every WAV and manifest (what a cached re-run verifies), written last;
- stats.json: utterances, hours, bytes per split and the synthesis speed (seconds per audio hour).

Splits (by voice and by text; no sentence occurs in two splits):
- train (`train_hours` of audio), dev and test-clean (`dev_sentences`, `test_sentences`): voices
  `languages` x `train_variants` (espeak's "<language>+<variant>"), random rate, pitch, pitch range, word gap;
- test-other (`test_sentences`): variants `other_variants` (never in training) on `languages` +
  `other_languages`, a synthetic room reverberation (RT60 0.15-0.5 s) and coloured noise at 5-15 dB SNR.
- train only (corpus version 2; dev/test-clean/test-other bytes are those of version 1): half the utterances
  spoken by `train_extra_variants` (37 more espeak variants, none of test-other's), wider prosody
  (`train_rate_wpm`, `train_pitch`, ...), and `train_augment_fraction` (0.6) of them degraded like test-other
  but more widely: coloured noise (white to brown) at 0-20 dB SNR, reverberated (RT60 0.1-0.8 s) for
  `train_reverb_fraction` (0.8) of those, from an rng stream of their own. The model of version 1 (clean
  training audio) scored 3.5 % greedy WER on test-clean but 68 % on test-other.

Determinism: same config + same espeak build -> same bytes. Every utterance's voice, rate, pitch, silences,
level, noise and reverberation come from rng([seed, split, index]), and so does the seed of espeak's own noise
generator (breathy voices; espeak seeds it from the clock otherwise). espeak-ng keeps synthesis state across
utterances inside one process (`espeak_Terminate` + `espeak_Initialize` and `espeak_ng_SetRandSeed` do not
reset it: the same sentence synthesized twice in a row differs), so each chunk of `chunk_size` utterances is
synthesized in a fresh worker process (pool with maxtasksperchild=1); the chunk size is part of the cache key.

Engines: the `espeakng-loader` wheel (bundles libespeak-ng 1.52 + its data) driven through the C API with
ctypes (retrieval mode, a synth callback, voice by name, rate/pitch/range/word-gap parameters); Debian's
`espeak-ng` CLI only when the wheel is missing (`engine=auto`). Neither -> one-line error naming the install.

Cache: a chunk whose record (chunks/<split>/NNNNN.json) has the same key and whose WAVs match their sha256 is
not synthesized again; train chunks are drawn in a fixed order and the train split is the shortest prefix of
chunks with at least `train_hours` of audio, so raising `train_hours` only adds chunks.

Usage (here, 2 cores):
    pip install -e '.[speech]'            # espeakng-loader, soxr, soundfile
    python -m recipes.speech_corpus train_hours=1 test_sentences=100 dev_sentences=100
    python -m recipes.speech_corpus train_hours=0 dev_sentences=0 test_sentences=200   # the test sets only
The test sets come first and are prefix-stable (test-clean's first n sentences, voices and audio do not depend
on dev/train sizes; each later split excludes the earlier ones' sentences), so the test sets synthesized here
for a demo are the ones a GPU-host corpus with as many or more test sentences held out of training.
On the GPU host (16 cores; wheels of .ci/gpu-host/requirements-speech.txt; the full one-call synthesis +
training command is in recipes/train_ctc.py):
    python -m recipes.speech_corpus out_root=/tmp/speech train_hours=12 dev_sentences=300 test_sentences=500 \
        num_workers=16 progress=false
Measured here (2 cores, 2 workers, wheel 0.2.4, tiny workload): 1.48 h of audio (1.02 h train + 3 x 100
sentences) in 17-31 s depending on the machine's load, i.e. 11-21 s of wall time per audio hour (~170-330x
real time per core); WAV storage 110 MiB per audio hour (16 kHz int16); mean utterance 5.3-5.8 s. So 10 h of
train audio is ~1.1 GiB and, at NOTES.md's 16-process rate, well under a minute on the GPU host.
Version 2's train augmentation costs ~30 % more synthesis time (9 -> 12 s per train audio hour on 2 loaded
cores here; noise is generated at an FFT-friendly length and scipy is imported before the workers fork, without
which it was 51 s per hour); the GPU host made 12 h in 18 s with version 1, so 12 h train + 2 h tests ~25 s.
"""
from __future__ import annotations

import ctypes
import hashlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
import wave
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal, Optional, Sequence

import numpy as np

# bump whenever a change alters generated bytes, to invalidate caches. 2: train-only extra variants, wider
# prosody and noise/reverberation augmentation (dev, test-clean and test-other bytes are those of version 1)
CORPUS_VERSION = 2
SAMPLE_RATE = 16000
SPLITS = ("train", "dev", "test-clean", "test-other")
# sentence streams of the workload's generator: the workload itself uses streams 0 (LM corpus), 1 and 2 (its
# simulator test sets); each split here draws blocks of _TEXT_BLOCK sentences from streams base + block index
_STREAM_BASE = {"test-clean": 10_000, "test-other": 20_000, "dev": 30_000, "train": 40_000}
_TEXT_BLOCK = 1000
MISSING_ESPEAK = (
    "espeak-ng is not available: pip install espeakng-loader (or pip install -e '.[speech]'), "
    "or apt install espeak-ng"
)

# espeak-ng C API constants (speak_lib.h)
_AUDIO_OUTPUT_RETRIEVAL = 1
_POS_CHARACTER = 1
_ESPEAK_CHARS_UTF8 = 1
_ESPEAK_RATE, _ESPEAK_PITCH, _ESPEAK_RANGE, _ESPEAK_WORDGAP = 1, 3, 4, 7


# ---------------------------------------------------------------------------------------------- config
@dataclass
class CorpusWorkloadRef:
    # only the scale (and the corpus seed) matter: sentences come from the workload's generator, in memory
    scale: str = "tiny"


@dataclass
class SpeechCorpusConfig:
    workload: CorpusWorkloadRef = field(default_factory=CorpusWorkloadRef)
    out_root: str = "data/speech"
    seed: int = 0
    train_hours: float = 10.0
    dev_sentences: int = 200
    test_sentences: int = 200  # per test set (test-clean, test-other)
    min_words: int = 2
    max_words: int = 30  # longer sentences are skipped (~12 s at 150 wpm): keeps batches and memory even
    # voices: "<language>+<variant>"; "" = the language's own voice
    languages: list = field(default_factory=lambda: [
        "en-us", "en", "en-gb-x-rp", "en-gb-scotland", "en-us-nyc", "en-gb-x-gbclan"])
    train_variants: list = field(default_factory=lambda: ["", "m1", "m2", "m3", "m4", "f1", "f2", "f3"])
    other_languages: list = field(default_factory=lambda: ["en-029", "en-gb-x-gbcwmd"])  # test-other only
    other_variants: list = field(default_factory=lambda: ["m5", "m6", "m7", "f4", "f5"])  # test-other only
    rate_wpm: list = field(default_factory=lambda: [135, 205])
    pitch: list = field(default_factory=lambda: [25, 75])
    pitch_range: list = field(default_factory=lambda: [30, 80])
    word_gap_10ms: list = field(default_factory=lambda: [0, 2])
    silence_s: list = field(default_factory=lambda: [0.1, 0.4])  # leading and trailing, each
    level_dbfs: list = field(default_factory=lambda: [-12.0, -2.0])  # peak level
    snr_db: list = field(default_factory=lambda: [5.0, 15.0])  # test-other
    rt60_s: list = field(default_factory=lambda: [0.15, 0.5])  # test-other
    # train only (dev and test-clean keep the ranges above, so their sentences, voices and audio are those of
    # corpus version 1): more voices and wider prosody, so that unseen variants are less far from training,
    # and a fraction of utterances degraded like test-other but more widely (independent seeds)
    train_extra_variants: list = field(default_factory=lambda: list(TRAIN_EXTRA_VARIANTS))
    train_extra_voice_fraction: float = 0.5  # share of train utterances spoken by an extra variant
    train_rate_wpm: list = field(default_factory=lambda: [115, 240])
    train_pitch: list = field(default_factory=lambda: [10, 90])
    train_pitch_range: list = field(default_factory=lambda: [15, 100])
    train_word_gap_10ms: list = field(default_factory=lambda: [0, 4])
    train_level_dbfs: list = field(default_factory=lambda: [-20.0, -1.0])
    train_augment_fraction: float = 0.6  # share of train utterances with noise (+ reverberation)
    train_reverb_fraction: float = 0.8  # share of the augmented ones that are also reverberated
    train_snr_db: list = field(default_factory=lambda: [0.0, 20.0])
    train_rt60_s: list = field(default_factory=lambda: [0.1, 0.8])
    train_noise_exponent: list = field(default_factory=lambda: [0.0, 2.0])  # 0 white, 1 pink, 2 brown
    engine: str = "auto"  # auto | wheel | cli
    num_workers: int = 0  # 0 = every core
    chunk_size: int = 16  # utterances per fresh synthesis process (part of the cache key: see the docstring)
    progress: bool = True
    force: bool = False


ENGINES = ("auto", "wheel", "cli")
# espeak-ng 1.52 variants (voices/!v) spoken in train only: human-sounding ones (the robotic, whispering,
# strongly clipping and joke variants are left out), none of the held-out test-other variants m5-m7, f4, f5
TRAIN_EXTRA_VARIANTS = (
    "m8", "klatt", "klatt2", "klatt3", "klatt4", "klatt6", "Alex", "Alicia", "Andy", "Annie", "Denis", "Lee",
    "Michael", "Mike", "Reed", "adam", "aunty", "belinda", "benjamin", "boris", "caleb", "david", "edward2",
    "grandma", "grandpa", "linda", "max", "michel", "norbert", "quincy", "rob", "robert", "shelby", "steph",
    "travis", "victor", "zac")


def _range(name: str, value: Sequence, lo: float, hi: float) -> tuple[float, float]:
    vals = list(value) if not isinstance(value, (str, bytes)) else []
    if len(vals) != 2 or not all(isinstance(v, (int, float)) for v in vals) or not lo <= vals[0] <= vals[1] <= hi:
        raise ValueError(f"{name} must be [min, max] with {lo} <= min <= max <= {hi}, got {value!r}")
    return float(vals[0]), float(vals[1])


def validate_config(cfg: SpeechCorpusConfig) -> None:
    """Bad values -> one-line ValueError naming the field and what was expected."""
    from recipes.workload import SCALES

    if cfg.workload.scale not in SCALES:
        raise ValueError(f"workload.scale must be one of {sorted(SCALES)}, got {cfg.workload.scale!r}")
    if cfg.engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {cfg.engine!r}")
    if not (isinstance(cfg.train_hours, (int, float)) and 0 <= cfg.train_hours <= 10_000):
        raise ValueError(f"train_hours must be a number in [0, 10000], got {cfg.train_hours!r}")
    for name in ("dev_sentences", "test_sentences"):
        v = getattr(cfg, name)
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    if not (isinstance(cfg.chunk_size, int) and cfg.chunk_size >= 1):
        raise ValueError(f"chunk_size must be an integer >= 1, got {cfg.chunk_size!r}")
    if not (isinstance(cfg.num_workers, int) and cfg.num_workers >= 0):
        raise ValueError(f"num_workers must be an integer >= 0 (0 = every core), got {cfg.num_workers!r}")
    if not 1 <= cfg.min_words <= cfg.max_words:
        raise ValueError(f"min_words/max_words must satisfy 1 <= min_words <= max_words, got {cfg.min_words}/{cfg.max_words}")
    _range("rate_wpm", cfg.rate_wpm, 80, 450)
    _range("pitch", cfg.pitch, 0, 100)
    _range("pitch_range", cfg.pitch_range, 0, 100)
    _range("word_gap_10ms", cfg.word_gap_10ms, 0, 100)
    _range("silence_s", cfg.silence_s, 0, 5)
    _range("level_dbfs", cfg.level_dbfs, -60, 0)
    _range("snr_db", cfg.snr_db, -10, 60)
    _range("rt60_s", cfg.rt60_s, 0.05, 2.0)
    _range("train_rate_wpm", cfg.train_rate_wpm, 80, 450)
    _range("train_pitch", cfg.train_pitch, 0, 100)
    _range("train_pitch_range", cfg.train_pitch_range, 0, 100)
    _range("train_word_gap_10ms", cfg.train_word_gap_10ms, 0, 100)
    _range("train_level_dbfs", cfg.train_level_dbfs, -60, 0)
    _range("train_snr_db", cfg.train_snr_db, -10, 60)
    _range("train_rt60_s", cfg.train_rt60_s, 0.05, 2.0)
    _range("train_noise_exponent", cfg.train_noise_exponent, 0, 3)
    for name in ("train_extra_voice_fraction", "train_augment_fraction", "train_reverb_fraction"):
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")
    for name in ("languages", "train_variants", "other_variants"):
        if not list(getattr(cfg, name)):
            raise ValueError(f"{name} must list at least one voice name")
    if not isinstance(cfg.out_root, str) or not cfg.out_root:
        raise TypeError(f"out_root must be a folder path (str or os.PathLike), got {cfg.out_root!r}")
    if cfg.train_extra_voice_fraction > 0 and not list(cfg.train_extra_variants):
        raise ValueError("train_extra_variants must list at least one variant when train_extra_voice_fraction > 0")
    seen = (set(cfg.train_variants) | set(cfg.train_extra_variants)) & set(cfg.other_variants)
    if seen:
        raise ValueError("other_variants must be voices never used in training; also in train_variants or "
                         f"train_extra_variants: {sorted(seen)}")
    if "" in cfg.other_variants:
        raise ValueError("other_variants must name variants (the plain language voice is a training voice)")
    for v in [*cfg.languages, *cfg.other_languages, *cfg.train_variants, *cfg.train_extra_variants,
              *cfg.other_variants]:
        if not isinstance(v, str) or any(c in v for c in "+/ \\") :
            raise ValueError(f"voice names must be plain espeak names without '+', '/' or spaces, got {v!r}")


def voices(cfg: SpeechCorpusConfig, split: str) -> list[str]:
    """espeak voice names ("<language>+<variant>") a split is spoken with (train: also the extra variants)."""
    if split == "train":
        return [*voices(cfg, "dev"), *extra_train_voices(cfg)]
    if split == "test-other":
        langs, variants = [*cfg.languages, *cfg.other_languages], cfg.other_variants
    elif split in SPLITS:
        langs, variants = cfg.languages, cfg.train_variants
    else:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    return [f"{lang}+{var}" if var else lang for lang in langs for var in variants]


def extra_train_voices(cfg: SpeechCorpusConfig) -> list[str]:
    """The train-only voices: `languages` x `train_extra_variants` (never dev, test-clean or test-other)."""
    return [f"{lang}+{var}" for lang in cfg.languages for var in cfg.train_extra_variants]


# ---------------------------------------------------------------------------------------------- engines
@dataclass(frozen=True)
class Engine:
    """Where espeak-ng lives: the wheel's library + data, or the CLI executable."""

    kind: Literal["wheel", "cli"]
    path: str  # libespeak-ng.so or the espeak-ng executable
    data_path: str = ""  # wheel: espeak-ng-data
    version: str = ""  # part of the cache key: another espeak build may produce other bytes


def _wheel_engine() -> Optional[Engine]:
    try:
        import espeakng_loader
        from importlib.metadata import version
    except ImportError:
        return None
    lib, data = espeakng_loader.get_library_path(), os.path.join(os.path.dirname(espeakng_loader.__file__), "espeak-ng-data")
    if not (os.path.isfile(lib) and os.path.isdir(data)):
        return None
    try:
        ver = version("espeakng-loader")
    except Exception:  # noqa: BLE001 - a vendored copy without metadata still works
        ver = "unknown"
    return Engine("wheel", lib, data, f"espeakng-loader {ver}")


def _cli_engine() -> Optional[Engine]:
    exe = shutil.which("espeak-ng")
    if exe is None:
        return None
    try:
        ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return Engine("cli", exe, "", ver.splitlines()[0] if ver else "espeak-ng")


def find_engine(engine: str = "auto") -> Engine:
    """The espeak-ng to use; the wheel wins under `auto`. Missing -> RuntimeError naming the install.

    The library is only located here, never initialised: this process must not synthesize (see the module
    docstring: the workers start from espeak's initial state)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {engine!r}")
    found = (_wheel_engine() if engine in ("auto", "wheel") else None) or (
        _cli_engine() if engine in ("auto", "cli") else None)
    if found is None:
        raise RuntimeError(MISSING_ESPEAK)
    return found


def check_variants(engine: Engine, variants: Sequence[str]) -> None:
    """espeak silently ignores an unknown "+variant" (SetVoiceByName returns OK): check the data files."""
    if engine.kind != "wheel":
        return
    vdir = Path(engine.data_path) / "voices" / "!v"
    known = {p.name for p in vdir.iterdir()} if vdir.is_dir() else set()
    bad = [v for v in variants if v and v not in known]
    if bad:
        raise ValueError(f"unknown espeak voice variants {bad}; available: {sorted(known)[:40]}")


_SYNTH_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class EspeakLibrary:
    """libespeak-ng through its C API (speak_lib.h): retrieval mode, audio returned through a callback."""

    def __init__(self, lib_path: str, data_path: str):
        try:
            lib = ctypes.CDLL(lib_path)
        except OSError as e:
            raise RuntimeError(f"{MISSING_ESPEAK} (loading {lib_path} failed: {e})") from None
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_SYNTH_CALLBACK]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                     ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_Synchronize.restype = ctypes.c_int
        # espeak_ng_Initialize seeds the generator behind breathy voices (f2, f3, f5, ...) from the clock;
        # espeak_ng_SetRandSeed (1.52+) makes them reproducible
        self._set_seed = getattr(lib, "espeak_ng_SetRandSeed", None)
        if self._set_seed is not None:
            self._set_seed.argtypes = [ctypes.c_long]
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_RETRIEVAL, 0, data_path.encode(), 0)
        if rate <= 0:
            raise RuntimeError(f"espeak_Initialize failed (data path {data_path!r}): {MISSING_ESPEAK}")
        self.lib, self.sample_rate = lib, int(rate)
        self._chunks: list[bytes] = []
        # the library calls back from its synthesis thread until espeak_Synchronize returns; the ctypes
        # callback object must stay referenced for as long as the library may call it
        self._callback = _SYNTH_CALLBACK(self._on_audio)
        lib.espeak_SetSynthCallback(self._callback)

    def _on_audio(self, wav, num_samples, events) -> int:
        if wav and num_samples > 0:
            self._chunks.append(ctypes.string_at(wav, 2 * num_samples))
        return 0  # 0 = continue

    def synthesize(self, text: str, voice: str, rate_wpm: int, pitch: int, pitch_range: int, word_gap: int,
                   seed: int = 0) -> np.ndarray:
        """int16 samples at self.sample_rate."""
        lib = self.lib
        if self._set_seed is not None:
            self._set_seed(int(seed))
        if lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise ValueError(f"espeak-ng has no voice {voice!r}")
        for param, value in ((_ESPEAK_RATE, rate_wpm), (_ESPEAK_PITCH, pitch), (_ESPEAK_RANGE, pitch_range),
                             (_ESPEAK_WORDGAP, word_gap)):
            lib.espeak_SetParameter(param, int(value), 0)
        self._chunks = []
        data = text.encode("utf-8")
        err = lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, _ESPEAK_CHARS_UTF8, None, None)
        lib.espeak_Synchronize()
        if err != 0:
            raise RuntimeError(f"espeak_Synth failed with status {err} on {text[:60]!r}")
        return np.frombuffer(b"".join(self._chunks), dtype=np.int16).copy()


def _synthesize_cli(exe: str, text: str, voice: str, rate_wpm: int, pitch: int, pitch_range: int,
                    word_gap: int) -> tuple[np.ndarray, int]:
    # rate/pitch/range/gap flags of espeak-ng(1); --stdout writes a WAV (its size fields may be bogus).
    # The CLI cannot seed espeak's noise generator: breathy variants (f2, f3, f5) differ from run to run.
    cmd = [exe, "-v", voice, "-s", str(rate_wpm), "-p", str(pitch), "-P", str(pitch_range), "-g", str(word_gap),
           "--stdout", text]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(f"espeak-ng CLI failed on voice {voice!r}: {e}") from None
    if out[:4] != b"RIFF" or len(out) < 44:
        raise RuntimeError(f"espeak-ng CLI returned no WAV for voice {voice!r}")
    sr = int.from_bytes(out[24:28], "little")
    pos = out.find(b"data", 12)
    return np.frombuffer(out[pos + 8:len(out) - (len(out) - pos - 8) % 2], dtype=np.int16).copy(), sr


# ---------------------------------------------------------------------------------------------- signal
def resample_to_16k(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """int16 or float -> float32 at 16 kHz (soxr HQ; deterministic)."""
    x = samples.astype(np.float32) / (32768.0 if samples.dtype == np.int16 else 1.0)
    if sample_rate == SAMPLE_RATE:
        return x
    try:
        import soxr
    except ImportError:
        raise RuntimeError("resampling needs soxr: pip install soxr (or pip install -e '.[speech]')") from None
    return soxr.resample(x, sample_rate, SAMPLE_RATE, quality="HQ").astype(np.float32)


def reverberate(x: np.ndarray, rt60_s: float, rng: np.random.Generator, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Convolve with a synthetic room response: a direct path + exponentially decaying noise (-60 dB at rt60)."""
    from scipy.signal import fftconvolve

    n = max(int(rt60_s * sample_rate), 2)
    t = np.arange(n) / sample_rate
    tail = rng.standard_normal(n) * 10.0 ** (-3.0 * t / rt60_s)
    tail[0] = 0.0
    # direct-to-reverberant energy ratio of a few dB, like a speaker a metre or two from the microphone
    drr_db = rng.uniform(0.0, 6.0)
    tail *= math.sqrt(10.0 ** (-drr_db / 10.0) / max(float(np.sum(tail**2)), 1e-12))
    ir = tail
    ir[0] = 1.0
    return fftconvolve(x, ir)[: len(x)].astype(np.float32)


def coloured_noise(n: int, rng: np.random.Generator, exponent: float, fast: bool = False) -> np.ndarray:
    """Stationary noise with power spectrum ~ 1/f^exponent (0 white, 1 pink, 2 brown), unit power.

    fast: generate at the next FFT-friendly length and keep the first n samples (an utterance's length often
    has a large prime factor, which made the FFT ~6x slower); train only, since it changes the bytes and
    test-other keeps those of corpus version 1."""
    m = n
    if fast:
        from scipy.fft import next_fast_len

        m = next_fast_len(n, real=True)
    spec = np.fft.rfft(rng.standard_normal(m))
    f = np.fft.rfftfreq(m)
    f[0] = f[1] if m > 2 else 1.0
    noise = np.fft.irfft(spec / f ** (exponent / 2.0), n=m)[:n]
    return (noise / max(float(np.sqrt(np.mean(noise**2))), 1e-12)).astype(np.float32)


def add_noise(x: np.ndarray, snr_db: float, rng: np.random.Generator, exponent: float = 1.0,
              fast: bool = False) -> np.ndarray:
    """x + noise scaled so that 10 log10(power(x) / power(noise)) == snr_db (power over the whole signal)."""
    p_signal = float(np.mean(x.astype(np.float64) ** 2))
    noise = coloured_noise(len(x), rng, exponent, fast) * math.sqrt(p_signal / 10.0 ** (snr_db / 10.0))
    return (x + noise).astype(np.float32)


def to_int16(x: np.ndarray, peak_dbfs: float) -> np.ndarray:
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak > 0:
        x = x * (10.0 ** (peak_dbfs / 20.0) / peak)
    return np.clip(np.round(x * 32767.0), -32768, 32767).astype(np.int16)


def write_wav(path: Path, samples: np.ndarray) -> bytes:
    """16 kHz mono int16 WAV (stdlib writer: stable header bytes); returns the file's bytes."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(samples.astype("<i2").tobytes())
    data = buf.getvalue()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return data


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise ValueError(f"{path}: expected 16 kHz mono int16 WAV")
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


# ---------------------------------------------------------------------------------------------- texts
def sample_texts(scale: str, seed: int, split: str, exclude: set, min_words: int, max_words: int) -> Iterator[str]:
    """Endless, deterministic stream of distinct sentences for `split` from the workload's language model,
    skipping sentences in `exclude` and outside [min_words, max_words]. Prefix-stable: drawing more never
    changes the sentences already drawn."""
    from recipes.text import sentences_to_text
    from recipes.workload import sentence_source

    words, gen = sentence_source(scale, seed)
    seen = set(exclude)
    block = 0
    while True:
        ids, offsets = gen.sample(_TEXT_BLOCK, seed, stream=_STREAM_BASE[split] + block)
        for text in sentences_to_text(words, ids, offsets):
            n = text.count(" ") + 1
            if min_words <= n <= max_words and text not in seen:
                seen.add(text)
                yield text
        block += 1
        if block > 10_000:  # a vocabulary too small to give distinct sentences any more
            raise RuntimeError(f"split {split}: ran out of distinct sentences after {block} blocks")


def utterance_spec(cfg: SpeechCorpusConfig, split: str, index: int, text: str, voice_list: Sequence[str]) -> dict:
    """Everything that decides an utterance's audio, drawn from rng([seed, split, index])."""
    if split == "train":
        return _train_spec(cfg, index, text)
    rng = np.random.default_rng([cfg.seed, 7, SPLITS.index(split), index])
    uid = f"{split}-{index:06d}"
    spec = {
        "id": uid,
        "text": text,
        "voice": voice_list[int(rng.integers(len(voice_list)))],
        "rate_wpm": int(rng.integers(int(cfg.rate_wpm[0]), int(cfg.rate_wpm[1]) + 1)),
        "pitch": int(rng.integers(int(cfg.pitch[0]), int(cfg.pitch[1]) + 1)),
        "pitch_range": int(rng.integers(int(cfg.pitch_range[0]), int(cfg.pitch_range[1]) + 1)),
        "word_gap": int(rng.integers(int(cfg.word_gap_10ms[0]), int(cfg.word_gap_10ms[1]) + 1)),
        "lead_s": round(float(rng.uniform(*cfg.silence_s)), 3),
        "trail_s": round(float(rng.uniform(*cfg.silence_s)), 3),
        "level_dbfs": round(float(rng.uniform(*cfg.level_dbfs)), 2),
        "espeak_seed": int(rng.integers(1, 2**31)),
        "degrade": None,
    }
    if split == "test-other":
        spec["degrade"] = {
            "snr_db": round(float(rng.uniform(*cfg.snr_db)), 2),
            "rt60_s": round(float(rng.uniform(*cfg.rt60_s)), 3),
            "noise_exponent": round(float(rng.uniform(0.0, 2.0)), 2),
            "seed": int(rng.integers(2**31)),
        }
    return spec


def _train_spec(cfg: SpeechCorpusConfig, index: int, text: str) -> dict:
    """A train utterance: dev's voices or (train_extra_voice_fraction) an extra variant, the wider train_*
    prosody ranges, and (train_augment_fraction) noise at train_snr_db, reverberated (train_reverb_fraction of
    those) at train_rt60_s. Its own rng stream (8, not dev/test's 7), so nothing here moves the other splits."""
    rng = np.random.default_rng([cfg.seed, 8, index])
    ri = lambda lohi: int(rng.integers(int(lohi[0]), int(lohi[1]) + 1))  # noqa: E731
    extra = extra_train_voices(cfg)
    pool = extra if extra and rng.random() < cfg.train_extra_voice_fraction else voices(cfg, "dev")
    spec = {
        "id": f"train-{index:06d}",
        "text": text,
        "voice": pool[int(rng.integers(len(pool)))],
        "rate_wpm": ri(cfg.train_rate_wpm),
        "pitch": ri(cfg.train_pitch),
        "pitch_range": ri(cfg.train_pitch_range),
        "word_gap": ri(cfg.train_word_gap_10ms),
        "lead_s": round(float(rng.uniform(*cfg.silence_s)), 3),
        "trail_s": round(float(rng.uniform(*cfg.silence_s)), 3),
        "level_dbfs": round(float(rng.uniform(*cfg.train_level_dbfs)), 2),
        "espeak_seed": int(rng.integers(1, 2**31)),
        "degrade": None,
    }
    # drawn whether or not used, so that changing a fraction keeps every other utterance's draws
    augment, reverb = rng.random() < cfg.train_augment_fraction, rng.random() < cfg.train_reverb_fraction
    degrade = {
        "snr_db": round(float(rng.uniform(*cfg.train_snr_db)), 2),
        "rt60_s": round(float(rng.uniform(*cfg.train_rt60_s)), 3) if reverb else None,
        "noise_exponent": round(float(rng.uniform(*cfg.train_noise_exponent)), 2),
        "seed": int(rng.integers(2**31)),
        "fast_noise": True,
    }
    if augment:
        spec["degrade"] = degrade
    return spec


# ---------------------------------------------------------------------------------------------- workers
_LIBRARY: Optional[EspeakLibrary] = None


def render_clean(spec: dict, engine: Engine) -> np.ndarray:
    """An utterance before degradation: espeak -> 16 kHz float32 -> leading/trailing silences."""
    global _LIBRARY
    args = (spec["text"], spec["voice"], spec["rate_wpm"], spec["pitch"], spec["pitch_range"], spec["word_gap"])
    if engine.kind == "wheel":
        if _LIBRARY is None:
            _LIBRARY = EspeakLibrary(engine.path, engine.data_path)
        raw, sr = _LIBRARY.synthesize(*args, seed=spec["espeak_seed"]), _LIBRARY.sample_rate
    else:
        raw, sr = _synthesize_cli(engine.path, *args)
    if raw.size == 0:
        raise RuntimeError(f"espeak-ng produced no audio for {spec['id']} ({spec['voice']!r})")
    x = resample_to_16k(raw, sr)
    x = np.concatenate([np.zeros(int(spec["lead_s"] * SAMPLE_RATE), np.float32), x,
                        np.zeros(int(spec["trail_s"] * SAMPLE_RATE), np.float32)])
    return x


def render(spec: dict, engine: Engine) -> np.ndarray:
    """One utterance: render_clean -> (test-other, augmented train: reverberation + noise) -> int16."""
    x = render_clean(spec, engine)
    d = spec.get("degrade")
    if d:
        rng = np.random.default_rng(d["seed"])
        if d["rt60_s"] is not None:  # None: a noise-only train utterance (test-other is always reverberated)
            x = reverberate(x, d["rt60_s"], rng)
        x = add_noise(x, d["snr_db"], rng, d["noise_exponent"], fast=bool(d.get("fast_noise", False)))
    return to_int16(x, spec["level_dbfs"])


def _chunk_worker(task: tuple) -> dict:
    """Synthesize one chunk in this (fresh) process; returns its record (also written to disk)."""
    engine, out_dir, split, chunk_index, key, specs = task
    t0 = time.perf_counter()
    records = []
    audio_dir = out_dir / "audio" / split
    audio_dir.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        samples = render(spec, engine)
        rel = f"audio/{split}/{spec['id']}.wav"
        data = write_wav(out_dir / rel, samples)
        rec = {"audio_filepath": rel, "duration": round(len(samples) / SAMPLE_RATE, 4), "text": spec["text"],
               "id": spec["id"], "voice": spec["voice"], "rate_wpm": spec["rate_wpm"], "pitch": spec["pitch"]}
        if spec["degrade"]:
            rec["snr_db"] = spec["degrade"]["snr_db"]
            if spec["degrade"]["rt60_s"] is not None:
                rec["rt60_s"] = spec["degrade"]["rt60_s"]
        rec["sha256"] = hashlib.sha256(data).hexdigest()
        records.append(rec)
    record = {"key": key, "records": records, "seconds": round(time.perf_counter() - t0, 3)}
    path = _chunk_path(out_dir, split, chunk_index)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_json(path, record)
    return record


def _chunk_path(out_dir: Path, split: str, chunk_index: int) -> Path:
    return out_dir / "chunks" / split / f"{chunk_index:05d}.json"


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _cached_chunk(out_dir: Path, split: str, chunk_index: int, key: str) -> Optional[dict]:
    """The chunk's record if it was made with `key` and every WAV still matches its hash."""
    path = _chunk_path(out_dir, split, chunk_index)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if record.get("key") != key:
        return None
    for rec in record.get("records", []):
        f = out_dir / rec["audio_filepath"]
        if not f.is_file() or _sha256_file(f) != rec.get("sha256"):
            return None
    return record


def _chunk_key(engine: Engine, specs: list) -> str:
    blob = json.dumps({"version": CORPUS_VERSION, "engine": [engine.kind, engine.version], "specs": specs},
                      sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


# ---------------------------------------------------------------------------------------------- driver
class _Synthesizer:
    """Runs chunks on a pool of single-use processes, in order, with a bounded number in flight."""

    def __init__(self, engine: Engine, out_dir: Path, num_workers: int, progress: bool):
        import multiprocessing as mp

        self.engine, self.out_dir, self.progress = engine, out_dir, progress
        self.num_workers = num_workers or os.cpu_count() or 1
        methods = mp.get_all_start_methods()
        # fork is cheap and this process never initialised espeak (find_engine only locates it)
        self.ctx = mp.get_context("fork" if "fork" in methods else "spawn")
        self.pool = None
        self.synth_seconds = 0.0  # wall time spent synthesizing (cached chunks excluded)
        self.synth_audio_s = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()

    def _pool(self):
        if self.pool is None:
            # every chunk runs in a fresh process: import scipy.signal (reverberation, ~0.8 s) once here, so
            # that forked workers inherit it instead of importing it per chunk (it made synthesis 5x slower)
            from scipy.signal import fftconvolve

            fftconvolve(np.ones(8), np.ones(4))  # and its lazily imported FFT backend

            self.pool = self.ctx.Pool(self.num_workers, maxtasksperchild=1)
        return self.pool

    def run(self, split: str, chunks: Iterator[list], force: bool, stop_after_s: Optional[float] = None) -> list[dict]:
        """Records of the split's utterances, in order. With `stop_after_s`, the shortest prefix of chunks
        whose audio reaches that many seconds (chunks made beyond it are deleted)."""
        from tqdm import tqdm

        bar = tqdm(desc=f"speech {split}", unit="utt", disable=not self.progress, leave=True, file=sys.stdout,
                   mininterval=2.0)
        records: list[dict] = []
        pending: list = []  # (chunk index, AsyncResult or cached record)
        total_s = 0.0
        chunk_iter = enumerate(chunks)
        kept_chunks = 0
        t_split = time.perf_counter()
        synthesized_s = 0.0
        any_synth = False
        done = stop_after_s is not None and stop_after_s <= 0
        kept_seconds: list[float] = []
        while True:
            while not done and len(pending) < 2 * self.num_workers:
                if stop_after_s is not None and kept_seconds:
                    # chunks in flight are expected to bring the mean chunk's audio: submit no more than needed
                    if total_s + len(pending) * float(np.mean(kept_seconds)) >= stop_after_s:
                        break
                nxt = next(chunk_iter, None)
                if nxt is None:
                    done = True
                    break
                k, specs = nxt
                key = _chunk_key(self.engine, specs)
                cached = None if force else _cached_chunk(self.out_dir, split, k, key)
                if cached is not None:
                    pending.append((k, cached, False))
                else:
                    any_synth = True
                    task = (self.engine, self.out_dir, split, k, key, specs)
                    pending.append((k, self._pool().apply_async(_chunk_worker, (task,)), True))
            if not pending:
                break
            k, res, fresh = pending.pop(0)
            record = res.get() if fresh else res
            if stop_after_s is not None and total_s >= stop_after_s:
                done = True
                continue  # in flight when the target was reached; deleted below
            kept_chunks += 1
            records.extend(record["records"])
            seconds = sum(r["duration"] for r in record["records"])
            total_s += seconds
            kept_seconds.append(seconds)
            if fresh:
                synthesized_s += seconds
            bar.update(len(record["records"]))
            bar.set_postfix(hours=f"{total_s / 3600:.2f}")
            if stop_after_s is not None and total_s >= stop_after_s:
                done = True
        bar.close()
        if any_synth:
            self.synth_seconds += time.perf_counter() - t_split
            self.synth_audio_s += synthesized_s
        # chunks made in flight past the train target, or left by an earlier, larger run, are not part of
        # the corpus: delete them so that the folder holds exactly what the manifests list
        self._delete_chunks_from(split, kept_chunks)
        return records

    def _delete_chunk(self, split: str, k: int) -> None:
        path = _chunk_path(self.out_dir, split, k)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            for rec in record.get("records", []):
                (self.out_dir / rec["audio_filepath"]).unlink(missing_ok=True)
        except (OSError, json.JSONDecodeError):
            pass
        path.unlink(missing_ok=True)

    def _delete_chunks_from(self, split: str, first: int) -> None:
        d = self.out_dir / "chunks" / split
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            if p.stem.isdigit() and int(p.stem) >= first:
                self._delete_chunk(split, int(p.stem))


@dataclass
class SpeechCorpus:
    root: Path
    manifests: dict  # split -> manifest path
    stats: dict


def corpus_dir(out_root: str | Path, scale: str, seed: int) -> Path:
    """<out_root>/<scale> for seed 0, <out_root>/<scale>-seed<k> otherwise (as recipes.workload names it)."""
    return Path(out_root) / (scale if int(seed) == 0 else f"{scale}-seed{int(seed)}")


def _split_chunks(cfg: SpeechCorpusConfig, split: str, texts: Iterator[str], count: Optional[int]) -> Iterator[list]:
    voice_list = voices(cfg, split)
    i = 0
    while count is None or i < count:
        n = cfg.chunk_size if count is None else min(cfg.chunk_size, count - i)
        specs = []
        for _ in range(n):
            specs.append(utterance_spec(cfg, split, i, next(texts), voice_list))
            i += 1
        yield specs


_MANIFEST_KEYS = ("audio_filepath", "duration", "text", "id", "voice", "rate_wpm", "pitch", "snr_db", "rt60_s")


def prepare_speech_corpus(cfg: Optional[SpeechCorpusConfig] = None, **overrides: Any) -> SpeechCorpus:
    """Synthesize (or verify and reuse) the corpus of `cfg`; returns its manifests and statistics."""
    from filelock import FileLock

    cfg = cfg or SpeechCorpusConfig()
    for k, v in overrides.items():
        if not hasattr(cfg, k):
            raise ValueError(f"unknown speech corpus option {k!r}; valid: {sorted(asdict(cfg))}")
        setattr(cfg, k, v)
    if isinstance(cfg.out_root, os.PathLike):
        # a pathlib.Path once reached json.dumps (hashes.json records the config) and crashed with a traceback
        cfg.out_root = os.fspath(cfg.out_root)
    validate_config(cfg)
    engine = find_engine(cfg.engine)
    check_variants(engine, [*cfg.train_variants, *cfg.train_extra_variants, *cfg.other_variants])
    scale, seed = cfg.workload.scale, int(cfg.seed)
    out = corpus_dir(cfg.out_root, scale, seed)
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    with FileLock(str(out / ".lock")):
        (out / "hashes.json").unlink(missing_ok=True)  # rewritten last: its presence marks a complete corpus
        args = (scale, seed)
        mk = lambda split, excl: sample_texts(*args, split, excl, cfg.min_words, cfg.max_words)  # noqa: E731
        taken: set = set()
        texts: dict = {}
        for split, n in (("test-clean", cfg.test_sentences), ("test-other", cfg.test_sentences), ("dev", cfg.dev_sentences)):
            it = mk(split, taken)
            texts[split] = [next(it) for _ in range(n)]
            taken |= set(texts[split])
        split_records: dict = {}
        with _Synthesizer(engine, out, cfg.num_workers, cfg.progress) as synth:
            for split in ("test-clean", "test-other", "dev", "train"):
                if split == "train":
                    chunks = _split_chunks(cfg, split, mk("train", taken), None)
                    records = synth.run(split, chunks, cfg.force, stop_after_s=float(cfg.train_hours) * 3600.0)
                else:
                    chunks = _split_chunks(cfg, split, iter(texts[split]), len(texts[split]))
                    records = synth.run(split, chunks, cfg.force)
                split_records[split] = records
            synth_seconds, synth_audio_s, workers = synth.synth_seconds, synth.synth_audio_s, synth.num_workers
        files: dict = {}
        stats: dict = {"corpus_version": CORPUS_VERSION, "workload": {"scale": scale, "seed": seed},
                       "engine": {"kind": engine.kind, "version": engine.version}, "splits": {}}
        manifests = {}
        for split, records in split_records.items():
            lines = [json.dumps({k: r[k] for k in _MANIFEST_KEYS if k in r}, ensure_ascii=False) + "\n" for r in records]
            path = out / f"{split}.jsonl"
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(lines), encoding="utf-8")
            os.replace(tmp, path)
            manifests[split] = path
            files[path.name] = _sha256_file(path)
            files.update({r["audio_filepath"]: r["sha256"] for r in records})
            nbytes = sum((out / r["audio_filepath"]).stat().st_size for r in records)
            stats["splits"][split] = {
                "utterances": len(records),
                "hours": round(sum(r["duration"] for r in records) / 3600.0, 4),
                "words": sum(len(r["text"].split()) for r in records),
                "voices": len({r["voice"] for r in records}),
                "mean_duration_s": round(float(np.mean([r["duration"] for r in records])), 3) if records else 0.0,
                "bytes": nbytes,
            }
        stats["total_bytes"] = sum(s["bytes"] for s in stats["splits"].values())
        stats["synthesis"] = {
            "workers": workers,
            "seconds": round(synth_seconds, 2),
            "audio_hours": round(synth_audio_s / 3600.0, 4),
            "seconds_per_audio_hour": round(synth_seconds / (synth_audio_s / 3600.0), 1) if synth_audio_s else None,
        }
        stats["total_seconds"] = round(time.perf_counter() - t_all, 2)
        _write_json(out / "stats.json", stats)
        config = {k: v for k, v in asdict(cfg).items() if k not in ("num_workers", "progress", "force")}
        _write_json(out / "hashes.json", {"corpus_version": CORPUS_VERSION, "config": config,
                                          "engine": [engine.kind, engine.version], "files": files})
    print(format_stats(stats, out), flush=True)
    return SpeechCorpus(root=out, manifests=manifests, stats=stats)


def format_stats(stats: dict, out: Path) -> str:
    lines = [f"speech corpus {out} (workload {stats['workload']['scale']}, seed {stats['workload']['seed']}, "
             f"{stats['engine']['version']})"]
    for split, s in stats["splits"].items():
        lines.append(f"  {split}: {s['utterances']} utterances, {s['hours']:.3f} h, {s['voices']} voices, "
                     f"mean {s['mean_duration_s']:.2f} s, {s['bytes'] / 2**20:.1f} MiB")
    syn = stats["synthesis"]
    if syn["audio_hours"]:
        lines.append(f"  synthesized {syn['audio_hours']:.3f} h in {syn['seconds']:.1f} s on {syn['workers']} workers "
                     f"({syn['seconds_per_audio_hour']:.0f} s per audio hour)")
    else:
        lines.append("  [cached] every chunk verified against its sha256")
    lines.append(f"  total {stats['total_bytes'] / 2**20:.1f} MiB, {stats['total_seconds']:.1f} s")
    return "\n".join(lines)


def read_corpus_manifest(path: str | Path) -> list[dict]:
    """A split manifest with audio paths resolved against its folder (recipes.librispeech.read_manifest)."""
    from recipes.librispeech import read_manifest

    return read_manifest(path)


# ---------------------------------------------------------------------------------------------- CLI
CLI_ERRORS = (ValueError, TypeError, RuntimeError, FileNotFoundError)


def one_line(e: BaseException) -> str:
    msg = str(e)
    if e.__cause__ is not None and str(e.__cause__) not in msg:
        msg = f"{msg}: {e.__cause__}"
    return " ".join(msg.split()) or type(e).__name__


def exit_on_bad_input(task):
    """Wrap a Hydra task: bad input -> `error: <one line>` on stderr, exit status 2. Inside the task, because
    Hydra reports a task's exception with its own extra lines before re-raising it."""
    import functools

    @functools.wraps(task)
    def wrapped(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        except CLI_ERRORS as e:
            if os.environ.get("RECIPE_TRACEBACK") == "1":
                raise
            print(f"error: {one_line(e)}", file=sys.stderr)
            raise SystemExit(2) from None

    return wrapped


def run_recipe_app(app, argv: Sequence[str]) -> None:
    """Run a recipe's Hydra app; bad input or a missing dependency -> `error: <one line>` and exit status 2.

    Hydra prints a traceback and exits 1 on any exception unless HYDRA_FULL_ERROR=1, which makes it re-raise;
    set here so that composition errors reach this handler (a user's own HYDRA_FULL_ERROR=1 keeps the
    traceback); errors inside the task are handled by `exit_on_bad_input`."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from recipes.cli import run_hydra_app

    user_full = os.environ.get("HYDRA_FULL_ERROR") == "1"
    if user_full:
        os.environ["RECIPE_TRACEBACK"] = "1"
    old = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        run_hydra_app(app, argv)
    except (*CLI_ERRORS, HydraException, OmegaConfBaseException) as e:
        if user_full:
            raise
        print(f"error: {one_line(e)}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        if old is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = old


def main(argv: Optional[list[str]] = None) -> None:
    """`python -m recipes.speech_corpus train_hours=10 num_workers=16 out_root=...` (Hydra app)."""
    import hydra
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="speech_corpus_cli", node=SpeechCorpusConfig)
    argv = list(sys.argv[1:] if argv is None else argv)

    @hydra.main(version_base=None, config_name="speech_corpus_cli")
    @exit_on_bad_input
    def _app(cfg: SpeechCorpusConfig) -> None:
        prepare_speech_corpus(OmegaConf.to_object(cfg))

    run_recipe_app(_app, argv)


if __name__ == "__main__":
    main()
