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

import importlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence, runtime_checkable

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


def register_decoder(name: str):
    def wrap(factory):
        _REGISTRY[name] = factory
        return factory

    return wrap


def available_decoders() -> list[str]:
    return sorted(ADAPTER_MODULES)


def build_decoder(name: str, cfg: dict[str, Any], ctx: DecodingContext) -> Decoder:
    if name not in ADAPTER_MODULES:
        raise ValueError(f"unknown decoder {name!r}; valid choices: {available_decoders()}")
    if name not in _REGISTRY:
        importlib.import_module(ADAPTER_MODULES[name])
    if name not in _REGISTRY:
        raise RuntimeError(f"module {ADAPTER_MODULES[name]} did not register decoder {name!r}")
    return _REGISTRY[name](cfg, ctx)


_GRAPH_CACHE: dict = {}
_GRAPH_LOCK = threading.Lock()


def load_graph_cached(adapter: str, graph_dir: Path, graph_file: str, loader: Callable[[Path], Any]):
    """`loader(path)` once per (adapter, graph file) and process: parsing a TLG/HLG takes seconds and every
    batch size / boost value of a run builds a fresh adapter. A missing file names the recipe to run."""
    path = Path(graph_dir) / graph_file
    key = (adapter, str(path.resolve()))
    with _GRAPH_LOCK:
        if key not in _GRAPH_CACHE:
            if not path.is_file():
                raise FileNotFoundError(f"{adapter} adapter: {path} not found (build graphs with recipes.build_graphs)")
            _GRAPH_CACHE[key] = loader(path)
        return _GRAPH_CACHE[key]
