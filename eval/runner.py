"""The evaluation runner: datasets -> acoustic batches -> every decoder -> WER / RTFx / memory -> run dir.

One pass per dataset: the acoustic source produces each batch once and every decoder decodes it in
turn (so the acoustic work is shared and timed once). Per decoder, the first `warmup_batches` batches
are decoded once untimed before their timed decode (lazy CUDA init, extension loading, allocator
growth stay out of RTFx). The pieces around the decode loop live elsewhere: graphs in `eval.graphs`, the
run directory and the result rows (`reports.schema.ResultRow`) in `eval.results`. Writes, atomically
(`eval.results.RunDirectory`),

    runs/<experiment>/<run>/config.yaml    resolved config + per-decoder configs + environment
    runs/<experiment>/<run>/hyps.jsonl     one line per (decoder, utterance): id, ref, hyp, score, tokens
    runs/<experiment>/<run>/results.jsonl  one ResultRow per (decoder, dataset) + an "all" row per decoder
"""
from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Optional, Sequence

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from decoders.types import Hypothesis
from eval.acoustic import build_acoustic_source
from eval.acoustic.base import AcousticSource, Utterance
from eval.adapters.base import DecodingContext, build_decoder
from eval.config import BoostMode, decoder_labels, resolve_decoder_config, split_decoder_label, validate_config
from eval.graphs import GRAPH_DECODERS, graph_dir_for, graph_mismatch, prepare_graphs
from eval.metrics import MemoryProbe, MemoryStats, Stopwatch, environment_info, word_error_stats
from eval.results import RunDirectory, combined_row, hypothesis_record, measured_row, unavailable_row
from recipes.tokens import TokenSet
from reports.schema import ResultRow

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------


