"""The ONE definition of each number the harness reports: WER, RTFx, memory.

- WER: jiwer word alignment after one text normaliser (`normalize_text`), summed over utterances
  (corpus WER = (S + D + I) / reference words), never an average of per-utterance WERs.
- RTFx: audio seconds / wall seconds. Two kinds: decoder-only (time inside `decoder.decode`) and
  end-to-end (acoustic source + decoder). Warm-up batches are excluded; on CUDA every timed region is
  bracketed by explicit `torch.cuda.synchronize()` so asynchronous kernels are counted, and CUDA events
  record device time next to the wall time.
- Memory: host peak RSS while a region runs (sampled by a background thread, reported as the rise over
  the RSS at entry and as the absolute peak) and the CUDA allocator's peak for the region.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Iterable, Optional, Sequence

import jiwer

# ---------------------------------------------------------------------------------------------------------
# WER
# ---------------------------------------------------------------------------------------------------------

# Keep letters, digits, apostrophes (LibriSpeech spells "don't"); every other character becomes a space.
_NORMALIZE = jiwer.Compose(
    [
        jiwer.ToLowerCase(),
        jiwer.SubstituteRegexes({r"[^\w\s']": " ", r"_": " "}),
        jiwer.RemoveMultipleSpaces(),
        jiwer.Strip(),
    ]
)
_TO_WORDS = jiwer.Compose([_NORMALIZE, jiwer.ReduceToListOfListOfWords()])


def normalize_text(text: str) -> str:
    """The harness's text normaliser: lower case, punctuation (except apostrophes) removed, single spaces."""
    return _NORMALIZE(text)


@dataclass
class WerStats:
    """Word error counts over a set of utterances; `wer` is derived, so stats from shards can be added."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    hits: int = 0
    utterances: int = 0
    sentence_errors: int = 0  # utterances with at least one error

    @property
    def ref_words(self) -> int:
        return self.hits + self.substitutions + self.deletions

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """(S + D + I) / reference words; with no reference words the denominator is clamped to 1,
        as jiwer does, so an all-empty reference set with insertions still scores > 0."""
        return self.errors / max(self.ref_words, 1)

    def __add__(self, other: "WerStats") -> "WerStats":
        return WerStats(
            substitutions=self.substitutions + other.substitutions,
            deletions=self.deletions + other.deletions,
            insertions=self.insertions + other.insertions,
            hits=self.hits + other.hits,
            utterances=self.utterances + other.utterances,
            sentence_errors=self.sentence_errors + other.sentence_errors,
        )

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(wer=self.wer, ref_words=self.ref_words, errors=self.errors)
        return d


def word_error_stats(references: Sequence[str], hypotheses: Sequence[str]) -> WerStats:
    """Corpus-level WER parts for parallel lists of raw (un-normalised) reference/hypothesis strings."""
    if len(references) != len(hypotheses):
        raise ValueError(
            f"references and hypotheses must have the same length, got {len(references)} and {len(hypotheses)}"
        )
    if len(references) == 0:
        return WerStats()
    out = jiwer.process_words(
        list(references), list(hypotheses), reference_transform=_TO_WORDS, hypothesis_transform=_TO_WORDS
    )
    sentence_errors = sum(
        1 for chunks in out.alignments if any(c.type != "equal" for c in chunks)
    )
    return WerStats(
        substitutions=out.substitutions,
        deletions=out.deletions,
        insertions=out.insertions,
        hits=out.hits,
        utterances=len(references),
        sentence_errors=sentence_errors,
    )


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus WER as a fraction (0.05 = 5 %)."""
    return word_error_stats(references, hypotheses).wer



def utterance_error_counts(references: Sequence[str], hypotheses: Sequence[str]) -> tuple[list[int], list[int]]:
    """Per-utterance (S + D + I, reference words) after the one normaliser: the units a bootstrap resamples.
    Their sums are exactly `word_error_stats`' errors and ref_words (same alignment, one jiwer call)."""
    if len(references) != len(hypotheses):
        raise ValueError(
            f"references and hypotheses must have the same length, got {len(references)} and {len(hypotheses)}"
        )
    if len(references) == 0:
        return [], []
    out = jiwer.process_words(
        list(references), list(hypotheses), reference_transform=_TO_WORDS, hypothesis_transform=_TO_WORDS
    )
    errors, words = [], []
    for ref, chunks in zip(out.references, out.alignments):
        errors.append(sum(
            (c.ref_end_idx - c.ref_start_idx) if c.type in ("substitute", "delete") else
            (c.hyp_end_idx - c.hyp_start_idx) if c.type == "insert" else 0
            for c in chunks))
        words.append(len(ref))
    return errors, words


