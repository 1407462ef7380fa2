"""The evaluation runner: datasets -> acoustic batches -> every decoder -> WER / RTFx / memory -> run dir.

One pass per dataset: the acoustic source produces each batch once and every decoder decodes it in
turn (so the acoustic work is shared and timed once). Per decoder, the first `warmup_batches` batches
are decoded once untimed before their timed decode (lazy CUDA init, extension loading, allocator
growth stay out of RTFx). Writes

    runs/<experiment>/<run>/config.yaml    resolved config + per-decoder configs + environment
    runs/<experiment>/<run>/hyps.jsonl     one line per (decoder, utterance): id, ref, hyp, score, tokens
    runs/<experiment>/<run>/results.jsonl  one line per (decoder, dataset) + an "all" row per decoder

Results-row schema (`RESULT_FIELDS`): see `make_result_row`.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from decoders.types import Hypothesis
from eval.acoustic import build_acoustic_source
from eval.acoustic.base import Utterance
from eval.adapters.base import ADAPTER_MODULES, DecodingContext, build_decoder
from eval.config import (
    BoostMode,
    decoder_labels,
    resolve_decoder_config,
    split_decoder_label,
    validate_config,
)
from eval.metrics import (
    MemoryProbe,
    MemoryStats,
    Stopwatch,
    WerStats,
    environment_info,
    hardware_key,
    rtfx,
    word_error_stats,
)

log = logging.getLogger(__name__)

RESULTS_SCHEMA_VERSION = 1
# decoders that read a decoding graph (TLG/HLG); the runner builds graphs only when one of them runs
GRAPH_DECODERS = {"k2py", "k2", "kaldi", "riva", "wfst"}


# ---------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------


def load_manifest(path: str | Path, max_utterances: Optional[int] = None) -> list[Utterance]:
    """NeMo manifest JSONL ({"audio_filepath", "duration", "text"[, "id"]}) -> utterances."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"manifest not found: {path}")
    utts = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                utt_id = str(row.get("id") or Path(row.get("audio_filepath") or f"utt{lineno}").stem)
                utts.append(
                    Utterance(
                        id=utt_id,
                        text=str(row["text"]),
                        duration=float(row["duration"]),
                        audio_filepath=row.get("audio_filepath"),
                    )
                )
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}:{lineno}: not a manifest line with text and duration ({e})") from None
            if max_utterances is not None and len(utts) >= max_utterances:
                break
    return utts


def resolve_device(device: Optional[str]) -> str:
    if device in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} requested but CUDA is not available on this machine")
    return str(device)


def graph_dir_for(cfg: DictConfig) -> Path:
    if cfg.graph.graph_dir:
        return Path(cfg.graph.graph_dir)
    kind, blank = _enum_value(cfg.model.token_kind), _enum_value(cfg.model.blank)
    return Path(cfg.graph.root) / str(cfg.data.scale) / f"{kind}_blank{blank}" / _enum_value(cfg.graph.topology)


def _enum_value(v: Any) -> str:
    return str(getattr(v, "value", v))


def prepare_graphs(cfg: DictConfig, workload: Any, graph_dir: Path, tokens: Any = None) -> Optional[str]:
    """Make sure `graph_dir` holds graphs for this workload's LM and token set: build them when missing,
    rebuild (force) when stale, using `recipes.build_graphs`. Returns None when usable graphs are there,
    else the reason (graph decoders are then listed as unavailable with it)."""
    arpa_path = _first_path(cfg.data.arpa_path, workload and workload.arpa_path)
    exists = (graph_dir / "graph_info.json").is_file()
    stale = graph_mismatch(graph_dir, arpa_path, tokens) if exists else None
    if exists and stale is None:
        return None
    what = f"graphs in {graph_dir} are stale ({stale})" if stale else f"no graphs at {graph_dir}"
    if not cfg.graph.build_if_missing:
        return f"{what} and graph.build_if_missing=false"
    try:
        from recipes.build_graphs import build_graphs
    except ImportError as e:
        return f"{what} and recipes.build_graphs is not importable ({e})"
    if workload is None:
        return f"{what}, and building them needs the synthetic workload (or set graph.graph_dir)"
    import inspect

    kwargs = dict(
        workload=workload,
        scale=str(cfg.data.scale),
        token_kind=_enum_value(cfg.model.token_kind),
        blank=_enum_value(cfg.model.blank),
        topologies=[_enum_value(cfg.graph.topology)],
        out_root=Path(cfg.graph.root),
        force=bool(stale),
    )
    params = inspect.signature(build_graphs).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    log.info("%s: building them (minutes at the first run, cached afterwards)", what)
    build_graphs(**kwargs)
    if not (graph_dir / "graph_info.json").is_file():
        return f"recipes.build_graphs ran but {graph_dir}/graph_info.json is missing"
    return graph_mismatch(graph_dir, arpa_path, tokens)


