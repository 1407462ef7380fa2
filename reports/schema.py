"""The one results-row schema: written by every producer (the runner, every benchmark), read by every consumer
(tables, plots, the gate). Torch-free, versioned, strict.

A row is one (decoder, dataset) measurement of one run, or a decoder that could not run (`status:
"unavailable"` with the reason). `results.jsonl` holds one row per line; `load_rows` refuses any line that is
not a valid row of this schema version with a one-line `ValueError` naming the file and line.

Side-by-side benchmarks (ours vs Riva, ours vs the seed system's CTC decoder) write both decoders' rows into the
same run and name the other in `run_mate`; `boundary` says what the timing bracketed ("api": the public decode
call, host tensors in and hypotheses out; "kernel": device work only, inputs already on the device) so a ratio is
only ever formed between rows measured across the same boundary.
"""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Optional

SCHEMA_VERSION = 2
STATUSES = ("ok", "unavailable")
BOUNDARIES = ("api", "kernel")


@dataclass
class ResultRow:
    # identity
    experiment: str
    run: str
    decoder: str  # label: "wfst@cuda", "flashlight[boost=2]", "wfst@cuda[batch=32]"
    decoder_name: str  # registry name: "wfst"
    device: str
    status: str = "ok"
    dataset: Optional[str] = None  # None only for unavailable rows; "all" = every dataset of the run
    reason: Optional[str] = None  # why an unavailable row did not run
    schema_version: int = SCHEMA_VERSION
    boost_value: Optional[float] = None
    # workload
    utterances: int = 0
    audio_seconds: float = 0.0
    frames: int = 0
    batch_size: int = 0
    warmup_batches: int = 0
    # WER parts (eval.metrics.WerStats)
    wer: Optional[float] = None  # fraction; None when the inputs have no references
    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    hits: int = 0
    ref_words: int = 0
    sentence_errors: int = 0
    # time (eval.metrics.Stopwatch) and RTFx (eval.metrics.rtfx)
    decoder_seconds: Optional[float] = None
    decoder_cuda_seconds: Optional[float] = None
    acoustic_seconds: Optional[float] = None
    end_to_end_seconds: Optional[float] = None
    rtfx_decoder: Optional[float] = None
    rtfx_end_to_end: Optional[float] = None
    boundary: str = "api"
    # memory (eval.metrics.MemoryProbe)
    peak_rss_bytes: Optional[int] = None
    rss_increase_bytes: Optional[int] = None
    cuda_peak_bytes: Optional[int] = None
    acoustic_stage_peak_bytes: dict = field(default_factory=dict)
    # decoder counters (overflow: utterances flagged; rescued: re-decoded with larger capacities)
    overflow_count: int = 0
    rescued_count: int = 0
    decoder_stats: dict = field(default_factory=dict)
    # provenance
    hardware_key: Optional[str] = None
    environment: dict = field(default_factory=dict)
    decoder_config: dict = field(default_factory=dict)
    run_mate: Optional[str] = None  # label of the decoder measured beside this one in the same run
    # benchmark-specific coordinates (graph name, shape, streams, ...): flat {str: str | int | float | bool}
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise ValueError (one line) when the row is not a well-formed row of this schema."""
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version!r}, this code reads {SCHEMA_VERSION}")
        for name in ("experiment", "run", "decoder", "decoder_name", "device"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise ValueError(f"{name} must be a non-empty string, got {v!r}")
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {list(STATUSES)}, got {self.status!r}")
        if self.boundary not in BOUNDARIES:
            raise ValueError(f"boundary must be one of {list(BOUNDARIES)}, got {self.boundary!r}")
        if self.status == "unavailable":
            if not isinstance(self.reason, str) or not self.reason:
                raise ValueError(f"unavailable row for {self.decoder!r} has no reason")
            return
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ValueError(f"row for {self.decoder!r} has no dataset")
        if self.wer is not None:  # None: no references (a kernel benchmark on synthetic log-probs)
            _finite_number("wer", self.wer, lo=0.0)
        for name in ("utterances", "substitutions", "deletions", "insertions", "hits", "ref_words",
                     "sentence_errors", "frames", "overflow_count", "rescued_count", "batch_size", "warmup_batches"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {v!r} ({self.decoder}, {self.dataset})")
        if self.utterances == 0:
            raise ValueError(f"row ({self.decoder}, {self.dataset}) has 0 utterances")
        _finite_number("audio_seconds", self.audio_seconds, lo=0.0)
        for name in ("decoder_seconds", "decoder_cuda_seconds", "acoustic_seconds", "end_to_end_seconds",
                     "rtfx_decoder", "rtfx_end_to_end", "boost_value"):
            v = getattr(self, name)
            if v is not None:
                _finite_number(name, v, lo=None if name == "boost_value" else 0.0)
        for name in ("peak_rss_bytes", "rss_increase_bytes", "cuda_peak_bytes"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise ValueError(f"{name} must be an integer or null, got {v!r}")
        if self.ref_words != self.hits + self.substitutions + self.deletions:
            raise ValueError(f"ref_words {self.ref_words} != H + S + D ({self.decoder}, {self.dataset})")
        if self.wer is not None:  # eval.metrics.WerStats.wer: the denominator is clamped to 1, as jiwer does
            want = (self.substitutions + self.deletions + self.insertions) / max(self.ref_words, 1)
            if abs(want - self.wer) > 1e-9:
                raise ValueError(f"wer {self.wer!r} disagrees with its parts (S+D+I)/max(N,1) = {want!r} "
                                 f"({self.decoder}, {self.dataset})")

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, sort_keys=False)

    @classmethod
    def from_dict(cls, d: Any) -> "ResultRow":
        if not isinstance(d, dict):
            raise ValueError(f"a result row must be a JSON object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown result-row field(s) {unknown}")
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(f"result row lacks required field(s) {missing}")
        try:
            return cls(**d)
        except TypeError as e:
            raise ValueError(f"malformed result row: {e}") from None

    @property
    def key(self) -> tuple[str, str]:
        """What the gate and tables match rows on."""
        return (self.decoder, str(self.dataset))

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _finite_number(name: str, v: Any, lo: Optional[float]) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v!r}")


def parse_rows(lines: Iterable[str], source: str = "<rows>") -> list[ResultRow]:
    rows = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(ResultRow.from_dict(json.loads(line)))
        except (json.JSONDecodeError, ValueError, RecursionError) as e:
            raise ValueError(f"{source}:{lineno}: {e}") from None
    return rows


def load_rows(path: str | Path) -> list[ResultRow]:
    """Rows of one results.jsonl (or a run directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"results file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: unreadable ({e})") from None
    return parse_rows(text.splitlines(), str(path))


def write_rows(path: str | Path, rows: Iterable[ResultRow]) -> None:
    """Write results.jsonl (the caller makes the directory atomic; see eval.results)."""
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            r.validate()
            f.write(r.to_json() + "\n")
