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
# Counters and byte counts are int64 on every producer; a larger JSON integer is corruption, and refusing it here
# keeps every consumer's float arithmetic (WER, MiB) free of OverflowError.
MAX_INT = 2**63 - 1
# fields added after rows were first committed (evidence run directories): a file row may lack them (null then)
OPTIONAL_IN_FILES = frozenset({"char_errors", "ref_chars", "wer_ci"})
# keys of `wer_ci`: the bootstrap interval of the row's WER, and of its difference to a reference decoder's WER on the
# same utterances (paired), all fractions
WER_CI_KEYS = ("confidence", "n_resamples", "low", "high", "reference", "delta", "delta_low", "delta_high",
               "prob_better")
_PARAM_SCALARS = (str, int, float, bool)


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
    # CER parts (eval.metrics.utterance_char_error_counts summed); None in rows written before CER was recorded
    char_errors: Optional[int] = None
    ref_chars: Optional[int] = None
    # 95 % percentile bootstrap intervals (eval.metrics): {confidence, n_resamples, low, high} of the WER and, against
    # a reference decoder of the same run, {reference, delta, delta_low, delta_high, prob_better}; {} when not computed
    wer_ci: dict = field(default_factory=dict)
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
    cuda_device_used_bytes: Optional[int] = None  # cudaMemGetInfo delta from before the decoder was built: every allocator
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
            raise ValueError(f"schema_version {_short(self.schema_version)}, this code reads {SCHEMA_VERSION}")
        for name in ("experiment", "run", "decoder", "decoder_name", "device"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise ValueError(f"{name} must be a non-empty string, got {_short(v)}")
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {list(STATUSES)}, got {_short(self.status)}")
        if self.boundary not in BOUNDARIES:
            raise ValueError(f"boundary must be one of {list(BOUNDARIES)}, got {_short(self.boundary)}")
        for name in ("dataset", "reason", "hardware_key", "run_mate"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise ValueError(f"{name} must be a string or null, got {_short(v)}")
        for name in ("acoustic_stage_peak_bytes", "decoder_stats", "environment", "decoder_config", "params", "wer_ci"):
            v = getattr(self, name)
            if not isinstance(v, dict):
                raise ValueError(f"{name} must be an object, got {type(v).__name__}")
            _check_json_tree(name, v)
        for k, v in self.params.items():
            # params are grouping coordinates (tables group and pair rows on them): flat scalars only
            if not isinstance(k, str) or not isinstance(v, _PARAM_SCALARS) or (
                    isinstance(v, float) and not math.isfinite(v)):
                raise ValueError(f"params must map strings to finite scalars, got {_short(k)}: {_short(v)}")
        if self.boost_value is not None:
            _finite_number("boost_value", self.boost_value, lo=None)
        if self.status == "unavailable":
            if not isinstance(self.reason, str) or not self.reason:
                raise ValueError(f"unavailable row for {_short(self.decoder)} has no reason")
            return
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ValueError(f"row for {_short(self.decoder)} has no dataset")
        if self.wer is not None:  # None: no references (a kernel benchmark on synthetic log-probs)
            _finite_number("wer", self.wer, lo=0.0)
        for name in ("utterances", "substitutions", "deletions", "insertions", "hits", "ref_words",
                     "sentence_errors", "frames", "overflow_count", "rescued_count", "batch_size", "warmup_batches"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_INT:
                raise ValueError(f"{name} must be a non-negative integer below 2**63, got {_short(v)} "
                                 f"({self.decoder}, {self.dataset})")
        if self.utterances == 0:
            raise ValueError(f"row ({self.decoder}, {self.dataset}) has 0 utterances")
        _finite_number("audio_seconds", self.audio_seconds, lo=0.0)
        for name in ("decoder_seconds", "decoder_cuda_seconds", "acoustic_seconds", "end_to_end_seconds",
                     "rtfx_decoder", "rtfx_end_to_end"):
            v = getattr(self, name)
            if v is not None:
                _finite_number(name, v, lo=0.0)
        unknown_ci = sorted(set(self.wer_ci) - set(WER_CI_KEYS))
        if unknown_ci:
            raise ValueError(f"wer_ci has unknown key(s) {_short(unknown_ci)}; valid: {list(WER_CI_KEYS)}")
        for k, v in self.wer_ci.items():
            if k == "reference":
                if not isinstance(v, str) or not v:
                    raise ValueError(f"wer_ci.reference must be a decoder label, got {_short(v)}")
            else:
                _finite_number(f"wer_ci.{k}", v, lo=None)
        for name in ("char_errors", "ref_chars"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_INT):
                raise ValueError(f"{name} must be a non-negative integer below 2**63 or null, got {_short(v)}")
        for name in ("peak_rss_bytes", "rss_increase_bytes", "cuda_peak_bytes", "cuda_device_used_bytes"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or abs(v) > MAX_INT):
                raise ValueError(f"{name} must be an integer below 2**63 or null, got {_short(v)}")
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
    def from_dict(cls, d: Any, complete: bool = False) -> "ResultRow":
        """A row from a dict; unknown fields are refused. `complete=True` (what the file loaders use) also
        refuses a missing field: `write_rows` writes every field, so a line lacking one (`wer`, say) was edited
        or truncated, and reading it with the default would turn corruption into a plausible row."""
        if not isinstance(d, dict):
            raise ValueError(f"a result row must be a JSON object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown result-row field(s) {_short(unknown)}")
        required = [f.name for f in fields(cls)
                    if (complete and f.name not in OPTIONAL_IN_FILES)
                    or (f.default is MISSING and f.default_factory is MISSING)]
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(f"result row lacks required field(s) {missing}")
        try:
            return cls(**d)
        except TypeError as e:
            raise ValueError(f"malformed result row: {e}") from None

    @property
    def params_label(self) -> str:
        """The grouping coordinates as one canonical string ("" when the row has none): "B=16,T=200"."""
        return ",".join(f"{k}={self.params[k]}" for k in sorted(self.params))

    @property
    def key(self) -> tuple[str, str, str]:
        """What the gate and tables match rows on: (decoder, dataset, params). Runner rows have no params, so
        this is (decoder, dataset); a benchmark's per-shape rows share a decoder label and differ in params."""
        return (self.decoder, str(self.dataset), self.params_label)

    @property
    def label(self) -> str:
        """Human-readable key: "ctc_beam@cuda [B=16,T=200]" (the dataset is shown separately)."""
        # coordinates the decoder label already names ("wfst@cuda[compact TLG, b=32]") are not repeated
        rest = ",".join(f"{k}={self.params[k]}" for k in sorted(self.params) if str(self.params[k]) not in self.decoder)
        return f"{self.decoder} [{rest}]" if rest else self.decoder

    @property
    def cer(self) -> Optional[float]:
        """Character error rate (fraction), when the row recorded its parts."""
        if self.char_errors is None or self.ref_chars is None or self.wer is None:
            return None
        return self.char_errors / max(self.ref_chars, 1)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _short(v: Any, limit: int = 80) -> str:
    """repr for an error message: one line, bounded (a corrupted file can hold a megabyte-long string)."""
    try:
        r = repr(v)
    except (ValueError, RecursionError):  # an int too long to print, a deeply nested list
        r = f"<{type(v).__name__}>"
    return r if len(r) <= limit else r[: limit - 3] + "..."


def _check_json_tree(name: str, tree: Any) -> None:
    """Free-form fields (configs, environment, counters) hold JSON values only, with finite numbers: `to_json`
    refuses NaN/inf, so a row holding one could not have been written by a producer."""
    stack = [tree]
    while stack:  # iterative: a deeply nested corrupted value must not exhaust the recursion limit
        v = stack.pop()
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise ValueError(f"{name} has a non-string key")
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):  # a producer's tuple is written as a JSON list
            stack.extend(v)
        elif isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{name} holds a non-finite number ({v!r})")
        elif v is not None and not isinstance(v, (str, int, float, bool)):
            raise ValueError(f"{name} holds a {type(v).__name__}, not a JSON value")


def _finite_number(name: str, v: Any, lo: Optional[float]) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{name} must be a finite number, got {_short(v)}")
    try:
        v = float(v)  # a JSON integer beyond float range is not a measurement either
    except OverflowError:
        raise ValueError(f"{name} must be a finite number, got an integer beyond float range") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v!r}")


# ---------------------------------------------------------------------------------------------------------
# Baseline rows: the subset of a ResultRow the gate keeps (reports/baselines/*.json)
# ---------------------------------------------------------------------------------------------------------

# A committed baseline stores these fields of each row, and nothing else: identity and grouping coordinates, the
# workload (what makes two rows comparable), the WER parts, RTFx and the hardware key RTFx is comparable on.
BASELINE_FIELDS = (
    "decoder", "dataset", "device", "boundary", "params", "utterances", "audio_seconds",
    "wer", "substitutions", "deletions", "insertions", "hits", "ref_words",
    "rtfx_decoder", "rtfx_end_to_end", "hardware_key",
)
_RESULT_FIELDS = {f.name for f in fields(ResultRow)}
assert set(BASELINE_FIELDS) <= _RESULT_FIELDS, sorted(set(BASELINE_FIELDS) - _RESULT_FIELDS)


def baseline_subset(row: ResultRow) -> dict:
    """The baseline form of a successful row (what `--write-baseline` stores)."""
    if not row.ok:
        raise ValueError(f"an unavailable row ({row.decoder}) has no numbers for a baseline")
    return {k: getattr(row, k) for k in BASELINE_FIELDS}


def baseline_row_from_dict(d: Any) -> ResultRow:
    """A baseline row read back as a ResultRow, validated by the same rules as a results line. Every field of
    BASELINE_FIELDS must be present (null where the schema allows), no other field may be."""
    if not isinstance(d, dict):
        raise ValueError(f"a baseline row must be a JSON object, got {type(d).__name__}")
    unknown = sorted(set(d) - set(BASELINE_FIELDS))
    if unknown:
        raise ValueError(f"unknown baseline-row field(s) {_short(unknown)}")
    missing = [k for k in BASELINE_FIELDS if k not in d]
    if missing:
        raise ValueError(f"baseline row lacks field(s) {missing}")
    # identity fields a baseline does not keep: the decoder label stands in for the registry name
    return ResultRow(experiment="baseline", run="baseline", decoder_name=d["decoder"] or "?", **d)


def parse_rows(lines: Iterable[str], source: str = "<rows>") -> list[ResultRow]:
    rows = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(ResultRow.from_dict(json.loads(line), complete=True))
        except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
            raise ValueError(f"{source}:{lineno}: {one_line(e)}") from None
    return rows


def one_line(e: BaseException, limit: Optional[int] = 300, with_cause: bool = False) -> str:
    """An exception message as one line (what every CLI here prints for bad input), cut at `limit` characters
    (None: whole). `with_cause` appends the message of `e.__cause__` when it is not already in it (Hydra wraps the
    error that says what is wrong)."""
    msg = str(e)
    if with_cause and e.__cause__ is not None and str(e.__cause__) not in msg:
        msg = f"{msg}: {e.__cause__}"
    text = " ".join(msg.split()) or type(e).__name__
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


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