def _sha256_16(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def graph_mismatch(graph_dir: Path, arpa_path: Optional[Path], tokens: Any = None) -> Optional[str]:
    """Why graph_dir does not fit (another token set, another LM file, or the same LM path with other
    contents: graph_info.json's sources), else None. Graph directories are keyed by scale and token set,
    not by workload copy or generator version, so a graph must never be reused silently."""
    info_path = graph_dir / "graph_info.json"
    if not info_path.is_file():
        return None
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        return f"unreadable {info_path}: {e}"
    if tokens is not None:
        want = (tokens.kind, tokens.blank_id, tokens.vocab_size)
        have = (info.get("token_kind", want[0]), info.get("blank_id", want[1]), info.get("vocab_size", want[2]))
        if have != want:
            return f"built for tokens (kind, blank, V)={have}, the acoustic source has {want}"
    sources = info.get("sources", {})
    if tokens is not None and sources.get("tokens_sha256"):
        import hashlib

        digest = hashlib.sha256("\n".join(tokens.tokens).encode()).hexdigest()[:16]
        if digest != sources["tokens_sha256"]:
            return "built for another token inventory (tokens_sha256 differs: e.g. a retrained BPE model)"
    if arpa_path is not None and sources.get("arpa"):
        if Path(sources["arpa"]).resolve() != Path(arpa_path).resolve():
            return f"built from {sources['arpa']}, not {arpa_path}"
        sha = sources.get("arpa_sha256")
        if sha and Path(arpa_path).is_file() and _sha256_16(Path(arpa_path)) != sha[:16]:
            return f"{arpa_path} changed since the graphs were built"
    return None


def _read_words(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.split()[0] for line in f if line.strip()]


def make_boosts(cfg: DictConfig, utterances: Sequence[Utterance], value: float) -> Optional[list[dict]]:
    """Per-utterance {word: boost} dicts for one boost value, or None when boosting is off."""
    from eval.metrics import normalize_text

    mode = BoostMode(_enum_value(cfg.boost.mode))
    if mode == BoostMode.none:
        return None
    if mode == BoostMode.words:
        words = list(cfg.boost.words) + (_read_words(Path(cfg.boost.words_file)) if cfg.boost.words_file else [])
        table = {w: float(value) for w in words}
        return [dict(table) for _ in utterances]
    if mode == BoostMode.test_set_words:
        words = sorted({w for u in utterances for w in normalize_text(u.text).split()})
        table = {w: float(value) for w in words}
        return [dict(table) for _ in utterances]
    # per_utterance_file: {"id": ..., "boosts": {word: value}}; `value` scales the file's values
    per_utt: dict[str, dict] = {}
    with open(cfg.boost.per_utterance_file, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                per_utt[str(row["id"])] = {w: float(v) * float(value) for w, v in row["boosts"].items()}
    return [per_utt.get(u.id, {}) for u in utterances]


def boost_values(cfg: DictConfig) -> list[Optional[float]]:
    if _enum_value(cfg.boost.mode) == BoostMode.none.value:
        return [None]
    return [float(v) for v in cfg.boost.sweep] or [float(cfg.boost.value)]


# ---------------------------------------------------------------------------------------------------------
# Decoder runs
# ---------------------------------------------------------------------------------------------------------


@dataclass
class DecoderRun:
    """One (decoder, device, boost value) being evaluated, and its accumulators for the current dataset."""

    label: str
    name: str
    device: str
    config: dict
    decoder: Any = None
    boost_value: Optional[float] = None
    unavailable_reason: Optional[str] = None
    # per-dataset accumulators
    decode_watch: Optional[Stopwatch] = None
    transfer_seconds: float = 0.0
    memory: MemoryStats = field(default_factory=MemoryStats)
    stats: dict = field(default_factory=dict)  # summed pop_stats() counters (overflow_count, ...)
    refs: list = field(default_factory=list)
    hyps: list = field(default_factory=list)

    def reset(self) -> None:
        self.decode_watch = Stopwatch(self.device)
        self.transfer_seconds = 0.0
        self.memory = MemoryStats()
        self.stats = {}
        self.refs, self.hyps = [], []


def _describe_unavailable(name: str, err: BaseException) -> str:
    module = ADAPTER_MODULES.get(name, "?")
    if isinstance(err, ModuleNotFoundError) and err.name == module:
        return f"adapter module {module} is not in this tree yet"
    return f"{type(err).__name__}: {err}"


def build_decoder_runs(
    cfg: DictConfig, base_ctx: DecodingContext, skip_unavailable: bool, graph_reason: Optional[str] = None
) -> list[DecoderRun]:
    runs: list[DecoderRun] = []
    default_device = resolve_device(cfg.experiment.device)
    for label in decoder_labels(cfg):
        name, device = split_decoder_label(label)
        device = device or default_device
        dcfg = resolve_decoder_config(name, cfg)
        run = DecoderRun(label=label, name=name, device=device, config=OmegaConf.to_container(dcfg, resolve=True))
        try:
            if graph_reason is not None and name in GRAPH_DECODERS:
                raise FileNotFoundError(graph_reason)
            device = resolve_device(device)
            ctx = DecodingContext(**{**base_ctx.__dict__, "device": device})
            run.decoder = build_decoder(name, dcfg, ctx)
        except Exception as e:  # noqa: BLE001 - any build failure means "not available here"
            if not skip_unavailable:
                raise
            run.unavailable_reason = _describe_unavailable(name, e)
            log.warning("decoder %s unavailable: %s", label, run.unavailable_reason)
        runs.append(run)
    # expand boost sweep
    values = boost_values(cfg)
    if values == [None]:
        return runs
    expanded = []
    for r in runs:
        for v in values:
            expanded.append(
                DecoderRun(
                    label=f"{r.label}[boost={v:g}]", name=r.name, device=r.device, config=r.config,
                    decoder=r.decoder, boost_value=v, unavailable_reason=r.unavailable_reason,
                )
            )
    return expanded


def _pop_stats(decoder: Any) -> dict:
    """Counters since the last call from `decoder.pop_stats()` when the decoder has it (e.g.
    {"overflow_count": n, "partial_count": m}); numeric values only."""
    pop = getattr(decoder, "pop_stats", None)
    if not callable(pop):
        return {}
    return {k: v for k, v in (pop() or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def hypothesis_text(h: Hypothesis, tokens) -> str:
    if h.words:
        return " ".join(h.words)
    return tokens.decode(h.tokens) if h.tokens else ""


# ---------------------------------------------------------------------------------------------------------
# Results rows
# ---------------------------------------------------------------------------------------------------------


def _max_merge(into: dict, *others: dict) -> dict:
    """Per-key maximum of peak-memory dicts (stage name -> bytes)."""
    out = dict(into)
    for other in others:
        for k, v in (other or {}).items():
            out[k] = max(int(v), out.get(k, 0))
    return out


def make_result_row(
    *,
    experiment: str,
    run: str,
    run_: DecoderRun,
    dataset: str,
    wer: WerStats,
    audio_seconds: float,
    frames: int,
    decoder_seconds: float,
    decoder_cuda_seconds: Optional[float],
    acoustic_seconds: float,
    transfer_seconds: float,
    memory: MemoryStats,
    stats: dict,
    env: dict,
    batch_size: int,
    warmup_batches: int,
    acoustic_stage_peak_bytes: Optional[dict] = None,
) -> dict:
    e2e_seconds = acoustic_seconds + transfer_seconds + decoder_seconds
    return {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "status": "ok",
        "experiment": experiment,
        "run": run,
        "decoder": run_.label,
        "decoder_name": run_.name,
        "device": run_.device,
        "boost_value": run_.boost_value,
        "dataset": dataset,
        "utterances": wer.utterances,
        "audio_seconds": audio_seconds,
        "frames": frames,
        "wer": wer.wer,
        "substitutions": wer.substitutions,
        "deletions": wer.deletions,
        "insertions": wer.insertions,
        "hits": wer.hits,
        "ref_words": wer.ref_words,
        "sentence_errors": wer.sentence_errors,
        "decoder_seconds": decoder_seconds,
        "decoder_cuda_seconds": decoder_cuda_seconds,
        "acoustic_seconds": acoustic_seconds,
        "end_to_end_seconds": e2e_seconds,
        "rtfx_decoder": rtfx(audio_seconds, decoder_seconds),
        "rtfx_end_to_end": rtfx(audio_seconds, e2e_seconds),
        "peak_rss_bytes": memory.peak_rss_bytes,
        "rss_increase_bytes": memory.rss_increase_bytes,
        "cuda_peak_bytes": memory.cuda_peak_bytes,
        # peak CUDA memory of each acoustic stage (features, encoder, ...) over the dataset, when the source
        # measures it (NeMo); the acoustic model's memory is shared by every decoder row of the dataset
        "acoustic_stage_peak_bytes": dict(acoustic_stage_peak_bytes or {}),
        "overflow_count": int(stats.get("overflow_count", 0)),
        "decoder_stats": dict(stats),
        "batch_size": batch_size,
        "warmup_batches": warmup_batches,
        "hardware_key": hardware_key(env, run_.device),
        "environment": env,
        "decoder_config": run_.config,
    }


def unavailable_row(experiment: str, run: str, r: DecoderRun, env: dict) -> dict:
    return {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "status": "unavailable",
        "experiment": experiment,
        "run": run,
        "decoder": r.label,
        "decoder_name": r.name,
        "device": r.device,
        "boost_value": r.boost_value,
        "dataset": None,
        "reason": r.unavailable_reason,
        "environment": env,
    }


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------


@dataclass
class RunOutput:
    run_dir: Path
    rows: list[dict]
    unavailable: dict[str, str]  # label -> reason


def _load_workload(cfg: DictConfig):
    from recipes.workload import prepare_workload

    kwargs = {"scale": str(cfg.data.scale)}
    if cfg.data.workload_root:
        kwargs["root"] = cfg.data.workload_root
    import inspect

    params = inspect.signature(prepare_workload).parameters
    if "root" in kwargs and "root" not in params:
        kwargs["cache_dir" if "cache_dir" in params else "root"] = kwargs.pop("root")
    return prepare_workload(**kwargs)


def run_experiment(cfg: DictConfig, workload: Any = None, source_factory: Any = None) -> RunOutput:
    """Run the configured decoders over the configured datasets; write and return the results.

    `workload`: an already prepared `recipes.workload.Workload` (tests pass a small fake); by default it
    is prepared (generated or loaded from its cache) from `data.scale`.
    `source_factory(cfg, dataset=, workload=, tokens=)`: replaces the `model.source` registry lookup
    (tests, notebooks).
    """
    cfg = validate_config(cfg)
    exp = cfg.experiment
    run_name = exp.run
    if not run_name:  # timestamped; never reuse a directory (Hydra multirun jobs can start in the same second)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_name, k = stamp, 1
        while (Path(exp.output_dir) / exp.name / run_name).exists():
            run_name, k = f"{stamp}-{k}", k + 1
    run_dir = Path(exp.output_dir) / exp.name / run_name
    env = environment_info()

    # ---- data, tokens, graphs ----
    uses_workload = not cfg.data.manifests
    if workload is None and (uses_workload or _enum_value(cfg.model.source) == "simulator"):
        workload = _load_workload(cfg)
    if uses_workload:
        missing = [s for s in cfg.data.sets if s not in workload.sets]
        if missing:
            raise ValueError(f"data.sets {missing} not in the workload; valid choices: {sorted(workload.sets)}")
        manifests = {s: Path(workload.sets[s]) for s in cfg.data.sets}
    else:
        manifests = {s: Path(p) for s, p in cfg.data.manifests.items()}
    tokens = workload.token_set(_enum_value(cfg.model.token_kind), _enum_value(cfg.model.blank)) if workload else None

    def make_source(dataset: str, manifest: Path):
        if source_factory is not None:
            return source_factory(cfg, dataset=dataset, workload=workload, tokens=tokens)
        return build_acoustic_source(
            _enum_value(cfg.model.source), cfg, workload=workload, dataset=dataset, tokens=tokens,
            device="cpu", manifest_path=manifest,
        )

    first_source = None
    if tokens is None:  # no workload (e.g. LibriSpeech + NeMo): the acoustic model defines the tokens
        first_dataset = next(iter(manifests))
        first_source = (first_dataset, make_source(first_dataset, manifests[first_dataset]))
        tokens = first_source[1].tokens

    labels = decoder_labels(cfg)
    graph_dir = graph_dir_for(cfg)
    graph_reason = None
    # graphs take minutes to build: only when a graph decoder whose adapter exists in this tree is asked for
    import importlib.util

    wanted = {split_decoder_label(lb)[0] for lb in labels} & GRAPH_DECODERS
    if any(importlib.util.find_spec(ADAPTER_MODULES[n]) is not None for n in wanted):
        graph_reason = prepare_graphs(cfg, workload, graph_dir, tokens)
    arpa_path = _first_path(cfg.data.arpa_path, workload and workload.arpa_path)
    if graph_reason is None and graph_dir.is_dir():
        mismatch = graph_mismatch(graph_dir, arpa_path, tokens)
        graph_reason = f"graphs in {graph_dir} do not fit: {mismatch}" if mismatch else None
    lexicon_path = graph_dir / "lexicon.txt"
    if graph_reason is not None:
        lexicon_path = Path("/nonexistent")  # never mix a foreign graph's lexicon into LM decoders
    base_ctx = DecodingContext(
        tokens=tokens,
        graph_dir=graph_dir if graph_dir.is_dir() and graph_reason is None else None,
        arpa_path=arpa_path,
        lexicon_path=lexicon_path if lexicon_path.is_file() else None,
        words_path=_first_path(cfg.data.words_path, workload and workload.words_path),
        extra={"topology": _enum_value(cfg.graph.topology), "scale": str(cfg.data.scale)},
    )

    runs = build_decoder_runs(cfg, base_ctx, exp.skip_unavailable, graph_reason)
    active = [r for r in runs if r.decoder is not None]
    rows: list[dict] = []
    run_dir.mkdir(parents=True, exist_ok=True)
    hyps_path = run_dir / "hyps.jsonl"
    per_run_totals: dict[str, list[dict]] = {r.label: [] for r in active}

    with open(hyps_path, "w", encoding="utf-8") as hyps_file:
        for dataset, manifest in manifests.items():
            utterances = load_manifest(manifest, cfg.data.max_utterances)
            if not utterances:
                raise ValueError(f"dataset {dataset!r} ({manifest}) has no utterances")
            if first_source is not None and first_source[0] == dataset:
                source = first_source[1]
            else:
                source = make_source(dataset, manifest)
            # per boost value: utterance id -> {word: boost} (by id: sources may reorder, e.g. sort by length)
            boosts_by_value: dict = {}
            for r in active:
                if r.boost_value is not None and r.boost_value not in boosts_by_value:
                    table = make_boosts(cfg, utterances, r.boost_value)
                    boosts_by_value[r.boost_value] = {u.id: b for u, b in zip(utterances, table)} if table else None
            for r in active:
                r.reset()
            acoustic_seconds, audio_seconds, frames = 0.0, 0.0, 0
            stage_peaks: dict[str, int] = {}
            n_batches = (len(utterances) + exp.batch_size - 1) // exp.batch_size
            bar = tqdm(
                source.batches(utterances, exp.batch_size), total=n_batches, disable=not exp.progress,
                desc=f"{dataset}: {len(active)} decoder(s)", unit="batch",
            )
            for batch_idx, batch in enumerate(bar):
                acoustic_seconds += batch.acoustic_seconds
                stage_peaks = _max_merge(stage_peaks, batch.stage_memory_bytes)
                audio_seconds += batch.audio_seconds
                frames += int(batch.lengths.sum())
                on_device: dict[str, tuple] = {}
                for r in active:
                    if r.decoder is None:
                        continue  # failed earlier on this dataset
                    boosts = boosts_by_value.get(r.boost_value)
                    batch_boosts = [boosts.get(u.id, {}) for u in batch.utterances] if boosts else None
                    try:
                        if r.device not in on_device:  # host->device copy, billed to end-to-end only
                            watch = Stopwatch(r.device)
                            with watch:
                                lp_dev, lens_dev = batch.log_probs.to(r.device), batch.lengths.to(r.device)
                            on_device[r.device] = (lp_dev, lens_dev, watch.wall_seconds)
                        lp, lens, transfer = on_device[r.device]
                        r.transfer_seconds += transfer
                        if batch_idx < exp.warmup_batches:
                            # untimed, but memory-probed: first-call allocations (arenas, caches) are the
                            # decoder's footprint and would be invisible to the probe afterwards
                            warm_probe = MemoryProbe(r.device)
                            with warm_probe:
                                r.decoder.decode(lp, lens, boosts=batch_boosts)
                            r.memory = r.memory.merge(warm_probe.stats)
                            _pop_stats(r.decoder)  # warm-up counts are not the run's
                        probe = MemoryProbe(r.device)
                        with probe, r.decode_watch:
                            hyps = r.decoder.decode(lp, lens, boosts=batch_boosts)
                        r.memory = r.memory.merge(probe.stats)
                        for k, v in _pop_stats(r.decoder).items():
                            r.stats[k] = r.stats.get(k, 0) + v
                    except Exception as e:  # noqa: BLE001
                        if not exp.skip_unavailable:
                            raise
                        r.unavailable_reason = f"failed while decoding {dataset}: {type(e).__name__}: {e}"
                        log.warning("decoder %s %s", r.label, r.unavailable_reason)
                        r.decoder = None
                        continue
                    if len(hyps) != len(batch.utterances):
                        raise RuntimeError(
                            f"decoder {r.label} returned {len(hyps)} hypotheses for {len(batch.utterances)} utterances"
                        )
                    for u, h in zip(batch.utterances, hyps):
                        text = hypothesis_text(h, tokens)
                        r.refs.append(u.text)
                        r.hyps.append(text)
                        hyps_file.write(
                            json.dumps(
                                {
                                    "decoder": r.label, "dataset": dataset, "id": u.id, "ref": u.text, "hyp": text,
                                    "score": float(h.score), "tokens": [int(t) for t in h.tokens],
                                }
                            )
                            + "\n"
                        )
            for r in active:
                if r.decoder is None:
                    continue
                stats = word_error_stats(r.refs, r.hyps)
                row = make_result_row(
                    experiment=exp.name, run=run_name, run_=r, dataset=dataset, wer=stats,
                    audio_seconds=audio_seconds, frames=frames, decoder_seconds=r.decode_watch.wall_seconds,
                    decoder_cuda_seconds=r.decode_watch.cuda_seconds, acoustic_seconds=acoustic_seconds,
                    transfer_seconds=r.transfer_seconds, memory=r.memory, stats=r.stats,
                    env=env, batch_size=exp.batch_size, warmup_batches=exp.warmup_batches,
                    acoustic_stage_peak_bytes=stage_peaks,
                )
                row["_wer_stats"] = stats
                rows.append(row)
                per_run_totals[r.label].append(row)

    # overall rows ("all" datasets) for decoders that finished every dataset
    for r in active:
        parts = per_run_totals[r.label]
        if r.decoder is None or len(parts) != len(manifests) or len(manifests) < 2:
            continue
        stats = sum((p["_wer_stats"] for p in parts), WerStats())
        mem = MemoryStats()
        for p in parts:
            mem = mem.merge(MemoryStats(p["peak_rss_bytes"], p["rss_increase_bytes"], p["cuda_peak_bytes"]))
        cuda_s = [p["decoder_cuda_seconds"] for p in parts]
        total = make_result_row(
            experiment=exp.name, run=run_name, run_=r, dataset="all", wer=stats,
            audio_seconds=sum(p["audio_seconds"] for p in parts), frames=sum(p["frames"] for p in parts),
            decoder_seconds=sum(p["decoder_seconds"] for p in parts),
            decoder_cuda_seconds=None if cuda_s[0] is None else sum(cuda_s),
            acoustic_seconds=sum(p["acoustic_seconds"] for p in parts),
            transfer_seconds=sum(p["end_to_end_seconds"] - p["acoustic_seconds"] - p["decoder_seconds"] for p in parts),
            memory=mem, stats=_sum_stats(p["decoder_stats"] for p in parts), env=env,
            batch_size=exp.batch_size, warmup_batches=exp.warmup_batches,
            acoustic_stage_peak_bytes=_max_merge({}, *(p["acoustic_stage_peak_bytes"] for p in parts)),
        )
        rows.append(total)
    for row in rows:
        row.pop("_wer_stats", None)
    unavailable = {r.label: r.unavailable_reason for r in runs if r.unavailable_reason}
    rows += [unavailable_row(exp.name, run_name, r, env) for r in runs if r.unavailable_reason]

    with open(run_dir / "results.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, default=_json_default) + "\n")
    resolved = {
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "decoders": {r.label: r.config for r in runs},
        "unavailable": unavailable,
        "environment": env,
        "command": " ".join(sys.argv),
    }
    with open(run_dir / "config.yaml", "w", encoding="utf-8") as f:
        f.write(OmegaConf.to_yaml(OmegaConf.create(json.loads(json.dumps(resolved, default=_json_default)))))
    log.info("wrote %s", run_dir)
    return RunOutput(run_dir=run_dir, rows=rows, unavailable=unavailable)


def _sum_stats(dicts) -> dict:
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def _first_path(*candidates) -> Optional[Path]:
    for c in candidates:
        if c:
            return Path(c)
    return None


def _json_default(o: Any):
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "value"):
        return o.value
    if isinstance(o, float):
        return o
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
