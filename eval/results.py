"""Run directories: where every producer (the runner, every benchmark in eval/bench) writes its results.

    runs/<experiment>/<run>/config.yaml    resolved config + per-decoder configs + environment + command
    runs/<experiment>/<run>/hyps.jsonl     one line per (decoder, utterance)
    runs/<experiment>/<run>/results.jsonl  one reports.schema.ResultRow per line

A run is written into a hidden sibling directory and renamed into place only when it completed, so an
interrupted re-run never leaves new partial files beside old results (the old run stays whole until the new
one replaces it). Experiment and run names are single path components; a name that could escape
`output_dir` (`../x`, `/abs`, `a/b`) is refused.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import IO, Any, Iterable, Optional

from reports.schema import ResultRow, write_rows

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.,=+@-]{0,199}$")


def check_name(name: Any, what: str) -> str:
    """A run or experiment name: one path component of safe characters (Hydra sweep names included)."""
    s = str(name) if name is not None else ""
    if not _NAME.match(s) or s in (".", ".."):
        raise ValueError(
            f"{what} {name!r} is not a valid directory name (letters, digits and _ . , = + @ -, not starting with "
            f"'.' or '-', at most 200 characters; no path separators)"
        )
    return s


def _reservation(parent: Path, name: str) -> Path:
    return Path(parent) / f".{name}.reserved"


def timestamp_run_name(parent: Path) -> str:
    """A fresh timestamped run name under `parent`, reserved atomically (a hidden `.NAME.reserved` directory, removed
    when the run directory is first written): Hydra multirun jobs and parallel test workers start in the same second,
    and the run directory itself appears only when its run ends."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name, k = stamp, 1
    while True:
        if not (parent / name).exists():
            try:
                os.mkdir(_reservation(parent, name))
                return name
            except FileExistsError:
                pass
        name, k = f"{stamp}-{k}", k + 1


def _json_default(o: Any):
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "value"):  # enums
        return o.value
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