def utterance_char_error_counts(references: Sequence[str], hypotheses: Sequence[str]) -> tuple[list[int], list[int]]:
    """Per-utterance (character S + D + I, reference characters) after the one normaliser (spaces count as
    characters, as jiwer's CER counts them); CER = sum(errors) / max(sum(characters), 1)."""
    if len(references) != len(hypotheses):
        raise ValueError(
            f"references and hypotheses must have the same length, got {len(references)} and {len(hypotheses)}"
        )
    if len(references) == 0:
        return [], []
    refs = [normalize_text(r) for r in references]
    hyps = [normalize_text(h) for h in hypotheses]
    errors, chars = [], []
    for ref, hyp in zip(refs, hyps):
        if not ref:  # jiwer refuses an empty reference; every hypothesis character is an insertion
            errors.append(len(hyp))
            chars.append(0)
            continue
        out = jiwer.process_characters(ref, hyp)
        errors.append(out.substitutions + out.deletions + out.insertions)
        chars.append(out.hits + out.substitutions + out.deletions)
    return errors, chars


@dataclass
class BootstrapInterval:
    """A percentile bootstrap interval of a corpus WER (fractions) or of a WER difference."""

    estimate: float  # the statistic on the full sample
    low: float
    high: float
    confidence: float
    n_resamples: int
    seed: int
    # paired only: share of resamples where the difference (a - b) is < 0, i.e. `a` has the lower WER
    prob_a_better: Optional[float] = None

    def as_dict(self) -> dict:
        return asdict(self)


def _bootstrap_args(n: int, n_resamples: int, confidence: float) -> None:
    if n == 0:
        raise ValueError("bootstrap: no utterances to resample")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"bootstrap: n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"bootstrap: confidence must be in (0, 1), got {confidence!r}")


def _counts(name: str, values: Sequence[int]):
    import numpy as np

    a = np.asarray(values, dtype=np.int64)
    if a.ndim != 1 or (a < 0).any():
        raise ValueError(f"bootstrap: {name} must be a 1-D sequence of non-negative counts")
    return a


def _resample_indices(n: int, n_resamples: int, seed: int):
    """(n_resamples, n) utterance indices drawn with replacement: the same seed gives the same draws, so a
    paired comparison of two decoders resamples the same utterances for both."""
    import numpy as np

    return np.random.default_rng(int(seed)).integers(0, n, size=(n_resamples, n))


def _interval(samples, estimate: float, confidence: float, n_resamples: int, seed: int, **extra) -> BootstrapInterval:
    import numpy as np

    tail = (1.0 - float(confidence)) / 2.0
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return BootstrapInterval(estimate=float(estimate), low=float(low), high=float(high), confidence=float(confidence),
                             n_resamples=int(n_resamples), seed=int(seed), **extra)


def bootstrap_wer_ci(errors: Sequence[int], ref_words: Sequence[int], n_resamples: int = 1000,
                     confidence: float = 0.95, seed: int = 0) -> BootstrapInterval:
    """Percentile bootstrap CI of the corpus WER: utterances are resampled with replacement (the utterance is the
    independent unit; words of one sentence are not), each resample's WER is sum(errors) / sum(ref_words) as in
    `WerStats.wer` (denominator clamped to 1)."""
    e, w = _counts("errors", errors), _counts("ref_words", ref_words)
    if len(e) != len(w):
        raise ValueError(f"bootstrap: errors and ref_words differ in length ({len(e)} vs {len(w)})")
    _bootstrap_args(len(e), n_resamples, confidence)
    import numpy as np

    idx = _resample_indices(len(e), n_resamples, seed)
    samples = e[idx].sum(axis=1) / np.maximum(w[idx].sum(axis=1), 1)
    return _interval(samples, e.sum() / max(int(w.sum()), 1), confidence, n_resamples, seed)


