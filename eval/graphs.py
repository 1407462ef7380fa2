"""Decoding graphs for an evaluation run: where they are, whether they fit the run's tokens and LM, and
building them (through `recipes.build_graphs`) when they are missing or stale.

The directory naming and the content digests are recipes' own (`recipes.build_graphs.graph_dir`,
`file_sha256`, `tokens_sha256`), so a graph built by `python -m recipes.build_graphs` and one built on
demand here are found and checked by the same rule.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from recipes.build_graphs import (build_graphs, build_graphs_for_tokens, file_sha256, graph_dir, model_graphs_root,
                                  read_words, tokens_sha256)
from recipes.tokens import TokenSet

log = logging.getLogger(__name__)

# decoders that read a decoding graph (TLG/HLG); graphs are built only when one of them runs
GRAPH_DECODERS = frozenset({"k2py", "k2", "kaldi", "riva", "wfst"})


def _value(v: Any) -> str:
    return str(getattr(v, "value", v))


def graph_dir_for(cfg: DictConfig, tokens: TokenSet, workload: Any = None,
                  arpa_path: Optional[Path] = None) -> Optional[Path]:
    """`graph.graph_dir` when set; for the embedded workload recipes' directory for (data.scale, tokens,
    graph.topology); for a user's model and manifests (no workload) the content-addressed directory of (the model's
    tokens, the ARPA, the word list) under `<graph.root>/user/` (recipes.build_graphs.model_graphs_root), or None
    when there is no ARPA to build from."""
    if cfg.graph.graph_dir:
        return Path(cfg.graph.graph_dir)
    if workload is None and cfg.data.manifests:
        if arpa_path is None or not Path(arpa_path).is_file():
            return None
        words = read_words(cfg.data.words_path, arpa_path)
        return model_graphs_root(cfg.graph.root, tokens, arpa_path, words) / _value(cfg.graph.topology)
    return graph_dir(cfg.graph.root, str(cfg.data.scale), tokens, _value(cfg.graph.topology))


def no_graph_reason(cfg: DictConfig, arpa_path: Optional[Path]) -> str:
    """Why a user's run (manifests, no workload) has no graph directory: no LM to build one from."""
    if arpa_path is None:
        return ("graph decoders need an LM: set data.arpa_path=<ARPA> (graphs for the model's tokens are then built "
                "and cached under graph.root/user/), or graph.graph_dir=<a built graph directory>")
    return f"LM {arpa_path} does not exist"


def graph_mismatch(graph_dir_: Path, arpa_path: Optional[Path], tokens: Optional[TokenSet] = None) -> Optional[str]:
    """Why `graph_dir_` does not fit (another token set, another LM), else None.

    Graph directories are keyed by scale and token set, not by workload copy or generator version, so a
    graph is checked against the contents it was built from (graph_info.json's `sources` digests) and is
    never reused silently."""
    info_path = graph_dir_ / "graph_info.json"
    if not info_path.is_file():
        return f"no {info_path}"
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"unreadable {info_path}: {e}"
    if not isinstance(info, dict):
        return f"{info_path} is not a JSON object"
    sources = info.get("sources")
    if not isinstance(sources, dict):
        return f"{info_path} records no sources (built by an older recipe); rebuild the graphs"
    if tokens is not None:
        want = (tokens.kind, tokens.blank_id, tokens.vocab_size)
        have = (info.get("token_kind"), info.get("blank_id"), info.get("vocab_size"))
        if have != want:
            return f"built for tokens (kind, blank, V)={have}, the acoustic source has {want}"
        if sources.get("tokens_sha256") != tokens_sha256(tokens):
            return "built for another token inventory (tokens_sha256 differs: e.g. a retrained BPE model)"
    if arpa_path is not None:
        if not Path(arpa_path).is_file():
            return f"LM {arpa_path} does not exist"
        if sources.get("arpa_sha256") != file_sha256(arpa_path):
            return f"built from another LM: {arpa_path} changed since the graphs were built (arpa_sha256 differs)"
    return None


def prepare_graphs(cfg: DictConfig, workload: Any, graph_dir_: Path, tokens: TokenSet,
                   arpa_path: Optional[Path]) -> Optional[str]:
    """Make sure `graph_dir_` holds graphs for this run's LM and token set: build them when missing, rebuild
    (force) when stale. Returns None when usable graphs are there, else the reason (graph decoders are then
    listed as unavailable with it)."""
    exists = (graph_dir_ / "graph_info.json").is_file()
    stale = graph_mismatch(graph_dir_, arpa_path, tokens) if exists else None
    if exists and stale is None:
        return None
    what = f"graphs in {graph_dir_} do not fit ({stale})" if stale else f"no graphs at {graph_dir_}"
    if not cfg.graph.build_if_missing:
        return f"{what} and graph.build_if_missing=false"
    if cfg.graph.graph_dir:
        return (f"{what}; graph.graph_dir is an explicit directory, which the harness does not build into (build "
                f"with: python -m recipes.build_graphs arpa=<ARPA> nemo_model=<.nemo>|tokens=<tokens.txt> "
                f"out_root=<dir>, or leave graph.graph_dir unset to build under graph.root)")
    if workload is None:
        if arpa_path is None:
            return no_graph_reason(cfg, arpa_path)
        log.info("%s: building graphs for the model's tokens and %s (minutes at the first run, cached afterwards)",
                 what, arpa_path)
        build_graphs_for_tokens(tokens, arpa_path, graph_dir_.parent, words=read_words(cfg.data.words_path, arpa_path),
                                topologies=[_value(cfg.graph.topology)], force=bool(stale))
        if not (graph_dir_ / "graph_info.json").is_file():
            raise RuntimeError(f"recipes.build_graphs ran but {graph_dir_}/graph_info.json is missing")
        return graph_mismatch(graph_dir_, arpa_path, tokens)
    log.info("%s: building them (minutes at the first run, cached afterwards)", what)
    from recipes.cli import quiet_native_output

    with quiet_native_output():
        build_graphs(
            workload=workload, scale=str(cfg.data.scale), token_kind=tokens.kind, blank=_blank_position(tokens),
            topologies=[_value(cfg.graph.topology)], out_root=Path(cfg.graph.root), force=bool(stale),
        )
    if not (graph_dir_ / "graph_info.json").is_file():
        raise RuntimeError(f"recipes.build_graphs ran but {graph_dir_}/graph_info.json is missing")
    return graph_mismatch(graph_dir_, arpa_path, tokens)


def _blank_position(tokens: TokenSet) -> str:
    if tokens.blank_id == 0:
        return "first"
    if tokens.blank_id == tokens.vocab_size - 1:
        return "last"
    raise ValueError(f"building graphs needs the blank first or last, the token set has blank_id {tokens.blank_id}")