class RunDirectory:
    """Context manager for one run directory, written atomically.

        with RunDirectory("runs", "bench", "wfst_small") as rd:
            with rd.open_hyps() as f: ...
            rd.write_config({...})
            rd.write_results(rows)
        # rd.final_path now holds the complete run; on an exception nothing of the new run remains
    """

    def __init__(self, output_dir: str | Path, experiment: str, run: Optional[str] = None):
        check_name(experiment, "experiment name")
        self.parent = Path(output_dir) / experiment
        self.run = check_name(run, "run name") if run else timestamp_run_name(self.parent)
        self.experiment = experiment
        self.final_path = self.parent / self.run
        self.path = self.parent / f".{self.run}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._results_written = False

    def __enter__(self) -> "RunDirectory":
        self.parent.mkdir(parents=True, exist_ok=True)
        self.path.mkdir()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self._finish(exc_type is not None)
        finally:  # written or given up: the name's reservation (timestamp_run_name) is no longer needed
            shutil.rmtree(_reservation(self.parent, self.run), ignore_errors=True)

    def _finish(self, failed: bool) -> None:
        if failed:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        if not self._results_written:
            shutil.rmtree(self.path, ignore_errors=True)
            raise RuntimeError(f"run {self.final_path} finished without results.jsonl; nothing was written")
        trash = None
        if self.final_path.exists():
            trash = self.parent / f".{self.run}.replaced-{uuid.uuid4().hex[:8]}"
            os.rename(self.final_path, trash)
        os.rename(self.path, self.final_path)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)

    # ------------------------------------------------------------------ files
    def open_hyps(self) -> IO[str]:
        return open(self.path / "hyps.jsonl", "w", encoding="utf-8")

    def write_config(self, resolved: dict) -> None:
        from omegaconf import OmegaConf

        plain = json.loads(json.dumps(resolved, default=_json_default))
        (self.path / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(plain)), encoding="utf-8")

    def write_results(self, rows: Iterable[ResultRow]) -> None:
        write_rows(self.path / "results.jsonl", rows)
        self._results_written = True

    def write_output_manifests(self) -> list[Path]:
        """NeMo-style output manifests (`manifests/<dataset>/<decoder>.jsonl`) from the hyps.jsonl written so far."""
        if hyps_path(self.path) is None:
            return []
        with open_hyps(self.path) as f:
            return write_output_manifests(self.path, f)

    def write_json(self, name: str, obj: Any) -> None:
        """An extra file of the run (e.g. a benchmark's per-shape detail); `name` is one path component."""
        check_name(name, "file name")
        (self.path / name).write_text(json.dumps(obj, indent=1, default=_json_default) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------
# Hypothesis files: hyps.jsonl as written, or hyps.jsonl.gz (committed evidence is stored compressed, so the
# working tree stays small enough to travel to the GPU host beside the wheels)
# ---------------------------------------------------------------------------------------------------------
HYPS_NAMES = ("hyps.jsonl", "hyps.jsonl.gz")


def hyps_path(run_dir: str | Path) -> Optional[Path]:
    """The run directory's hypothesis file (plain or gzip-compressed), None when it has none."""
    for name in HYPS_NAMES:
        if (Path(run_dir) / name).is_file():
            return Path(run_dir) / name
    return None


def open_hyps(run_dir: str | Path) -> IO[str]:
    """The run's hypothesis lines for reading, whichever of hyps.jsonl / hyps.jsonl.gz it holds."""
    path = hyps_path(run_dir)
    if path is None:
        raise FileNotFoundError(f"{run_dir}: no hyps.jsonl or hyps.jsonl.gz")
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def compress_hyps(root: str | Path, min_bytes: int = 0) -> list[Path]:
    """gzip every hyps.jsonl under `root` of at least `min_bytes` into hyps.jsonl.gz (deterministic: no name or time
    in the header) and remove the plain file; returns the files written."""
    import gzip

    out = []
    for path in sorted(Path(root).rglob("hyps.jsonl")):
        if path.stat().st_size < min_bytes:
            continue
        target = path.with_name("hyps.jsonl.gz")
        with open(path, "rb") as src, open(target, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
                shutil.copyfileobj(src, gz)
        path.unlink()
        out.append(target)
    return out


# ---------------------------------------------------------------------------------------------------------
# Rows: the one place a measurement becomes a ResultRow (the runner and every benchmark call this)
# ---------------------------------------------------------------------------------------------------------


def measured_row(
    *,
    experiment: str,
    run: str,
    decoder: str,
    decoder_name: str,
    device: str,
    dataset: str,
    wer,  # eval.metrics.WerStats
    audio_seconds: float,
    decoder_seconds: float,
    env: dict,
    frames: int = 0,
    decoder_cuda_seconds: Optional[float] = None,
    acoustic_seconds: float = 0.0,
    transfer_seconds: float = 0.0,
    memory=None,  # eval.metrics.MemoryStats
    stats: Optional[dict] = None,
    batch_size: int = 0,
    warmup_batches: int = 0,
    decoder_config: Optional[dict] = None,
    boost_value: Optional[float] = None,
    boundary: str = "api",
    run_mate: Optional[str] = None,
    params: Optional[dict] = None,
    acoustic_stage_peak_bytes: Optional[dict] = None,
    end_to_end_seconds: Optional[float] = None,
    char_counts: Optional[tuple[int, int]] = None,
    wer_ci: Optional[dict] = None,
) -> ResultRow:
    """A successful (decoder, dataset) measurement. RTFx from eval.metrics.rtfx: decoder-only over
    `decoder_seconds`, end-to-end over acoustic + host->device transfer + decoder seconds, or over
    `end_to_end_seconds` when given (a sharded run's wall time is its slowest rank's, not a sum of stage maxima)."""
    from eval.metrics import MemoryStats, hardware_key, rtfx

    memory = memory or MemoryStats()
    stats = dict(stats or {})
    e2e = acoustic_seconds + transfer_seconds + decoder_seconds if end_to_end_seconds is None else end_to_end_seconds
    return ResultRow(
        experiment=experiment, run=run, decoder=decoder, decoder_name=decoder_name, device=device,
        dataset=dataset, boost_value=boost_value,
        utterances=wer.utterances, audio_seconds=float(audio_seconds), frames=int(frames),
        batch_size=int(batch_size), warmup_batches=int(warmup_batches),
        wer=wer.wer, substitutions=wer.substitutions, deletions=wer.deletions, insertions=wer.insertions,
        hits=wer.hits, ref_words=wer.ref_words, sentence_errors=wer.sentence_errors,
        char_errors=None if char_counts is None else int(char_counts[0]),
        ref_chars=None if char_counts is None else int(char_counts[1]),
        wer_ci=dict(wer_ci or {}),
        decoder_seconds=float(decoder_seconds), decoder_cuda_seconds=decoder_cuda_seconds,
        acoustic_seconds=float(acoustic_seconds), end_to_end_seconds=float(e2e),
        rtfx_decoder=_finite_or_none(rtfx(audio_seconds, decoder_seconds)),
        rtfx_end_to_end=_finite_or_none(rtfx(audio_seconds, e2e)),
        boundary=boundary,
        peak_rss_bytes=memory.peak_rss_bytes, rss_increase_bytes=memory.rss_increase_bytes,
        cuda_peak_bytes=memory.cuda_peak_bytes, cuda_device_used_bytes=memory.cuda_device_used_bytes,
        acoustic_stage_peak_bytes={k: int(v) for k, v in (acoustic_stage_peak_bytes or {}).items()},
        overflow_count=int(stats.get("overflow_count", 0)), rescued_count=int(stats.get("rescued_count", 0)),
        decoder_stats=stats,
        hardware_key=hardware_key(env, device), environment=dict(env), decoder_config=dict(decoder_config or {}),
        run_mate=run_mate, params=dict(params or {}),
    )


def _finite_or_none(v: float) -> Optional[float]:
    """RTFx over a zero wall time is not a measurement (the row says null rather than inf)."""
    import math

    return v if math.isfinite(v) else None


def unavailable_row(*, experiment: str, run: str, decoder: str, decoder_name: str, device: str, reason: str,
                    env: dict, boost_value: Optional[float] = None, params: Optional[dict] = None) -> ResultRow:
    return ResultRow(
        experiment=experiment, run=run, decoder=decoder, decoder_name=decoder_name, device=device,
        status="unavailable", reason=str(reason) or "unknown", boost_value=boost_value, environment=dict(env),
        params=dict(params or {}),
    )


def _fold(parts: list[ResultRow]):
    """What every merge of rows sums or maxes the same way: WER parts summed, memory peaks maxed, decoder counters
    summed, acoustic stage peaks maxed -> (WerStats, MemoryStats, stats, stage_peaks)."""
    from eval.metrics import MemoryStats, WerStats

    wer = sum((WerStats(substitutions=p.substitutions, deletions=p.deletions, insertions=p.insertions, hits=p.hits,
                        utterances=p.utterances, sentence_errors=p.sentence_errors) for p in parts), WerStats())
    memory = MemoryStats()
    stats: dict = {}
    stage_peaks: dict = {}
    for p in parts:
        memory = memory.merge(MemoryStats(p.peak_rss_bytes or 0, p.rss_increase_bytes or 0, p.cuda_peak_bytes,
                                           p.cuda_device_used_bytes))
        for k, v in p.decoder_stats.items():
            stats[k] = stats.get(k, 0) + v
        for k, v in p.acoustic_stage_peak_bytes.items():
            stage_peaks[k] = max(int(v), stage_peaks.get(k, 0))
    return wer, memory, stats, stage_peaks


def _char_counts(parts: list[ResultRow]) -> Optional[tuple[int, int]]:
    """Summed CER parts, or None when any part lacks them."""
    if any(p.char_errors is None or p.ref_chars is None for p in parts):
        return None
    return sum(p.char_errors for p in parts), sum(p.ref_chars for p in parts)


def combined_row(parts: list[ResultRow], dataset: str = "all") -> ResultRow:
    """One decoder's rows over several datasets of the same run folded into one row: WER parts, audio,
    frames, times and counters summed, memory peaks maxed. Built through `measured_row` like every row."""
    if not parts:
        raise ValueError("combined_row: no rows to combine")
    first = parts[0]
    for p in parts:
        if not p.ok or p.decoder != first.decoder or p.run != first.run:
            raise ValueError(f"combined_row: rows of one decoder's successful measurements of one run only, got "
                             f"({p.decoder}, {p.dataset}, {p.status}) beside ({first.decoder}, {first.run})")
    wer, memory, stats, stage_peaks = _fold(parts)
    cuda_seconds = [p.decoder_cuda_seconds for p in parts]
    decoder_seconds = sum(p.decoder_seconds or 0.0 for p in parts)
    acoustic_seconds = sum(p.acoustic_seconds or 0.0 for p in parts)
    e2e = sum(p.end_to_end_seconds or 0.0 for p in parts)
    return measured_row(
        experiment=first.experiment, run=first.run, decoder=first.decoder, decoder_name=first.decoder_name,
        device=first.device, dataset=dataset, wer=wer, audio_seconds=sum(p.audio_seconds for p in parts),
        decoder_seconds=decoder_seconds, env=first.environment, frames=sum(p.frames for p in parts),
        decoder_cuda_seconds=None if any(c is None for c in cuda_seconds) else sum(cuda_seconds),
        acoustic_seconds=acoustic_seconds, transfer_seconds=max(e2e - acoustic_seconds - decoder_seconds, 0.0),
        memory=memory, stats=stats, batch_size=first.batch_size, warmup_batches=first.warmup_batches,
        decoder_config=first.decoder_config, boost_value=first.boost_value, boundary=first.boundary,
        run_mate=first.run_mate, params=first.params, acoustic_stage_peak_bytes=stage_peaks,
        char_counts=_char_counts(parts),
    )


def sharded_hardware_key(key: Optional[str], world_size: int) -> str:
    """The hardware a sharded run's timing depends on: the device kind and how many ranks shared the work (an
    8-rank RTFx is not comparable with a 1-rank baseline, so the gate skips timing checks across world sizes)."""
    return f"{key} x{int(world_size)} ranks"


def rank_row(row: ResultRow, rank: int, world_size: int) -> ResultRow:
    """One rank's row of a sharded run: `params["rank"]` tells it apart from the merged row (the gate and the
    tables key rows on (decoder, dataset, params), so the merged row keeps the single-process key)."""
    import dataclasses

    if "rank" in row.params:
        raise ValueError(f"rank_row: {row.label} ({row.dataset}) is already a rank's row")
    return dataclasses.replace(row, params={**row.params, "rank": int(rank)},
                               hardware_key=sharded_hardware_key(row.hardware_key, world_size))


def sharded_row(parts: list[ResultRow], environment: Optional[dict] = None) -> ResultRow:
    """One (decoder, dataset) measurement of a sharded run from its ranks' rows (one per rank, in rank order):
    WER parts, audio, frames and counters summed, so the WER is the corpus WER of every hypothesis; times are the
    slowest rank's, since the run ends when its slowest rank does (aggregate RTFx = total audio / that wall
    time, through eval.metrics.rtfx in `measured_row`); memory peaks maxed (per process). `environment`: the
    merged row's (rank 0's, with the world size) instead of the first part's."""
    if not parts:
        raise ValueError("sharded_row: no rows to merge")
    first = parts[0]
    for p in parts:
        if not p.ok or (p.decoder, p.dataset, p.run) != (first.decoder, first.dataset, first.run):
            raise ValueError(f"sharded_row: rows of one decoder's successful measurements of one dataset and run "
                             f"only, got ({p.decoder}, {p.dataset}, {p.status}) beside ({first.decoder}, "
                             f"{first.dataset}, {first.run})")
    wer, memory, stats, stage_peaks = _fold(parts)
    cuda_seconds = [p.decoder_cuda_seconds for p in parts]
    devices = {p.device for p in parts}
    # ranks on cuda:0, cuda:1, ... are one "cuda" run
    device = first.device if len(devices) == 1 else ("cuda" if all(d.startswith("cuda") for d in devices)
                                                     else ",".join(sorted(devices)))
    params = {k: v for k, v in first.params.items() if k != "rank"}
    env = dict(environment if environment is not None else first.environment)
    row = measured_row(
        experiment=first.experiment, run=first.run, decoder=first.decoder, decoder_name=first.decoder_name,
        device=device, dataset=str(first.dataset), wer=wer, audio_seconds=sum(p.audio_seconds for p in parts),
        decoder_seconds=max(p.decoder_seconds or 0.0 for p in parts), env=env,
        frames=sum(p.frames for p in parts),
        decoder_cuda_seconds=None if any(c is None for c in cuda_seconds) else max(cuda_seconds),
        acoustic_seconds=max(p.acoustic_seconds or 0.0 for p in parts),
        end_to_end_seconds=max(p.end_to_end_seconds or 0.0 for p in parts),
        memory=memory, stats=stats, batch_size=first.batch_size, warmup_batches=first.warmup_batches,
        decoder_config=first.decoder_config, boost_value=first.boost_value, boundary=first.boundary,
        run_mate=first.run_mate, params=params, acoustic_stage_peak_bytes=stage_peaks,
        char_counts=_char_counts(parts),
    )
    import dataclasses

    return dataclasses.replace(row, hardware_key=sharded_hardware_key(row.hardware_key, len(parts)))


def hypothesis_record(*, decoder: str, dataset: str, utterance_id: str, ref: str, hyp: str, score: float,
                      tokens: Iterable[int], audio_filepath: Optional[str] = None, duration: Optional[float] = None,
                      errors: Optional[tuple[int, int]] = None, char_errors: Optional[tuple[int, int]] = None,
                      timesteps_s: Optional[list] = None, extra: Optional[dict] = None) -> str:
    """One hyps.jsonl line: what a run's WER is recomputed from (decoder, dataset, id, ref, hyp, score, tokens), with
    NeMo's manifest fields (audio_filepath, duration, text = the reference, pred_text = the hypothesis), the
    utterance's own WER and CER and their parts (`errors`, `ref_words`, `char_errors`, `ref_chars`), and the emitted
    tokens' times in seconds where the decoder tracks them (`token_times_s`); `extra` adds optional per-hypothesis fields
    (word times, confidences, n-best list; eval.runner.hypothesis_extra) and never overrides a core field."""
    rec = {"decoder": decoder, "dataset": dataset, "id": utterance_id, "audio_filepath": audio_filepath,
           "duration": None if duration is None else float(duration), "text": ref, "pred_text": hyp,
           "ref": ref, "hyp": hyp, "score": float(score), "tokens": [int(t) for t in tokens]}
    if errors is not None:
        rec.update(wer=errors[0] / max(errors[1], 1), errors=int(errors[0]), ref_words=int(errors[1]))
    if char_errors is not None:
        rec.update(cer=char_errors[0] / max(char_errors[1], 1), char_errors=int(char_errors[0]),
                   ref_chars=int(char_errors[1]))
    if timesteps_s is not None:
        rec["token_times_s"] = [round(float(t), 4) for t in timesteps_s]
    for k, v in (extra or {}).items():
        rec.setdefault(k, v)
    return json.dumps(rec) + "\n"


_UNSAFE_FILE = re.compile(r"[^A-Za-z0-9_.,=+@-]")


def output_manifest_name(label: str) -> str:
    """A decoder label as a file name (`wfst@cuda[boost=2]` -> `wfst@cuda_boost=2_`)."""
    name = _UNSAFE_FILE.sub("_", label).lstrip(".-") or "decoder"
    return name[:200]


def write_output_manifests(run_path: Path, hyps_lines: Iterable[str]) -> list[Path]:
    """NeMo-style output manifests from a run's hyps.jsonl lines: `manifests/<dataset>/<decoder>.jsonl`, one per
    (decoder, dataset), in the order the lines come (manifest order), each line NeMo's fields (audio_filepath,
    duration, text, pred_text) plus id, per-utterance wer/cer, score and token times where present."""
    keep = ("audio_filepath", "duration", "text", "pred_text", "id", "wer", "cer", "score", "token_times_s")
    out: dict[tuple[str, str], list[str]] = {}
    for line in hyps_lines:
        rec = json.loads(line)
        out.setdefault((rec["decoder"], rec["dataset"]), []).append(
            json.dumps({k: rec[k] for k in keep if k in rec}) + "\n")
    written = []
    for (decoder, dataset), lines in out.items():
        folder = run_path / "manifests" / output_manifest_name(dataset)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{output_manifest_name(decoder)}.jsonl"
        path.write_text("".join(lines), encoding="utf-8")
        written.append(path)
    return written
