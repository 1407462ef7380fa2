"""The decoder protocol every decoder and baseline implements, and the registry that builds them.

A decoder is built from (its own config dict, a `DecodingContext` describing the workload's tokens,
graph and LM artefacts) and maps a batch of log-probs to hypotheses:

    decoder = build_decoder("greedy", cfg, ctx)
    hyps: list[Hypothesis] = decoder.decode(log_probs, lengths, boosts=None)

log_probs: (B, T, V) natural-log posteriors (float32/float16, any device); lengths: (B,) int.
`boosts`: optional per-utterance {word: boost} (log-domain, positive favours the word); decoders that
cannot boost raise `NotImplementedError` when given non-empty boosts.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import threading
import typing
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

import torch

from decoders.types import Hypothesis
from recipes.tokens import TokenSet

# name -> module that registers it (imported on demand)
ADAPTER_MODULES: dict[str, str] = {
    "greedy": "eval.adapters.greedy",
    "flashlight": "eval.adapters.flashlight",
    "k2py": "eval.adapters.k2py_adapter",
    "k2": "eval.adapters.k2_adapter",
    "kaldi": "eval.adapters.kaldi_decoder_adapter",
    "riva": "eval.adapters.riva",
    "ctc_beam": "eval.adapters.ctc_beam",
    "wfst": "eval.adapters.wfst",
    "torchaudio_ctc": "eval.adapters.torchaudio_ctc",
    "ctc_lm": "eval.adapters.ctc_lm",
    "nemo_greedy": "eval.adapters.nemo_greedy",
    "nemo_beam": "eval.adapters.nemo_ctc",
    "pyctcdecode": "eval.adapters.pyctcdecode_adapter",
}

_REGISTRY: dict[str, Callable[..., "Decoder"]] = {}


@dataclass
class DecodingContext:
    """Everything a decoder may need besides log-probs; fields a decoder doesn't use are ignored."""

    tokens: TokenSet
    device: str = "cpu"
    graph_dir: Optional[Path] = None  # recipes' output for this token set (TLG/HLG in every format)
    arpa_path: Optional[Path] = None
    lexicon_path: Optional[Path] = None
    words_path: Optional[Path] = None
    extra: dict = field(default_factory=dict)


@runtime_checkable
class Decoder(Protocol):
    name: str

    def decode(
        self,
        log_probs: torch.Tensor,
        lengths: torch.Tensor,
        boosts: Optional[Sequence[dict]] = None,
    ) -> list[Hypothesis]: ...