def paired_bootstrap(errors_a: Sequence[int], errors_b: Sequence[int], ref_words: Sequence[int],
                     n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> BootstrapInterval:
    """Paired bootstrap of WER(a) - WER(b) on the same utterances (Koehn 2004; Bisani & Ney 2004): each resample
    draws one set of utterances and scores both systems on it, so the utterance difficulty shared by both
    cancels and the interval is far narrower than two independent CIs would suggest. `prob_a_better` is the
    share of resamples where a has the lower WER; an interval that excludes 0 is a difference at `confidence`."""
    a, b, w = _counts("errors_a", errors_a), _counts("errors_b", errors_b), _counts("ref_words", ref_words)
    if not len(a) == len(b) == len(w):
        raise ValueError(f"paired bootstrap: errors_a, errors_b and ref_words differ in length "
                         f"({len(a)}, {len(b)}, {len(w)})")
    _bootstrap_args(len(a), n_resamples, confidence)
    import numpy as np

    idx = _resample_indices(len(a), n_resamples, seed)
    denom = np.maximum(w[idx].sum(axis=1), 1)
    diff = (a[idx].sum(axis=1) - b[idx].sum(axis=1)) / denom
    estimate = (int(a.sum()) - int(b.sum())) / max(int(w.sum()), 1)
    return _interval(diff, estimate, confidence, n_resamples, seed, prob_a_better=float((diff < 0).mean()))


# ---------------------------------------------------------------------------------------------------------
# Timing (RTFx)
# ---------------------------------------------------------------------------------------------------------


def rtfx(audio_seconds: float, wall_seconds: float) -> float:
    """Inverse real-time factor: seconds of audio processed per wall-clock second (higher is faster)."""
    if wall_seconds <= 0:
        return float("inf") if audio_seconds > 0 else 0.0
    return audio_seconds / wall_seconds


def _is_cuda(device: str) -> bool:
    return str(device).startswith("cuda")


class Stopwatch:
    """Accumulates wall time of repeated regions; on CUDA also device time from events.

    Usage: `with sw: work()`. Entering syncs the device (so earlier queued work is not billed to this
    region), exiting syncs again (so this region's kernels are finished when the clock stops).
    """

    def __init__(self, device: str = "cpu"):
        self.device = str(device)
        self.wall_seconds = 0.0
        self.cuda_seconds: Optional[float] = 0.0 if _is_cuda(self.device) else None
        self.regions = 0
        self._t0 = 0.0
        self._events = None

    def __enter__(self) -> "Stopwatch":
        if self.cuda_seconds is not None:
            import torch

            torch.cuda.synchronize(self.device)
            self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self._events[0].record()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda_seconds is not None:
            import torch

            self._events[1].record()
            torch.cuda.synchronize(self.device)
            self.cuda_seconds += self._events[0].elapsed_time(self._events[1]) / 1000.0
        self.wall_seconds += time.perf_counter() - self._t0
        self.regions += 1


# ---------------------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------------------


def current_rss_bytes() -> int:
    import psutil

    return int(psutil.Process(os.getpid()).memory_info().rss)


@dataclass
class MemoryStats:
    peak_rss_bytes: int = 0  # absolute host RSS peak observed during the region(s)
    rss_increase_bytes: int = 0  # peak RSS minus RSS at region entry (working memory of the region)
    cuda_peak_bytes: Optional[int] = None  # torch allocator peak during the region(s); None off CUDA
    # device memory in use beyond a baseline taken before the decoder was built (cudaMemGetInfo: free at the
    # baseline minus free at the region's end). Unlike cuda_peak_bytes it sees every allocator — Riva's,
    # the extension's own cudaMalloc — so it is the figure that compares decoders with different allocators.
    cuda_device_used_bytes: Optional[int] = None

    def merge(self, other: "MemoryStats") -> "MemoryStats":
        return MemoryStats(
            peak_rss_bytes=max(self.peak_rss_bytes, other.peak_rss_bytes),
            rss_increase_bytes=max(self.rss_increase_bytes, other.rss_increase_bytes),
            cuda_peak_bytes=_max_or_none(self.cuda_peak_bytes, other.cuda_peak_bytes),
            cuda_device_used_bytes=_max_or_none(self.cuda_device_used_bytes, other.cuda_device_used_bytes),
        )


def _max_or_none(a: Optional[int], b: Optional[int]) -> Optional[int]:
    if a is None and b is None:
        return None
    return max(a or 0, b or 0)


def cuda_free_bytes(device: str) -> int:
    """Free device memory now (cudaMemGetInfo), after the device's queued work finished; the baseline of
    MemoryProbe's `cuda_device_used_bytes` (take it before building the decoder, graph upload included)."""
    import torch

    torch.cuda.synchronize(device)
    return int(torch.cuda.mem_get_info(device)[0])


def cuda_allocated_bytes(device: str) -> int:
    """Bytes held by torch's caching allocator's live tensors on `device` now (memory-over-time series)."""
    import torch

    return int(torch.cuda.memory_allocated(device))


def clock_s() -> float:
    """Monotonic seconds on a clock shared by every process of the host (CLOCK_MONOTONIC): the timeline of
    per-request latencies (arrival, dispatch, completion) in eval.bench.wfst_stream_bench, whose worker processes
    stamp their own events. Take completions after a device synchronisation."""
    return time.monotonic()


class MemoryProbe:
    """Host peak RSS (sampled every `interval_s` by a daemon thread) + CUDA peak for a `with` region.

    RSS sampling can miss a spike shorter than the interval; the probe also samples at entry and exit.
    The process-wide `ru_maxrss` is not used because it never resets, so it cannot attribute memory
    to one decoder when several run in one process.
    """

    def __init__(self, device: str = "cpu", interval_s: float = 0.005,
                 device_free_baseline_bytes: Optional[int] = None):
        self.device = str(device)
        self.interval_s = interval_s
        self.device_free_baseline_bytes = device_free_baseline_bytes if _is_cuda(self.device) else None
        self.stats = MemoryStats(cuda_peak_bytes=0 if _is_cuda(self.device) else None)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._start_rss = 0
        self._peak = 0

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._peak = max(self._peak, current_rss_bytes())

    def __enter__(self) -> "MemoryProbe":
        if self.stats.cuda_peak_bytes is not None:
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self._start_rss = self._peak = current_rss_bytes()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, current_rss_bytes())
        cuda_peak = None
        if self.stats.cuda_peak_bytes is not None:
            import torch

            torch.cuda.synchronize(self.device)
            cuda_peak = int(torch.cuda.max_memory_allocated(self.device))
        device_used = None
        if self.device_free_baseline_bytes is not None:
            device_used = max(0, self.device_free_baseline_bytes - cuda_free_bytes(self.device))
        self.stats = self.stats.merge(
            MemoryStats(
                peak_rss_bytes=self._peak,
                rss_increase_bytes=self._peak - self._start_rss,
                cuda_peak_bytes=cuda_peak,
                cuda_device_used_bytes=device_used,
            )
        )


