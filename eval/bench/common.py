"""What the benchmarks in eval/bench share: the log-prob set they decode, one measured decode pass through a
harness adapter, and the run directory they write.

Every number comes from eval.metrics (Stopwatch: CUDA-synchronised wall time + CUDA-event time; MemoryProbe:
host RSS + CUDA allocator peak; word_error_stats: the one WER) and becomes a row only through
eval.results.measured_row / unavailable_row; tables are reports/ functions over those rows. A benchmark writes
a normal run directory (config.yaml, hyps.jsonl, results.jsonl, plus extra JSON files) under runs/bench/ by
default, so `python -m reports.cli runs/bench/<experiment>/<run>` regenerates its tables and `eval.gate` can
gate it.
"""
from __future__ import annotations

import dataclasses
import gc
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from eval.adapters.base import pop_stats
from eval.metrics import MemoryProbe, MemoryStats, Stopwatch, WerStats, environment_info, word_error_stats
from eval.results import RunDirectory, measured_row, unavailable_row
from reports.schema import ResultRow

BENCH_OUTPUT_DIR = Path("runs/bench")


@contextmanager
def environment(values: dict[str, str]):
    """`values` set in os.environ for the block (the decoders read their BEAMDEC_* switches on every call), then
    each variable restored, or removed if it was unset."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---------------------------------------------------------------------------------------------------------
# The log-prob set a benchmark decodes
# ---------------------------------------------------------------------------------------------------------


@dataclass
class LogProbSet:
    """Log-probs of one data set with what scoring needs: (B, T, V) natural-log posteriors on the host."""

    log_probs: torch.Tensor  # (B, T, V) float32
    lengths: torch.Tensor  # (B,) int64
    refs: list[str]
    durations: list[float]  # seconds of audio per utterance
    ids: list[str]
    tokens: list[str]  # column order, blank included
    blank_id: int
    kind: str = "char"
    dataset: str = "other"

    def __post_init__(self) -> None:
        if self.log_probs.dim() != 3:
            raise ValueError(f"log_probs must be (B, T, V), got shape {tuple(self.log_probs.shape)}")
        n = self.log_probs.shape[0]
        for name in ("lengths", "refs", "durations", "ids"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries for {n} utterances")
        if len(self.tokens) != self.log_probs.shape[2]:
            raise ValueError(f"tokens has {len(self.tokens)} entries for V={self.log_probs.shape[2]} columns")
        if not 0 <= self.blank_id < len(self.tokens):
            raise ValueError(f"blank_id {self.blank_id} outside [0, {len(self.tokens)})")

    def __len__(self) -> int:
        return int(self.log_probs.shape[0])

    @property
    def vocab_size(self) -> int:
        return int(self.log_probs.shape[2])

    def audio_seconds(self, n: Optional[int] = None) -> float:
        return float(sum(self.durations[:n]))

    def head(self, n: int) -> "LogProbSet":
        return dataclasses.replace(self, log_probs=self.log_probs[:n], lengths=self.lengths[:n], refs=self.refs[:n],
                                   durations=self.durations[:n], ids=self.ids[:n])

    def token_set(self):
        from recipes.tokens import TokenSet

        return TokenSet(tokens=list(self.tokens), blank_id=self.blank_id, kind=self.kind)

    def save(self, path: str | Path, packed: bool = False) -> None:
        """Plain tensors, strings and numbers only, so `load` reads it with torch.load(weights_only=True).

        packed=True stores only the valid frames, concatenated, as float16 ((sum(lengths), V); ~4x smaller than a
        padded float32 file, so a real-speech set fits the GPU host's carry limit); `load` restores the padded
        float32 (B, T, V) layout. float16 rounds the log-probs (relative error <= 2^-11): every decoder compared
        on a packed file reads the same rounded values."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        lp = self.log_probs
        if packed:
            lp = torch.cat([lp[i, : int(n)] for i, n in enumerate(self.lengths.tolist())]).to(torch.float16)
        torch.save(dict(lp=lp, packed=bool(packed), T=int(self.log_probs.shape[1]), len=self.lengths,
                        refs=list(self.refs), dur=[float(d) for d in self.durations],
                        ids=list(self.ids), tokens=list(self.tokens), blank_id=int(self.blank_id), kind=self.kind,
                        dataset=self.dataset), str(path))

    @classmethod
    def load(cls, path: str | Path) -> "LogProbSet":
        """Read a file written by `save` (or an older `--dump-lp` file with lp/len/refs/dur only). Never unpickles
        code: the file may come from anywhere."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"--lp-file {path} not found (write one with --dump-lp)")
        try:
            d = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch raises several types for foreign or corrupt files
            raise ValueError(f"--lp-file {path}: not a log-prob file ({type(e).__name__}: {str(e).splitlines()[0]})") \
                from None
        if not isinstance(d, dict) or not {"lp", "len", "refs", "dur"} <= set(d):
            raise ValueError(f"--lp-file {path}: expected a dict with lp, len, refs, dur")
        lp = d["lp"]
        if d.get("packed"):
            lp = cls._unpack(path, lp, d)
        if not isinstance(lp, torch.Tensor) or lp.dim() != 3:
            raise ValueError(f"--lp-file {path}: 'lp' must be a (B, T, V) tensor")
        V, n = int(lp.shape[2]), int(lp.shape[0])
        return cls(log_probs=lp.float(), lengths=torch.as_tensor(d["len"]).to(torch.int64), refs=list(d["refs"]),
                   durations=[float(x) for x in d["dur"]], ids=list(d.get("ids") or [f"utt{i:05d}" for i in range(n)]),
                   tokens=list(d.get("tokens") or [f"<t{i}>" for i in range(V)]),
                   blank_id=int(d.get("blank_id", V - 1)), kind=str(d.get("kind", "char")),
                   dataset=str(d.get("dataset", "other")))

    @staticmethod
    def _unpack(path: Path, lp, d: dict) -> torch.Tensor:
        """(sum(lengths), V) packed frames -> zero-padded float32 (B, T, V)."""
        lens = torch.as_tensor(d["len"]).to(torch.int64)
        T = d.get("T")
        if not isinstance(lp, torch.Tensor) or lp.dim() != 2 or lens.dim() != 1 or not isinstance(T, int) \
                or int(lens.sum()) != lp.shape[0] or bool((lens < 0).any()) or bool((lens > T).any()):
            raise ValueError(f"--lp-file {path}: a packed file needs 'lp' (sum(len), V), 'len' and 'T' >= max(len)")
        out = torch.zeros(len(lens), T, lp.shape[1])
        for i, row in enumerate(torch.split(lp.float(), lens.tolist())):
            out[i, : row.shape[0]] = row
        return out


def workload_set(scale: str, kind: str, set_name: str, max_utts: int) -> LogProbSet:
    """The first `max_utts` utterances of an embedded-workload set, through the harness's posterior simulator
    (blank last, the convention of the graphs recipes build)."""
    from eval.acoustic.base import Utterance
    from eval.acoustic.simulator import SimulatorSource
    from recipes.workload import prepare_workload

    wl = prepare_workload(scale)
    tokens = wl.token_set(kind, "last")
    utts = [Utterance(id=u["id"], text=u["text"], duration=float(u["duration"]))
            for u in wl.utterances(set_name)[:max_utts]]
    if not utts:
        raise ValueError(f"set {set_name!r} of the {scale} workload has no utterances")
    batch = next(iter(SimulatorSource(tokens, wl.simulator_config(set_name)).batches(utts, len(utts))))
    return LogProbSet(log_probs=batch.log_probs.float(), lengths=batch.lengths.to(torch.int64),
                      refs=[u.text for u in utts], durations=[u.duration for u in utts], ids=[u.id for u in utts],
                      tokens=list(tokens.tokens), blank_id=tokens.blank_id, kind=kind, dataset=set_name)


# ---------------------------------------------------------------------------------------------------------
# One measured pass
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Pass:
    """What one decoder did on one input: hypotheses of the last timed pass, its clock, memory and counters."""

    hyps: list[str]
    watch: Stopwatch
    memory: MemoryStats
    stats: dict = field(default_factory=dict)
    timed_passes: int = 1

    @property
    def seconds(self) -> float:
        """Mean wall seconds of one timed pass over the whole input."""
        return self.watch.wall_seconds / max(self.timed_passes, 1)

    @property
    def cuda_seconds(self) -> Optional[float]:
        c = self.watch.cuda_seconds
        return None if c is None else c / max(self.timed_passes, 1)


def decode_pass(decoder: Any, log_probs: torch.Tensor, lengths: torch.Tensor, batch: int, device: str,
                repeats: int = 1, warmup: bool = True, device_free_baseline_bytes: Optional[int] = None) -> Pass:
    """Decode `log_probs` (already on the decoder's device) in batches of `batch` through `decoder.decode`.

    One untimed warm-up pass first (extension load, graph upload, arena allocation), memory-probed like the
    timed passes because first-call allocations are the decoder's footprint; then `repeats` timed passes, each
    batch call inside eval.metrics.Stopwatch. Counters are those of the last timed pass.
    `device_free_baseline_bytes` (eval.metrics.cuda_free_bytes taken before the decoder was built) makes the
    probes report the device memory the decoder holds whatever its allocator (Riva's is not torch's)."""
    if batch <= 0:
        raise ValueError(f"batch size must be positive, got {batch}")
    n = int(log_probs.shape[0])

    def one_pass(watch: Optional[Stopwatch]) -> list[str]:
        out: list[str] = []
        for i in range(0, n, batch):
            lp, ln = log_probs[i : i + batch], lengths[i : i + batch]
            if watch is None:
                hyps = decoder.decode(lp, ln)
            else:
                with watch:
                    hyps = decoder.decode(lp, ln)
            if len(hyps) != len(lp):
                raise RuntimeError(f"decoder returned {len(hyps)} hypotheses for {len(lp)} utterances")
            out += [" ".join(h.words) for h in hyps]
        return out

    memory = MemoryStats(cuda_peak_bytes=0 if str(device).startswith("cuda") else None)
    if warmup:
        probe = MemoryProbe(device, device_free_baseline_bytes=device_free_baseline_bytes)
        with probe:
            one_pass(None)
        memory = memory.merge(probe.stats)
    watch = Stopwatch(device)
    hyps: list[str] = []
    stats: dict = {}
    for _ in range(max(repeats, 1)):
        pop_stats(decoder)
        probe = MemoryProbe(device, device_free_baseline_bytes=device_free_baseline_bytes)
        with probe:
            hyps = one_pass(watch)
        memory = memory.merge(probe.stats)
        stats = pop_stats(decoder)
    return Pass(hyps=hyps, watch=watch, memory=memory, stats=stats, timed_passes=max(repeats, 1))


def release_device_memory() -> None:
    """Drop what a finished decoder left in torch's caching allocator, so the next one's CUDA peak is its own."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


class MeasuredDecoder:
    """One decoder of a benchmark row, measured the one way the benchmarks measure (a `with` block): the log-probs
    made resident on `device` first, the device's free memory read, then `build(ctx)` builds the decoder -- so the
    memory columns are what the decoder holds on the device (graph upload included) whichever allocator it uses,
    the same for ours and a competitor -- and `decode(batch, repeats)` is decode_pass. On exit the decoder is closed
    when it can be (OASR holds device memory outside torch) and dropped, and torch's cache emptied, so the next
    decoder's numbers are its own. A machine without CUDA for a cuda row raises (the caller's unavailable row)."""

    def __init__(self, build, data: "LogProbSet", device: str, graph_dir: Optional[Path] = None):
        self._build, self.data, self.device, self.graph_dir = build, data, str(device), graph_dir
        self.decoder = self._lp = self._baseline = None

    def __enter__(self) -> "MeasuredDecoder":
        from eval.adapters.base import DecodingContext
        from eval.metrics import cuda_free_bytes

        cuda = self.device.startswith("cuda")
        if cuda and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device on this machine")
        ctx = DecodingContext(tokens=self.data.token_set(), device=self.device, graph_dir=self.graph_dir)
        self._lp = self.data.log_probs.to(self.device) if cuda else self.data.log_probs
        self._baseline = cuda_free_bytes(self.device) if cuda else None
        try:
            self.decoder = self._build(ctx)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def decode(self, batch: int, repeats: int = 1) -> Pass:
        return decode_pass(self.decoder, self._lp, self.data.lengths, batch, self.device, repeats=repeats,
                           device_free_baseline_bytes=self._baseline)

    def __exit__(self, *exc) -> None:
        close = getattr(self.decoder, "close", None)
        if callable(close):
            close()
        self.decoder = self._lp = None
        release_device_memory()


def reference_free(row: ResultRow) -> ResultRow:
    """A row of inputs without references (random log-probs of a kernel benchmark): WER is null, not 0."""
    return dataclasses.replace(row, wer=None)


# ---------------------------------------------------------------------------------------------------------
# The run a benchmark writes
# ---------------------------------------------------------------------------------------------------------


class BenchRun:
    """Rows, hypotheses and extra JSON of one benchmark run, written as a normal run directory.

    `checkpoint()` rewrites the whole run directory atomically (eval.results.RunDirectory), so a benchmark cut
    short by a deadline still leaves every configuration measured so far; `close()` is the last checkpoint."""

    def __init__(self, experiment: str, run: Optional[str], config: dict, output_dir: str | Path = BENCH_OUTPUT_DIR):
        from eval.results import check_name, timestamp_run_name

        self.output_dir = Path(output_dir)
        self.experiment = check_name(experiment, "experiment name")
        self.run = check_name(run, "run name") if run else timestamp_run_name(self.output_dir / experiment)
        self.config = dict(config)
        self.env = environment_info()
        self.rows: list[ResultRow] = []
        self.hyps: list[dict] = []
        self.extra: dict[str, Any] = {}
        self.path = self.output_dir / self.experiment / self.run

    def measured(self, *, decoder: str, decoder_name: str, device: str, dataset: str, wer: WerStats,
                 audio_seconds: float, decoder_seconds: float, references: bool = True, **kw) -> ResultRow:
        row = measured_row(experiment=self.experiment, run=self.run, decoder=decoder, decoder_name=decoder_name,
                           device=device, dataset=dataset, wer=wer, audio_seconds=audio_seconds,
                           decoder_seconds=decoder_seconds, env=self.env, **kw)
        if not references:
            row = reference_free(row)
        self.rows.append(row)
        return row

    def scored(self, *, decoder: str, decoder_name: str, device: str, data: LogProbSet, result: Pass,
               **kw) -> ResultRow:
        """A row for a pass over `data` (scored against its references; hypotheses kept for hyps.jsonl)."""
        wer = word_error_stats(data.refs, result.hyps)
        for uid, ref, hyp in zip(data.ids, data.refs, result.hyps):
            self.hyps.append({"decoder": decoder, "dataset": data.dataset, "id": uid, "ref": ref, "hyp": hyp})
        return self.measured(decoder=decoder, decoder_name=decoder_name, device=device, dataset=data.dataset,
                             wer=wer, audio_seconds=data.audio_seconds(), decoder_seconds=result.seconds,
                             decoder_cuda_seconds=result.cuda_seconds, frames=int(data.lengths.sum()),
                             memory=result.memory, stats=result.stats, **kw)

    def unavailable(self, *, decoder: str, decoder_name: str, device: str, reason: str,
                    params: Optional[dict] = None) -> ResultRow:
        row = unavailable_row(experiment=self.experiment, run=self.run, decoder=decoder, decoder_name=decoder_name,
                              device=device, reason=reason, env=self.env, params=params)
        self.rows.append(row)
        print(f"[{self.experiment}] {decoder} unavailable: {reason}", file=sys.stderr, flush=True)
        return row

    def checkpoint(self) -> Path:
        with RunDirectory(self.output_dir, self.experiment, self.run) as rd:
            rd.write_config({**self.config, "environment": self.env, "command": " ".join(sys.argv)})
            with rd.open_hyps() as f:
                import json

                for h in self.hyps:
                    f.write(json.dumps(h) + "\n")
            for name, obj in self.extra.items():
                rd.write_json(name, obj)
            rd.write_results(self.rows)
        return self.path

    def close(self) -> Path:
        path = self.checkpoint()
        print(f"run directory: {path}", flush=True)
        return path


def _isolated_child(conn, experiment: str, run_name: str, fn, args: tuple) -> None:
    try:
        run = BenchRun(experiment, run_name, config={})
        out = fn(run, *args)
        conn.send(("ok", run.rows, run.hyps, out))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which writes the unavailable row
        conn.send(("error", describe_error(e), None, None))


def run_isolated(run: BenchRun, fn, *args, crash_row: dict):
    """`fn(run, *args)` (a module-level function adding rows to a BenchRun) in a fresh spawned process: no
    decoder's process-wide state (worker threads, device flags, allocator pools) acts on another's measurement. The
    child's rows and hypotheses join `run`; returns fn's return value (picklable). A child that fails or dies becomes
    an unavailable row built from `crash_row` (decoder, decoder_name, device, params)."""
    import torch.multiprocessing as tmp

    mp = tmp.get_context("spawn")
    parent, child = mp.Pipe()
    p = mp.Process(target=_isolated_child, args=(child, run.experiment, run.run, fn, args))
    p.start()
    child.close()
    try:
        kind, rows_or_error, hyps, out = parent.recv()
    except EOFError:  # the child died without a word (a crash in a decoder's native code)
        p.join()
        kind, rows_or_error, hyps, out = "error", f"its process exited with status {p.exitcode}", None, None
    p.join()
    if kind != "ok":
        run.unavailable(reason=f"isolated run failed: {rows_or_error}", **crash_row)
        return None
    run.rows += rows_or_error
    run.hyps += hyps
    return out


def graph_dirs_arg(ap, specs) -> list[tuple[str, Path]]:
    """--graph-dir NAME=DIR values (repeatable) as (name, directory) pairs; a one-line argparse error for none, a
    missing name or '=', or a directory that does not exist."""
    if not specs:
        ap.error("give at least one --graph-dir NAME=DIR")
    out = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not Path(path).is_dir():
            ap.error(f"--graph-dir expects NAME=DIR with an existing directory, got {spec!r}")
        out.append((name, Path(path)))
    return out


def add_isolation_options(ap, what: str = "row") -> None:
    """--isolate / --in-process for a benchmark that measures decoders vs competitors (see run_isolated); the
    default (args.isolate None) is resolved by `isolation_default`."""
    iso = ap.add_mutually_exclusive_group()
    iso.add_argument("--isolate", dest="isolate", action="store_true", default=None,
                     help=f"each {what} in a fresh process (default with --device cuda): no decoder's process-wide "
                          "state (threads, device flags, allocator pools) acts on another's row")
    iso.add_argument("--in-process", dest="isolate", action="store_false", help=f"every {what} in this process")


def isolation_default(args) -> bool:
    """args.isolate as given, else isolated exactly when our decoder runs on cuda."""
    if args.isolate is None:
        args.isolate = args.device.startswith("cuda")
    return args.isolate


def describe_error(err: BaseException) -> str:
    """One line for an unavailable row: the exception's type and first line."""
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}"[:400]


def print_rows(rows: Sequence[ResultRow], pairs: Sequence[tuple[str, str, Sequence[str]]] = ()) -> None:
    """The run's tables, rendered by reports/: every measured row, then each (ours, theirs, by) side by side,
    then the decoders that could not run."""
    from dataclasses import fields as _fields

    from reports import tables

    row_fields = {f.name for f in _fields(ResultRow)}
    print(tables.results_table(rows))
    for ours, theirs, by in pairs:
        # only the rows that have every grouping coordinate (the CTC run's offline and streaming rows differ)
        subset = [r for r in rows if all(k in r.params or k in row_fields for k in by)]
        if any(r.ok and r.decoder_name == ours for r in subset):
            print()
            print(tables.side_by_side_table(subset, ours, theirs, by=list(by)))
    extra = tables.unavailable_table(rows)
    if extra:
        print()
        print(extra)