def pop_stats(decoder: Any) -> dict:
    """Counters since the last call from `decoder.pop_stats()` when the decoder has one (e.g. {"overflow_count": n,
    "partial_count": m, "rescued_count": r}); numeric values only. The runner and the benchmarks read them here."""
    pop = getattr(decoder, "pop_stats", None)
    if not callable(pop):
        return {}
    return {k: v for k, v in (pop() or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def register_decoder(name: str):
    def wrap(factory):
        _REGISTRY[name] = factory
        return factory

    return wrap


def available_decoders() -> list[str]:
    return sorted(ADAPTER_MODULES)


def build_decoder(name: str, cfg: Any, ctx: DecodingContext) -> Decoder:
    """Build decoder `name` from `cfg` (a dict / DictConfig / schema instance of overrides). Every adapter
    layers `cfg` over its schema and conf/decoder/<name>.yaml first (`typed_config`), so it reads a complete,
    typed config and carries no default of its own."""
    if name not in ADAPTER_MODULES:
        raise ValueError(f"unknown decoder {name!r}; valid choices: {available_decoders()}")
    if name not in _REGISTRY:
        importlib.import_module(ADAPTER_MODULES[name])
    if name not in _REGISTRY:
        raise RuntimeError(f"module {ADAPTER_MODULES[name]} did not register decoder {name!r}")
    return _REGISTRY[name](cfg, ctx)


def typed_config(name: str, cfg: Any):
    """Decoder `name`'s complete config: schema <- conf/decoder/<name>.yaml <- `cfg` (`eval.config.decoder_config`).
    Adapters call it first thing, whether built by `build_decoder` or constructed directly."""
    from eval.config import decoder_config

    return decoder_config(name, cfg)


# ---------------------------------------------------------------------------------------------------------
# Adapter schemas built from the decoder library's own config dataclass
# ---------------------------------------------------------------------------------------------------------

# Library config fields the harness fills from the run's context rather than from the YAML: the one list of
# such exclusions (tests/test_eval_config.py checks YAML == schema == library fields minus these).
CONTEXT_FIELDS: dict[str, dict[str, str]] = {
    "wfst": {"blank_id": "the acoustic source's token set (DecodingContext.tokens.blank_id)"},
    "ctc_beam": {
        "blank_id": "the acoustic source's token set (DecodingContext.tokens.blank_id)",
        "nbest": "1: the harness scores the best hypothesis",
    },
    "ctc_lm": {
        "blank_id": "the acoustic source's token set (DecodingContext.tokens.blank_id)",
        "nbest": "1: the harness scores the best hypothesis",
    },
}


def adapter_schema(decoder: str, library_config: type, adapter_fields: Sequence[tuple]) -> type:
    """The adapter's CONFIG_SCHEMA: `adapter_fields` ((name, type, default) of adapter-only settings, `name`
    first) followed by every field of the decoder library's config dataclass with its type and default,
    except CONTEXT_FIELDS[decoder]. Flat (not nested) so `decoder.search_beam=8` addresses the library field
    directly on the command line; the library dataclass stays the one declaration of its fields."""
    skip = set(CONTEXT_FIELDS.get(decoder, {}))
    types = typing.get_type_hints(library_config)  # real types, not the strings of `from __future__ import annotations`
    spec = [(n, t, field(default=d)) for n, t, d in adapter_fields]
    for f in dataclasses.fields(library_config):
        if f.name in skip:
            continue
        if f.default is MISSING:
            raise TypeError(f"{library_config.__name__}.{f.name} has no default; the harness needs one per field")
        spec.append((f.name, types[f.name], field(default=f.default)))
    schema = dataclasses.make_dataclass(f"{library_config.__name__}Adapter", spec)
    schema.library_config = library_config
    schema.adapter_fields = tuple(n for n, _, _ in adapter_fields)
    return schema


def library_config(library: type, cfg: Any, **context: Any):
    """`library`'s config object (e.g. WfstDecoderConfig) from an adapter config built by `adapter_schema`:
    every library field read from `cfg` (no fallbacks: a missing field raises), the CONTEXT_FIELDS values from
    `context`. The library validates the values in its own __post_init__."""
    names = [f.name for f in dataclasses.fields(library) if f.name not in context]
    if isinstance(cfg, Mapping):  # dict / DictConfig
        missing = [n for n in names if n not in cfg]
        if missing:
            raise ValueError(f"{library.__name__}: the adapter config lacks {missing}")
        return library(**{n: cfg[n] for n in names}, **context)
    return library(**{n: getattr(cfg, n) for n in names}, **context)  # a schema instance


def plain_config(cfg: Any) -> dict:
    """An adapter config (DictConfig / schema instance / dict) as a plain dict, e.g. to rebuild the same decoder in
    a worker process."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg)


def picklable_context(ctx: DecodingContext) -> DecodingContext:
    """`ctx` without the token set's loaded sentencepiece processor (not picklable; a worker process reloads it from
    `sp_model_path`): what a spawned worker is given to build its own copy of a decoder."""
    t = ctx.tokens
    return dataclasses.replace(ctx, tokens=TokenSet(list(t.tokens), t.blank_id, t.kind, t.sp_model_path, t.lexicon))


class UtterancePool:
    """A CPU baseline's worker processes (Flashlight's and pyctcdecode's `num_processes`: the paper's "16 CPU
    cores"): `processes` spawned workers, each building its own `cls(cfg, ctx)` with one process (one search per
    process, torch on one thread), started on the first `map` (the harness's untimed warm-up batch absorbs the
    start-up) and stopped by `close()` or when the pool is collected. `map(items)` returns
    `decoder.decode_utterance(*item)` for every item, in order, dealt out one at a time (utterance lengths vary).
    Spawn, not fork: the parent holds torch's thread pools (and maybe CUDA), which a fork can deadlock on. A worker
    that cannot build its decoder reports why on the first item (an exception escaping a Pool initializer would make
    the pool restart the worker forever)."""

    def __init__(self, cls, cfg: Any, ctx: DecodingContext, processes: int):
        self.processes = int(processes)
        self._args = (cls, {**plain_config(cfg), "num_processes": 1}, picklable_context(ctx))
        self._pool = None
        self._finalizer = None

    def map(self, items: Sequence[tuple]) -> list:
        if self._pool is None:
            import multiprocessing
            import weakref

            self._pool = multiprocessing.get_context("spawn").Pool(self.processes, initializer=_pool_worker_init,
                                                                   initargs=self._args)
            self._finalizer = weakref.finalize(self, self._pool.terminate)
        return list(self._pool.imap(_pool_worker_decode, items, chunksize=1))

    def close(self) -> None:
        if self._pool is not None:
            self._finalizer()
            self._pool = None


_POOL_DECODER: Any = None
_POOL_ERROR: Optional[str] = None
_POOL_NAME = "decoder"


def _pool_worker_init(cls, cfg: dict, ctx: DecodingContext) -> None:
    global _POOL_DECODER, _POOL_ERROR, _POOL_NAME
    torch.set_num_threads(1)  # one search per process; P processes share P cores
    _POOL_NAME = cls.__name__
    try:
        _POOL_DECODER = cls(cfg, ctx)
    except Exception as e:  # noqa: BLE001 - reported to the parent by _pool_worker_decode
        _POOL_ERROR = f"{type(e).__name__}: {' '.join(str(e).split())}"


def _pool_worker_decode(item: tuple):
    if _POOL_DECODER is None:
        raise RuntimeError(f"{_POOL_NAME} worker process could not build its decoder: {_POOL_ERROR}")
    return _POOL_DECODER.decode_utterance(*item)


_GRAPH_CACHE: dict = {}
_GRAPH_LOCK = threading.Lock()


def _why_missing(path: Path) -> str:
    """What to do about a missing graph file: the build's own reason when its graph_info.json recorded one (an HLG
    skipped by max_hlg_arcs), else the recipe to run."""
    try:
        info = json.loads((path.parent / "graph_info.json").read_text())
        skipped = info.get(path.name.split(".")[0], {}).get("skipped")
    except (OSError, ValueError, AttributeError):
        skipped = None
    if skipped:
        return (f"this graph directory was built without it: {skipped}; rebuild with recipes.build_graphs "
                "force=true and a larger max_hlg_arcs")
    return "build graphs with recipes.build_graphs"


def load_graph_cached(adapter: str, graph_dir: Path, graph_file: str, loader: Callable[[Path], Any]):
    """`loader(path)` once per (adapter, graph file) and process: parsing a TLG/HLG takes seconds and every
    batch size / boost value of a run builds a fresh adapter. A missing file names the recipe to run."""
    path = Path(graph_dir) / graph_file
    key = (adapter, str(path.resolve()))
    with _GRAPH_LOCK:
        if key not in _GRAPH_CACHE:
            if not path.is_file():
                raise FileNotFoundError(f"{adapter} adapter: {path} not found ({_why_missing(path)})")
            _GRAPH_CACHE[key] = loader(path)
        return _GRAPH_CACHE[key]