# ---------------------------------------------------------------------------------------------------------
# Environment (what the gate compares timings on)
# ---------------------------------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _git_commit(cwd: Optional[str] = None) -> Optional[str]:
    """HEAD (+ "-dirty"); `EVAL_GIT_COMMIT` wins: a copy of the tree on a remote host (the GPU device call) can
    carry a stale .git, so the caller states the commit it sent."""
    import subprocess

    if os.environ.get("EVAL_GIT_COMMIT"):
        return os.environ["EVAL_GIT_COMMIT"]

    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=cwd, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, cwd=cwd,
        ).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment_info() -> dict:
    """GPU name, torch/CUDA versions, CPU, git commit: recorded with every results row."""
    import platform

    import torch

    cuda = torch.cuda.is_available()
    gpu_name = torch.cuda.get_device_name(0) if cuda else None
    return {
        "gpu_name": gpu_name,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if cuda else None,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "git_commit": _git_commit(os.path.dirname(os.path.abspath(__file__))),
        # the decoders' A/B switches set for this process (README "Environment switches"), so an A/B arm's rows
        # say which form they measured
        "beamdec_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("BEAMDEC_")},
    }


def hardware_key(env: dict, device: str) -> str:
    """What must match for two timings to be comparable: the GPU for CUDA decoders, the CPU otherwise."""
    if _is_cuda(device):
        return f"gpu:{env.get('gpu_name')}"
    return f"cpu:{env.get('cpu_model')}x{env.get('cpu_count')}"


def mib(n_bytes: Optional[float]) -> Optional[float]:
    return None if n_bytes is None else n_bytes / 2**20


def iter_chunks(items: Sequence, size: int) -> Iterable[Sequence]:
    if size <= 0:
        raise ValueError(f"batch size must be positive, got {size}")
    for i in range(0, len(items), size):
        yield items[i : i + size]