def load_manifest(path: str | Path, max_utterances: Optional[int] = None) -> list[Utterance]:
    """NeMo manifest JSONL ({"audio_filepath", "duration", "text"[, "id"]}) -> utterances.

    A relative `audio_filepath` is resolved against the manifest's folder (NeMo's convention, and what
    recipes.speech_corpus writes), not against the working directory, so a corpus folder can be moved or
    read from anywhere."""
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
                audio = row.get("audio_filepath")
                if audio is not None:
                    audio = str(audio)
                    if not Path(audio).is_absolute():
                        audio = str(path.parent / audio)
                utts.append(
                    Utterance(
                        id=utt_id,
                        text=str(row["text"]),
                        duration=float(row["duration"]),
                        audio_filepath=audio,
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


def _value(v: Any) -> str:
    return str(getattr(v, "value", v))


def _first_path(*candidates) -> Optional[Path]:
    for c in candidates:
        if c:
            return Path(c)
    return None


def _read_words(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.split()[0] for line in f if line.strip()]


def make_boosts(cfg: DictConfig, utterances: Sequence[Utterance], value: float) -> Optional[list[dict]]:
    """Per-utterance {word: boost} dicts for one boost value, or None when boosting is off."""
    from eval.metrics import normalize_text

    mode = BoostMode(_value(cfg.boost.mode))
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
    if _value(cfg.boost.mode) == BoostMode.none.value:
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


def build_decoder_runs(
    cfg: DictConfig, base_ctx: DecodingContext, skip_unavailable: bool, graph_reason: Optional[str] = None
) -> list[DecoderRun]:
    """One DecoderRun per decoder label (and per boost value of a sweep). With `skip_unavailable`, a decoder
    that cannot be built here (missing package, no GPU, no graph) is kept with the reason instead of raising."""
    runs: list[DecoderRun] = []
    default_device = resolve_device(cfg.experiment.device)
    for label in decoder_labels(cfg):
        name, device = split_decoder_label(label)
        device = device or default_device
        dcfg = resolve_decoder_config(name, cfg)
        run = DecoderRun(label=label, name=name, device=device,
                         config=OmegaConf.to_container(dcfg, resolve=True, enum_to_str=True))
        try:
            if graph_reason is not None and name in GRAPH_DECODERS:
                raise FileNotFoundError(graph_reason)
            device = resolve_device(device)
            ctx = DecodingContext(**{**base_ctx.__dict__, "device": device})
            run.decoder = build_decoder(name, dcfg, ctx)
        except Exception as e:  # noqa: BLE001 - any build failure means "not available here"
            if not skip_unavailable:
                raise
            run.unavailable_reason = f"{type(e).__name__}: {e}"
            log.warning("decoder %s unavailable: %s", label, run.unavailable_reason)
        runs.append(run)
    values = boost_values(cfg)
    if values == [None]:
        return runs
    return [
        DecoderRun(label=f"{r.label}[boost={v:g}]", name=r.name, device=r.device, config=r.config, decoder=r.decoder,
                   boost_value=v, unavailable_reason=r.unavailable_reason)
        for r in runs for v in values
    ]


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
# The decode loop
# ---------------------------------------------------------------------------------------------------------


@dataclass
class RunInfo:
    """What every row of one run shares."""

    experiment: str
    run: str
    env: dict
    batch_size: int
    warmup_batches: int
    skip_unavailable: bool
    progress: bool


def decode_dataset(
    info: RunInfo, dataset: str, utterances: list[Utterance], source: AcousticSource, active: list[DecoderRun],
    boosts_by_value: dict, tokens: TokenSet, hyps_file: IO[str],
) -> list[ResultRow]:
    """Decode one dataset with every active decoder: each acoustic batch is produced once and decoded by
    every decoder in turn. Writes the hypotheses to `hyps_file` and returns one row per decoder that
    finished the dataset (a decoder that fails here is marked unavailable when skip_unavailable)."""
    for r in active:
        r.reset()
    acoustic_seconds, audio_seconds, frames = 0.0, 0.0, 0
    stage_peaks: dict[str, int] = {}
    n_batches = (len(utterances) + info.batch_size - 1) // info.batch_size
    bar = tqdm(source.batches(utterances, info.batch_size), total=n_batches, disable=not info.progress,
               desc=f"{dataset}: {len(active)} decoder(s)", unit="batch")
    for batch_idx, batch in enumerate(bar):
        acoustic_seconds += batch.acoustic_seconds
        for k, v in batch.stage_memory_bytes.items():
            stage_peaks[k] = max(int(v), stage_peaks.get(k, 0))
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
                if batch_idx < info.warmup_batches:
                    # untimed, but memory-probed: first-call allocations (arenas, caches) are the decoder's
                    # footprint and would be invisible to the probe afterwards
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
                if not info.skip_unavailable:
                    raise
                r.unavailable_reason = f"failed while decoding {dataset}: {type(e).__name__}: {e}"
                log.warning("decoder %s %s", r.label, r.unavailable_reason)
                r.decoder = None
                continue
            if len(hyps) != len(batch.utterances):
                raise RuntimeError(f"decoder {r.label} returned {len(hyps)} hypotheses for "
                                   f"{len(batch.utterances)} utterances")
            for u, h in zip(batch.utterances, hyps):
                text = hypothesis_text(h, tokens)
                r.refs.append(u.text)
                r.hyps.append(text)
                hyps_file.write(hypothesis_record(decoder=r.label, dataset=dataset, utterance_id=u.id, ref=u.text,
                                                  hyp=text, score=h.score, tokens=h.tokens))
    return [
        measured_row(
            experiment=info.experiment, run=info.run, decoder=r.label, decoder_name=r.name, device=r.device,
            dataset=dataset, wer=word_error_stats(r.refs, r.hyps), audio_seconds=audio_seconds,
            decoder_seconds=r.decode_watch.wall_seconds, env=info.env, frames=frames,
            decoder_cuda_seconds=r.decode_watch.cuda_seconds, acoustic_seconds=acoustic_seconds,
            transfer_seconds=r.transfer_seconds, memory=r.memory, stats=r.stats, batch_size=info.batch_size,
            warmup_batches=info.warmup_batches, decoder_config=r.config, boost_value=r.boost_value,
            acoustic_stage_peak_bytes=stage_peaks,
        )
        for r in active if r.decoder is not None
    ]


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------


@dataclass
class RunOutput:
    run_dir: Path
    rows: list[ResultRow]
    unavailable: dict[str, str]  # label -> reason


SourceFactory = Callable[..., AcousticSource]


@dataclass
class RunInputs:
    """The datasets of a run and what turns them into log-probs."""

    manifests: dict[str, Path]
    tokens: TokenSet
    workload: Any
    make_source: Callable[[str, Path], AcousticSource]
    first_source: Optional[tuple[str, AcousticSource]] = None  # built early when it defines the tokens

    def source(self, dataset: str) -> AcousticSource:
        if self.first_source is not None and self.first_source[0] == dataset:
            return self.first_source[1]
        return self.make_source(dataset, self.manifests[dataset])


def prepare_inputs(cfg: DictConfig, workload: Any = None, source_factory: Optional[SourceFactory] = None) -> RunInputs:
    """Datasets (the workload's sets, or data.manifests), the token set and the acoustic source factory.

    With data.manifests, the synthetic workload is still loaded when `data.workload_root` is set: the
    manifests then speak the workload's language (e.g. the synthesized speech of recipes.speech_corpus), so its
    token set, ARPA, lexicon and graphs apply, and an acoustic model must match its token set. Without
    workload_root (e.g. LibriSpeech + a NeMo model), the acoustic model defines the tokens."""
    uses_workload = not cfg.data.manifests
    wants_workload = uses_workload or _value(cfg.model.source) == "simulator" or bool(cfg.data.workload_root)
    if workload is None and wants_workload:
        from recipes.workload import prepare_workload

        workload = prepare_workload(scale=str(cfg.data.scale), root=cfg.data.workload_root or "data/workload")
    if uses_workload:
        missing = [s for s in cfg.data.sets if s not in workload.sets]
        if missing:
            raise ValueError(f"data.sets {missing} not in the workload; valid choices: {sorted(workload.sets)}")
        manifests = {s: Path(workload.sets[s]) for s in cfg.data.sets}
    else:
        manifests = {s: Path(p) for s, p in cfg.data.manifests.items()}
    tokens = workload.token_set(_value(cfg.model.token_kind), _value(cfg.model.blank)) if workload else None

    def make_source(dataset: str, manifest: Path) -> AcousticSource:
        if source_factory is not None:
            return source_factory(cfg, dataset=dataset, workload=workload, tokens=tokens)
        return build_acoustic_source(_value(cfg.model.source), cfg, workload=workload, dataset=dataset,
                                     tokens=tokens, device="cpu", manifest_path=manifest)

    first_source = None
    if tokens is None:  # no workload (e.g. LibriSpeech + NeMo): the acoustic model defines the tokens
        first = next(iter(manifests))
        first_source = (first, make_source(first, manifests[first]))
        tokens = first_source[1].tokens
    return RunInputs(manifests, tokens, workload, make_source, first_source)


def decoding_context(
    cfg: DictConfig, inputs: RunInputs, labels: Sequence[str]
) -> tuple[DecodingContext, Optional[str]]:
    """The artefacts decoders read (graph dir, LM, lexicon, words) and, when the graphs cannot be used, why.
    Graphs take minutes to build: they are built only when a graph decoder is asked for."""
    workload = inputs.workload
    arpa_path = _first_path(cfg.data.arpa_path, workload and workload.arpa_path)
    gdir = graph_dir_for(cfg, inputs.tokens)
    if {split_decoder_label(lb)[0] for lb in labels} & GRAPH_DECODERS:
        graph_reason = prepare_graphs(cfg, workload, gdir, inputs.tokens, arpa_path)
    else:
        graph_reason = graph_mismatch(gdir, arpa_path, inputs.tokens)
    usable = graph_reason is None
    # a graph that does not fit must not lend its lexicon to the LM decoders either
    lexicon = gdir / "lexicon.txt" if usable else None
    ctx = DecodingContext(
        tokens=inputs.tokens,
        graph_dir=gdir if usable else None,
        arpa_path=arpa_path,
        lexicon_path=lexicon if lexicon is not None and lexicon.is_file() else None,
        words_path=_first_path(cfg.data.words_path, workload and workload.words_path),
        extra={"topology": _value(cfg.graph.topology), "scale": str(cfg.data.scale)},
    )
    return ctx, graph_reason


def run_experiment(cfg: DictConfig, workload: Any = None, source_factory: Optional[SourceFactory] = None) -> RunOutput:
    """Run the configured decoders over the configured datasets; write and return the results.

    `workload`: an already prepared `recipes.workload.Workload` (tests pass a small fake); by default it
    is prepared (generated or loaded from its cache) from `data.scale`.
    `source_factory(cfg, dataset=, workload=, tokens=)`: replaces the `model.source` registry lookup
    (tests, notebooks).
    """
    cfg = validate_config(cfg)
    exp = cfg.experiment
    run_dir = RunDirectory(exp.output_dir, exp.name, exp.run)  # refuses escaping names before any work
    info = RunInfo(experiment=exp.name, run=run_dir.run, env=environment_info(), batch_size=exp.batch_size,
                   warmup_batches=exp.warmup_batches, skip_unavailable=exp.skip_unavailable, progress=exp.progress)
    inputs = prepare_inputs(cfg, workload, source_factory)
    labels = decoder_labels(cfg)
    base_ctx, graph_reason = decoding_context(cfg, inputs, labels)
    runs = build_decoder_runs(cfg, base_ctx, exp.skip_unavailable, graph_reason)
    active = [r for r in runs if r.decoder is not None]

    rows: list[ResultRow] = []
    with run_dir:
        with run_dir.open_hyps() as hyps_file:
            for dataset, manifest in inputs.manifests.items():
                utterances = load_manifest(manifest, cfg.data.max_utterances)
                if not utterances:
                    raise ValueError(f"dataset {dataset!r} ({manifest}) has no utterances")
                # per boost value: utterance id -> {word: boost} (by id: sources may reorder, e.g. sort by length)
                boosts_by_value: dict = {}
                for r in active:
                    if r.boost_value is not None and r.boost_value not in boosts_by_value:
                        table = make_boosts(cfg, utterances, r.boost_value)
                        boosts_by_value[r.boost_value] = {u.id: b for u, b in zip(utterances, table)} if table else None
                rows += decode_dataset(info, dataset, utterances, inputs.source(dataset), active, boosts_by_value,
                                       inputs.tokens, hyps_file)
        # an "all" row for each decoder that finished every dataset
        if len(inputs.manifests) > 1:
            for r in active:
                parts = [row for row in rows if row.decoder == r.label]
                if r.decoder is not None and len(parts) == len(inputs.manifests):
                    rows.append(combined_row(parts))
        unavailable = {r.label: r.unavailable_reason for r in runs if r.unavailable_reason}
        rows += [unavailable_row(experiment=exp.name, run=run_dir.run, decoder=r.label, decoder_name=r.name,
                                 device=r.device, reason=r.unavailable_reason, env=info.env, boost_value=r.boost_value)
                 for r in runs if r.unavailable_reason]
        run_dir.write_results(rows)
        run_dir.write_config({
            "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
            "decoders": {r.label: r.config for r in runs},
            "unavailable": unavailable,
            "environment": info.env,
            "command": " ".join(sys.argv),
        })
    log.info("wrote %s", run_dir.final_path)
    return RunOutput(run_dir=run_dir.final_path, rows=rows, unavailable=unavailable)
