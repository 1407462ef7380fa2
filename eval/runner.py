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

Under torchrun (WORLD_SIZE > 1) `run_sharded` runs instead: each rank decodes a duration-balanced share of every
dataset on its own device and rank 0 writes the same layout, one run directory: the merged rows (one WER over every
hypothesis, RTFx over the slowest rank's time), each rank's own rows (params rank=r) and hyps.jsonl in the order
one process writes it. The torch.distributed plumbing is eval/distributed.py.
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
from eval.adapters.base import DecodingContext, build_decoder, pop_stats
from eval.config import BoostMode, decoder_labels, resolve_decoder_config, split_decoder_label, validate_config
from eval.distributed import DistContext
from eval.graphs import GRAPH_DECODERS, graph_dir_for, graph_mismatch, no_graph_reason, prepare_graphs
from eval.metrics import MemoryProbe, MemoryStats, Stopwatch, environment_info, word_error_stats
from eval.results import (RunDirectory, combined_row, hypothesis_record, measured_row, rank_row, sharded_row,
                          unavailable_row)
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
    results: list = field(default_factory=list)  # (utterance, Hypothesis) in decode order

    def reset(self) -> None:
        self.decode_watch = Stopwatch(self.device)
        self.transfer_seconds = 0.0
        self.memory = MemoryStats()
        self.stats = {}
        self.refs, self.hyps, self.results = [], [], []


def build_decoder_runs(
    cfg: DictConfig, base_ctx: DecodingContext, skip_unavailable: bool, graph_reason: Optional[str] = None,
    dist: Optional[DistContext] = None,
) -> list[DecoderRun]:
    """One DecoderRun per decoder label (and per boost value of a sweep). With `skip_unavailable`, a decoder
    that cannot be built here (missing package, no GPU, no graph) is kept with the reason instead of raising.
    `dist`: a rank of a sharded run puts a bare `cuda` decoder on its own GPU (cuda:LOCAL_RANK)."""
    runs: list[DecoderRun] = []
    default_device = resolve_device(cfg.experiment.device)
    for label in decoder_labels(cfg):
        name, device = split_decoder_label(label)
        device = device or default_device
        if dist is not None:
            device = dist.device(device)
        dcfg = resolve_decoder_config(label, cfg)  # with the label's own [key=value] parameters
        run = DecoderRun(label=label, name=name, device=device,
                         config=OmegaConf.to_container(dcfg, resolve=True, enum_to_str=True))
        try:
            if graph_reason is not None and name in GRAPH_DECODERS:
                raise FileNotFoundError(graph_reason)
            device = resolve_device(device)
            ctx = DecodingContext(**{**base_ctx.__dict__, "device": device})
            from recipes.cli import quiet_native_output

            with quiet_native_output(not cfg.experiment.get("verbose", False)):  # KenLM's loading banner and bar
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


# Decoder-only RTFx of the slow paths on the 2-core CPU machine this project is built on: Flashlight's word-boosted
# path scores every word through a Python KenLM wrapper (12-15 RTFx measured in issue 13's report, 18-24 RTFx on a
# 20-utterance rerun; unboosted it runs at ~290).
SLOW_PATH_RTFX = {("flashlight", True): 15.0}


def warn_slow_runs(active: Sequence[DecoderRun], audio_seconds: float, minutes: float = 1.0) -> Optional[str]:
    """Log (and return) an estimate when decoders on a known slow path will take more than `minutes`, before the
    run starts: a boost sweep over Flashlight's boosted path took 14 minutes without a word."""
    slow = [(r, SLOW_PATH_RTFX[(r.name, True)]) for r in active
            if r.boost_value is not None and (r.name, True) in SLOW_PATH_RTFX and r.device == "cpu"]
    seconds = sum(audio_seconds / rtfx for _, rtfx in slow)
    if seconds < 60 * minutes:
        return None
    msg = (f"about {seconds / 60:.0f} min of decoding ahead: {len(slow)} boosted run(s) of "
           f"{', '.join(sorted({r.name for r, _ in slow}))} over {audio_seconds / 3600:.2f} h of audio at ~"
           f"{min(x for _, x in slow):.0f} RTFx (its word-boosted path; decoder=wfst runs the same sweep at thousands "
           f"of RTFx, data.max_utterances=N shortens it)")
    log.warning(msg)
    return msg


def hypothesis_text(h: Hypothesis, tokens) -> str:
    if h.words:
        return " ".join(h.words)
    return tokens.decode(h.tokens) if h.tokens else ""


def hypothesis_extra(h: Hypothesis) -> dict:
    """The optional fields of a hypothesis for hyps.jsonl: word start/end frames, word confidences, and the
    n-best list (hyp text, score and word times of each entry); {} when the decoder gave none."""
    out: dict = {}
    for name in ("word_start_frames", "word_end_frames", "word_confidences"):
        v = getattr(h, name, None)
        if v is not None:
            out[name] = [float(x) for x in v]
    nb = getattr(h, "nbest", None)
    if nb is not None:
        out["nbest"] = [{"hyp": " ".join(x.words), "score": float(x.score),
                         **{k: v for k, v in hypothesis_extra(x._replace(nbest=None)).items()}} for x in nb]
    return out


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
    ci_reference: Optional[str] = None
    ci_resamples: int = 0


def decode_dataset(
    info: RunInfo, dataset: str, utterances: list[Utterance], source: AcousticSource, active: list[DecoderRun],
    boosts_by_value: dict, tokens: TokenSet, hyps_file: IO[str],
) -> list[ResultRow]:
    """Decode one dataset with every active decoder: each acoustic batch is produced once and decoded by
    every decoder in turn. Writes the hypotheses to `hyps_file` in manifest order (`utterances`' order, in batches of
    the batch size, every decoder per batch: the order a sharded run writes too, whatever order the source decoded
    in, e.g. NeMo's longest first) with per-utterance WER and CER, and returns one row per decoder that finished the
    dataset (a decoder that fails here is marked unavailable when skip_unavailable)."""
    for r in active:
        r.reset()
    acoustic_seconds, audio_seconds, frames = 0.0, 0.0, 0
    stage_peaks: dict[str, int] = {}
    n_batches = (len(utterances) + info.batch_size - 1) // info.batch_size
    bar = progress_bar(source.batches(utterances, info.batch_size), total=n_batches, enabled=info.progress,
                       desc=f"{dataset}: {len(active)} decoder(s)")
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
                    pop_stats(r.decoder)  # warm-up counts are not the run's
                probe = MemoryProbe(r.device)
                with probe, r.decode_watch:
                    hyps = r.decoder.decode(lp, lens, boosts=batch_boosts)
                r.memory = r.memory.merge(probe.stats)
                for k, v in pop_stats(r.decoder).items():
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
                r.results.append((u, h, text))
    char_counts, counts = write_hypotheses(info, dataset, utterances, active, getattr(source, "frame_shift_s", None),
                                           hyps_file)
    intervals = wer_intervals(counts, info.ci_reference, info.ci_resamples)
    return [
        measured_row(
            experiment=info.experiment, run=info.run, decoder=r.label, decoder_name=r.name, device=r.device,
            dataset=dataset, wer=word_error_stats(r.refs, r.hyps), audio_seconds=audio_seconds,
            decoder_seconds=r.decode_watch.wall_seconds, env=info.env, frames=frames,
            decoder_cuda_seconds=r.decode_watch.cuda_seconds, acoustic_seconds=acoustic_seconds,
            transfer_seconds=r.transfer_seconds, memory=r.memory, stats=r.stats, batch_size=info.batch_size,
            warmup_batches=info.warmup_batches, decoder_config=r.config, boost_value=r.boost_value,
            acoustic_stage_peak_bytes=stage_peaks, char_counts=char_counts.get(r.label),
            wer_ci=intervals.get(r.label),
        )
        for r in active if r.decoder is not None
    ]


def write_hypotheses(info: RunInfo, dataset: str, utterances: Sequence[Utterance], active: Sequence[DecoderRun],
                     frame_shift_s: Optional[float], hyps_file: IO[str]) -> tuple[dict, dict]:
    """hyps.jsonl lines of one dataset, in manifest order (eval.distributed.ordered_hypothesis_lines, the order of a
    sharded run), each with the utterance's WER and CER; returns each decoder's summed CER parts and its
    per-utterance (errors, reference words) by utterance id."""
    from eval.distributed import ordered_hypothesis_lines
    from eval.metrics import utterance_char_error_counts, utterance_error_counts

    lines: list[str] = []
    char_counts: dict[str, tuple[int, int]] = {}
    counts: dict[str, dict[str, tuple[int, int]]] = {}
    for r in active:
        if r.decoder is None or not r.results:
            continue
        refs = [u.text for u, _, _ in r.results]
        texts = [t for _, _, t in r.results]
        errors, words = utterance_error_counts(refs, texts)
        cerrs, chars = utterance_char_error_counts(refs, texts)
        char_counts[r.label] = (sum(cerrs), sum(chars))
        counts[r.label] = {u.id: (e, w) for (u, _, _), e, w in zip(r.results, errors, words)}
        for (u, h, text), e, w, ce, c in zip(r.results, errors, words, cerrs, chars):
            times = None
            if h.timesteps is not None and frame_shift_s:
                times = [int(t) * frame_shift_s for t in h.timesteps]
            lines.append(hypothesis_record(
                decoder=r.label, dataset=dataset, utterance_id=u.id, ref=u.text, hyp=text, score=h.score,
                tokens=h.tokens, audio_filepath=u.audio_filepath, duration=u.duration, errors=(e, w),
                char_errors=(ce, c), timesteps_s=times, extra=hypothesis_extra(h)))
    labels = [r.label for r in active]
    hyps_file.writelines(ordered_hypothesis_lines([u.id for u in utterances], info.batch_size, labels, lines))
    return char_counts, counts


def wer_intervals(counts: dict[str, dict[str, tuple[int, int]]], reference: Optional[str],
                  n_resamples: int, confidence: float = 0.95) -> dict[str, dict]:
    """Per decoder: the percentile bootstrap CI of its WER and, when `reference` decoded the same utterances, the
    paired bootstrap CI of WER(decoder) - WER(reference) (eval.metrics; utterances resampled, seed 0, so every
    decoder of the run is resampled on the same draws). {} when n_resamples is 0."""
    from eval.metrics import bootstrap_wer_ci, paired_bootstrap

    if n_resamples <= 0:
        return {}
    out: dict[str, dict] = {}
    ref = counts.get(reference) if reference else None
    for label, by_id in counts.items():
        ids = sorted(by_id)
        if not ids:
            continue
        errors, words = [by_id[i][0] for i in ids], [by_id[i][1] for i in ids]
        ci = bootstrap_wer_ci(errors, words, n_resamples=n_resamples, confidence=confidence)
        entry = {"confidence": confidence, "n_resamples": n_resamples, "low": ci.low, "high": ci.high}
        if ref is not None and label != reference and sorted(ref) == ids:
            d = paired_bootstrap(errors, [ref[i][0] for i in ids], words, n_resamples=n_resamples,
                                 confidence=confidence)
            entry.update(reference=reference, delta=d.estimate, delta_low=d.low, delta_high=d.high,
                         prob_better=d.prob_a_better)
        out[label] = entry
    return out


def progress_bar(iterable, total: int, enabled: bool, desc: str):
    """A tqdm bar on a terminal; elsewhere (CI logs, a pipe) one plain line per dataset, when it is done: a redrawn
    bar in a log file is a line of carriage returns and cursor escapes per update."""
    if enabled and sys.stderr.isatty():
        return tqdm(iterable, total=total, desc=desc, unit="batch")
    if not enabled:
        return iterable
    return _plain_progress(iterable, total, desc)


def _plain_progress(iterable, total: int, desc: str):
    import time

    t0 = time.perf_counter()
    n = 0
    for n, item in enumerate(iterable, 1):
        yield item
    print(f"{desc}: {n}/{total} batches in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------


@dataclass
class RunOutput:
    run_dir: Path
    rows: list[ResultRow]
    unavailable: dict[str, str]  # label -> reason
    rank: int = 0  # a sharded run's rank; only rank 0 wrote run_dir (on its own host)


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
    gdir = graph_dir_for(cfg, inputs.tokens, workload, arpa_path)
    if gdir is None:  # a user's model and manifests without an LM: nothing to build graphs from
        graph_reason = no_graph_reason(cfg, arpa_path)
    elif {split_decoder_label(lb)[0] for lb in labels} & GRAPH_DECODERS:
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
        # the workload itself: the wfst adapter's rescoring builds its higher-order LM (Workload.arpa_of_order)
        extra={"topology": _value(cfg.graph.topology), "scale": str(cfg.data.scale), "workload": workload},
    )
    return ctx, graph_reason


def boost_tables(cfg: DictConfig, active: Sequence[DecoderRun], utterances: Sequence[Utterance]) -> dict:
    """Per boost value: utterance id -> {word: boost} (by id: sources may reorder, e.g. sort by length). Built
    from the whole dataset, also on a rank that decodes a shard of it (test_set_words reads every reference)."""
    boosts_by_value: dict = {}
    for r in active:
        if r.boost_value is not None and r.boost_value not in boosts_by_value:
            table = make_boosts(cfg, utterances, r.boost_value)
            boosts_by_value[r.boost_value] = {u.id: b for u, b in zip(utterances, table)} if table else None
    return boosts_by_value


def run_experiment(cfg: DictConfig, workload: Any = None, source_factory: Optional[SourceFactory] = None,
                   dist: Optional[DistContext] = None, extra_config: Optional[dict] = None) -> RunOutput:
    """Run the configured decoders over the configured datasets; write and return the results.

    `workload`: an already prepared `recipes.workload.Workload` (tests pass a small fake); by default it
    is prepared (generated or loaded from its cache) from `data.scale`.
    `source_factory(cfg, dataset=, workload=, tokens=)`: replaces the `model.source` registry lookup
    (tests, notebooks).
    `dist`: this process's rank; by default from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK). With
    more than one rank the datasets are sharded over the ranks and rank 0 writes the one run directory
    (`run_sharded`); one process (the default) runs everything itself.
    `extra_config`: more provenance for config.yaml (e.g. a sweep job's overrides).
    """
    dist = dist if dist is not None else DistContext.from_env()
    if dist.enabled:
        return run_sharded(cfg, dist, workload, source_factory, extra_config)
    cfg = validate_config(cfg)
    exp = cfg.experiment
    run_dir = RunDirectory(exp.output_dir, exp.name, exp.run)  # refuses escaping names before any work
    info = RunInfo(experiment=exp.name, run=run_dir.run, env=environment_info(), batch_size=exp.batch_size,
                   warmup_batches=exp.warmup_batches, skip_unavailable=exp.skip_unavailable, progress=exp.progress,
                   ci_reference=exp.ci_reference, ci_resamples=exp.ci_resamples)
    inputs = prepare_inputs(cfg, workload, source_factory)
    labels = decoder_labels(cfg)
    base_ctx, graph_reason = decoding_context(cfg, inputs, labels)
    runs = build_decoder_runs(cfg, base_ctx, exp.skip_unavailable, graph_reason)
    active = [r for r in runs if r.decoder is not None]

    rows: list[ResultRow] = []
    datasets = {}
    for dataset, manifest in inputs.manifests.items():
        datasets[dataset] = load_manifest(manifest, cfg.data.max_utterances)
        if not datasets[dataset]:
            raise ValueError(f"dataset {dataset!r} ({manifest}) has no utterances")
    warn_slow_runs(active, sum(u.duration for utts in datasets.values() for u in utts))
    if exp.ci_reference and exp.ci_resamples and exp.ci_reference not in {r.label for r in active}:
        # a config's default reference (the demo's wfst) in a run without it: intervals without differences
        log.warning("experiment.ci_reference %s is not among this run's decoders (%s): no paired WER differences",
                    exp.ci_reference, ", ".join(r.label for r in active))
    with run_dir:
        with run_dir.open_hyps() as hyps_file:
            for dataset, utterances in datasets.items():
                rows += decode_dataset(info, dataset, utterances, inputs.source(dataset), active,
                                       boost_tables(cfg, active, utterances), inputs.tokens, hyps_file)
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
        run_dir.write_output_manifests()
        run_dir.write_config({
            "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
            "decoders": {r.label: r.config for r in runs},
            "unavailable": unavailable,
            "environment": info.env,
            "command": " ".join(sys.argv),
            **(extra_config or {}),
        })
    log.info("wrote %s", run_dir.final_path)
    return RunOutput(run_dir=run_dir.final_path, rows=rows, unavailable=unavailable)


# ---------------------------------------------------------------------------------------------------------
# Sharded runs (torchrun; the plumbing is eval/distributed.py)
# ---------------------------------------------------------------------------------------------------------


@dataclass
class ShardResult:
    """What one rank sends to rank 0: its shard's rows and hypotheses, and what it could not run."""

    rank: int
    host: str
    env: dict
    rows: list[ResultRow]  # per dataset (+ "all" when the run has several datasets), this rank's utterances only
    hyps: dict[str, list[str]]  # dataset -> hyps.jsonl lines of this rank's utterances
    shard_ids: dict[str, list[str]]  # dataset -> the utterance ids this rank decoded
    manifest_ids: dict[str, list[str]]  # dataset -> every id in manifest order (rank 0 only; {} elsewhere)
    runs: list[tuple]  # (label, name, device, boost_value) of every DecoderRun, in run order
    decoders: dict[str, dict]  # label -> resolved decoder config
    unavailable: dict[str, str]  # label -> reason


def _wants_cuda(cfg: DictConfig) -> bool:
    """Whether this rank's decoders run on CUDA (then the default process group is NCCL on cuda:LOCAL_RANK)."""
    try:
        devices = [split_decoder_label(lb)[1] or str(cfg.experiment.device) for lb in decoder_labels(cfg)]
    except Exception:  # noqa: BLE001 - a broken config is reported by validate_config on every rank, not here
        return False
    return torch.cuda.is_available() and any(d == "auto" or d.startswith("cuda") for d in devices)


def resolved_config(cfg: DictConfig) -> dict:
    """What every rank must agree on: the typed config and every decoder's config after its YAML and overrides."""
    return {
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "decoders": {lb: OmegaConf.to_container(resolve_decoder_config(lb, cfg), resolve=True,
                                                enum_to_str=True) for lb in decoder_labels(cfg)},
    }


def run_sharded(cfg: DictConfig, dist: DistContext, workload: Any = None,
                source_factory: Optional[SourceFactory] = None, extra_config: Optional[dict] = None) -> RunOutput:
    """`run_experiment` on one rank of a sharded run: every rank decodes its share of each dataset
    (`shard_by_duration`), rank 0 merges and writes the one run directory, every rank returns the same
    RunOutput or raises the same RankFailed (the first failing rank's error; nothing is written then)."""
    import dataclasses

    from eval.distributed import (ProcessGroup, RankFailed, RankFailure, capture, check_same_config, first_failure,
                                  raise_first_failure, staged)

    with ProcessGroup(dist, use_cuda=_wants_cuda(cfg)) as pg:
        def check():
            typed = validate_config(cfg)
            exp = typed.experiment
            # rank 0 names the run (a timestamp unless experiment.run is set): every rank's rows carry that name
            run = RunDirectory(exp.output_dir, exp.name, exp.run).run if dist.is_main else None
            return typed, resolved_config(typed), run

        mine = capture(dist.rank, check)
        gathered = pg.all_gather(mine if isinstance(mine, RankFailure) else mine[1:])
        raise_first_failure(gathered)
        check_same_config([g[0] for g in gathered])
        typed, run_name = mine[0], gathered[0][1]

        inputs, runs = staged(pg, lambda: _prepare_rank(typed, workload, source_factory, dist))
        result = capture(dist.rank, lambda: _decode_shard(typed, dist, run_name, inputs, runs))
        results = pg.gather(result)
        outcome = None
        if dist.is_main:
            outcome = first_failure(results) or capture(
                0, lambda: _write_sharded(typed, dist, pg.backend, run_name, results, extra_config))
        outcome = pg.broadcast(outcome)
    if isinstance(outcome, RankFailure):
        raise RankFailed(outcome.message())
    return dataclasses.replace(outcome, rank=dist.rank)


def _prepare_rank(cfg: DictConfig, workload: Any, source_factory: Optional[SourceFactory],
                  dist: DistContext) -> tuple[RunInputs, list[DecoderRun]]:
    inputs = prepare_inputs(cfg, workload, source_factory)
    base_ctx, graph_reason = decoding_context(cfg, inputs, decoder_labels(cfg))
    runs = build_decoder_runs(cfg, base_ctx, cfg.experiment.skip_unavailable, graph_reason, dist=dist)
    return inputs, runs


def _decode_shard(cfg: DictConfig, dist: DistContext, run_name: str, inputs: RunInputs,
                  runs: list[DecoderRun]) -> ShardResult:
    import io

    from eval.distributed import check_unique_ids, host_name, shard_by_duration

    exp = cfg.experiment
    info = RunInfo(experiment=exp.name, run=run_name, env=environment_info(), batch_size=exp.batch_size,
                   warmup_batches=exp.warmup_batches, skip_unavailable=exp.skip_unavailable,
                   progress=exp.progress and dist.is_main)
    active = [r for r in runs if r.decoder is not None]
    rows: list[ResultRow] = []
    hyps: dict[str, list[str]] = {}
    shard_ids: dict[str, list[str]] = {}
    manifest_ids: dict[str, list[str]] = {}
    for dataset, manifest in inputs.manifests.items():
        utterances = load_manifest(manifest, cfg.data.max_utterances)
        if not utterances:
            raise ValueError(f"dataset {dataset!r} ({manifest}) has no utterances")
        ids = [u.id for u in utterances]
        check_unique_ids(dataset, ids)
        shard = [utterances[i] for i in shard_by_duration([u.duration for u in utterances], dist.world_size)[dist.rank]]
        buf = io.StringIO()
        rows += decode_dataset(info, dataset, shard, inputs.source(dataset), active,
                               boost_tables(cfg, active, utterances), inputs.tokens, buf)
        hyps[dataset] = buf.getvalue().splitlines(keepends=True)
        shard_ids[dataset] = [u.id for u in shard]
        if dist.is_main:
            manifest_ids[dataset] = ids
    if len(inputs.manifests) > 1:  # this rank's "all" rows, as one process builds them
        for r in active:
            parts = [row for row in rows if row.decoder == r.label]
            if r.decoder is not None and len(parts) == len(inputs.manifests):
                rows.append(combined_row(parts))
    return ShardResult(
        rank=dist.rank, host=host_name(), env=info.env, rows=rows, hyps=hyps, shard_ids=shard_ids,
        manifest_ids=manifest_ids, runs=[(r.label, r.name, r.device, r.boost_value) for r in runs],
        decoders={r.label: r.config for r in runs},
        unavailable={r.label: r.unavailable_reason for r in runs if r.unavailable_reason},
    )


def _merged_reason(label: str, results: Sequence[ShardResult]) -> Optional[str]:
    """Why `label` is missing from the merged results: the reason when every rank gave the same one (e.g. no
    GPU anywhere), else the first rank's, named."""
    reasons = [(res.rank, res.unavailable[label]) for res in results if label in res.unavailable]
    if not reasons:
        return None
    if len(reasons) == len(results) and len({r for _, r in reasons}) == 1:
        return reasons[0][1]
    rank, reason = reasons[0]
    more = f" (and {len(reasons) - 1} other rank(s))" if len(reasons) > 1 else ""
    return f"rank {rank}: {reason}{more}"


def _write_sharded(cfg: DictConfig, dist: DistContext, backend: str, run_name: str,
                   results: Sequence[ShardResult], extra_config: Optional[dict]) -> RunOutput:
    """Rank 0: the merged rows (one per (decoder, dataset), from every rank's part: `sharded_row`), every rank's
    own rows (`rank_row`: params rank=r), unavailable rows, and hyps.jsonl in manifest order, into one run
    directory written atomically."""
    from eval.distributed import ordered_hypothesis_lines

    exp = cfg.experiment
    main = results[0]
    world = dist.world_size
    env = {**main.env, "world_size": world, "hosts": [res.host for res in results]}
    for dataset, ids in main.manifest_ids.items():
        decoded = sorted(i for res in results for i in res.shard_ids.get(dataset, []))
        if decoded != sorted(ids):
            raise RuntimeError(f"the ranks decoded {len(decoded)} utterances of {dataset!r}, rank 0's manifest has "
                               f"{len(ids)} (or other ids): every rank must read the same manifest")
    merged: list[ResultRow] = []
    for row in main.rows:  # rank 0's order: datasets, then "all"
        key = (row.decoder, row.dataset)
        parts = [next((x for x in res.rows if (x.decoder, x.dataset) == key), None) for res in results]
        if all(p is not None for p in parts):
            merged.append(sharded_row(parts, environment=env))
    per_rank = [rank_row(x, res.rank, world) for res in results for x in res.rows]
    unavailable: dict[str, str] = {}
    unavailable_rows = []
    for label, name, device, boost_value in main.runs:
        reason = _merged_reason(label, results)
        if reason is None:
            continue
        unavailable[label] = reason
        unavailable_rows.append(unavailable_row(experiment=exp.name, run=run_name, decoder=label, decoder_name=name,
                                                device=device, reason=reason, env=env, boost_value=boost_value))
    rows = merged + per_rank + unavailable_rows
    labels = [label for label, *_ in main.runs]
    shards = {
        dataset: [{"rank": res.rank, "host": res.host, "utterances": len(res.shard_ids.get(dataset, [])),
                   "audio_seconds": next((x.audio_seconds for x in res.rows if x.dataset == dataset), 0.0)}
                  for res in results]
        for dataset in main.manifest_ids
    }
    run_dir = RunDirectory(exp.output_dir, exp.name, run_name)
    with run_dir:
        with run_dir.open_hyps() as f:
            for dataset, ids in main.manifest_ids.items():
                lines = [line for res in results for line in res.hyps.get(dataset, [])]
                f.writelines(ordered_hypothesis_lines(ids, exp.batch_size, labels, lines))
        run_dir.write_results(rows)
        run_dir.write_output_manifests()
        run_dir.write_config({
            "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
            "decoders": main.decoders,
            "unavailable": unavailable,
            "environment": env,
            "command": " ".join(sys.argv),
            "distributed": {"world_size": world, "backend": backend, "hosts": env["hosts"],
                            "sharding": "by audio duration, longest first onto the least-loaded rank",
                            "shards": shards},
            **(extra_config or {}),
        })
    log.info("wrote %s (%d ranks)", run_dir.final_path, world)
    return RunOutput(run_dir=run_dir.final_path, rows=rows, unavailable=unavailable)
