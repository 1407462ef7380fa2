"""Build the decoding graphs of a workload: TLG + HLG for every topology and token set, in every format.

CLI (Hydra app, staged: a stage whose output exists is skipped; `force=true` rebuilds):
    python -m recipes.build_graphs workload.scale=tiny
    python -m recipes.build_graphs workload.scale=bench token_kinds=[bpe] blanks=[last] topologies=[compact]
    python -m recipes.build_graphs arpa=/path/3-gram.pruned.3e-7.arpa.gz nemo_model=stt_en_conformer_ctc_small \
        out_root=data/graphs/librispeech        # LibriSpeech-style recipe (NeMo tokenizer + an ARPA)

Output: <out_root>/<scale>/<tokenkind>_blank<first|last>/<topology>/{TLG.fst, TLG.bin, HLG.bin, HLG.pt,
HLG.k2.txt, words.txt, tokens.txt, tokens_k2.txt, lexicon.txt, graph_info.json} (see recipes.graphs.build).
Library: `build_graphs(workload=..., scale=..., token_kind=..., blank=..., topologies=[...])`.
"""
from __future__ import annotations

import hashlib
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from recipes.graphs.build import DEFAULT_MAX_HLG_ARCS, build_token_set_graphs, token_set_dir_name
from recipes.graphs.build import file_sha256  # noqa: F401 - the file digest graph_info.json's sources record
from recipes.graphs.info import size_table
from recipes.graphs.topologies import TOPOLOGIES
from recipes.tokens import TokenSet

log = logging.getLogger(__name__)

TOKEN_KINDS = ("char", "bpe")
BLANKS = ("first", "last")


def token_set_root(out_root: str | Path, scale: str, tokens: TokenSet) -> Path:
    """Where `build_graphs` puts every topology of one (scale, token set)."""
    return Path(out_root) / str(scale) / token_set_dir_name(tokens)


def graph_dir(out_root: str | Path, scale: str, tokens: TokenSet, topology: str) -> Path:
    """Where `build_graphs` puts the graphs of one (scale, token set, topology): the one naming rule that
    consumers (the evaluation harness) use to find them."""
    return token_set_root(out_root, scale, tokens) / str(topology)


def tokens_sha256(tokens: TokenSet) -> str:
    """The token-inventory digest graph_info.json's sources record (`tokens_sha256`)."""
    return hashlib.sha256("\n".join(tokens.tokens).encode()).hexdigest()[:16]


def _check(name: str, values: Sequence[str], allowed: Sequence[str]) -> list[str]:
    values = [values] if isinstance(values, str) else list(values)
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ValueError(f"{name} must be a non-empty subset of {list(allowed)}, got {values}")
    return values


def build_graphs(
    workload: Any = None,
    scale: str = "tiny",
    token_kind: Optional[str] = None,
    blank: Optional[str] = None,
    topologies: Sequence[str] = TOPOLOGIES,
    out_root: str | Path = "data/graphs",
    *,
    token_kinds: Optional[Sequence[str]] = None,
    blanks: Optional[Sequence[str]] = None,
    force: bool = False,
    max_order: int = -1,
    max_hlg_arcs: int = DEFAULT_MAX_HLG_ARCS,
    push_labels: bool = False,
    workload_root: str | Path = "data/workload",
) -> dict:
    """Build (or reuse) graphs for a workload. Returns {(scale, token dir, topology): graph_info}.

    workload: a `recipes.workload.Workload` (default: `prepare_workload(scale)`).
    token_kind/blank: one token set; token_kinds/blanks: several (default: both kinds, blank last).
    """
    if workload is None:
        from recipes.workload import prepare_workload

        workload = prepare_workload(scale=scale, root=workload_root)
    scale = str(getattr(workload, "scale", scale))
    kinds = _check("token_kinds", [token_kind] if token_kind else (token_kinds or list(TOKEN_KINDS)), TOKEN_KINDS)
    blank_list = _check("blanks", [blank] if blank else (blanks or ["last"]), BLANKS)
    topos = _check("topologies", topologies, TOPOLOGIES)
    words = workload.words()
    infos = {}
    for kind in kinds:
        for b in blank_list:
            tokens = workload.token_set(kind, b)
            out_dir = token_set_root(out_root, scale, tokens)
            t0 = time.perf_counter()
            res = build_token_set_graphs(out_dir, tokens, words, Path(workload.arpa_path), topologies=topos,
                                         force=force, max_order=max_order, max_hlg_arcs=max_hlg_arcs,
                                         push_labels=push_labels)
            log.info("graphs for %s/%s ready in %.1f s", scale, token_set_dir_name(tokens), time.perf_counter() - t0)
            for topo, info in res.items():
                infos[(scale, token_set_dir_name(tokens), topo)] = info
    return infos


def build_graphs_for_model(
    arpa_path: str | Path,
    out_dir: str | Path,
    *,
    nemo_model: Optional[str] = None,
    sp_model_path: Optional[str] = None,
    words_path: Optional[str | Path] = None,
    blank: str = "last",
    topologies: Sequence[str] = TOPOLOGIES,
    force: bool = False,
) -> dict:
    """LibriSpeech-style recipe: a NeMo tokenizer (a `.nemo` file / model name via recipes.nemo_tokenizer, or
    a sentencepiece model) + an ARPA (e.g. 3-gram.pruned.3e-7.arpa.gz). Words default to the ARPA unigrams."""
    if nemo_model:
        from recipes import nemo_tokenizer

        tokens = nemo_tokenizer.token_set_from_nemo(nemo_model)  # raises clearly if NeMo/model unavailable
    elif sp_model_path:
        tokens = TokenSet.from_sentencepiece(sp_model_path, blank=blank)
    else:
        raise ValueError("build_graphs_for_model: give nemo_model or sp_model_path")
    from recipes.graphs.symbols import read_arpa_words

    words = read_arpa_words(arpa_path) if words_path is None else \
        [l.split()[0] for l in open(words_path, encoding="utf-8") if l.strip()]
    return build_token_set_graphs(Path(out_dir) / token_set_dir_name(tokens), tokens, words, Path(arpa_path),
                                  topologies=topologies, force=force)


# ---------------------------------------------------------------------------------------------- CLI
@dataclass
class WorkloadRef:
    scale: str = "tiny"
    root: str = "data/workload"


@dataclass
class BuildGraphsConfig:
    workload: WorkloadRef = field(default_factory=WorkloadRef)
    token_kinds: list = field(default_factory=lambda: list(TOKEN_KINDS))
    blanks: list = field(default_factory=lambda: ["last"])
    topologies: list = field(default_factory=lambda: list(TOPOLOGIES))
    out_root: str = "data/graphs"
    force: bool = False
    max_order: int = -1
    max_hlg_arcs: int = DEFAULT_MAX_HLG_ARCS  # refuse epsilon-free HLGs estimated above this many arcs
    push_labels: bool = False  # OpenFst label pushing of LG (pynini): words as early as possible
    # LibriSpeech-style recipe (instead of the embedded workload) when `arpa` is set
    arpa: Optional[str] = None
    nemo_model: Optional[str] = None
    sp_model: Optional[str] = None
    words: Optional[str] = None


def main(argv: Optional[list[str]] = None) -> None:
    import hydra
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="build_graphs_cli", node=BuildGraphsConfig)
    argv = list(sys.argv[1:] if argv is None else argv)

    @hydra.main(version_base=None, config_name="build_graphs_cli")
    def _app(cfg: BuildGraphsConfig) -> None:
        c = OmegaConf.to_object(cfg)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True)
        # hydra's "disabled" job logging disables loggers that existed when it configured logging (ours):
        # re-enable them so that the size of every graph after every FST step is logged
        for name in list(logging.root.manager.loggerDict):
            if name.startswith("recipes"):
                logging.getLogger(name).disabled = False
        t0 = time.perf_counter()
        if c.arpa:
            infos = build_graphs_for_model(c.arpa, c.out_root, nemo_model=c.nemo_model, sp_model_path=c.sp_model,
                                           words_path=c.words, blank=c.blanks[0], topologies=c.topologies,
                                           force=c.force)
            infos = {("model", "-", t): v for t, v in infos.items()}
        else:
            infos = build_graphs(scale=c.workload.scale, workload_root=c.workload.root, token_kinds=c.token_kinds,
                                 blanks=c.blanks, topologies=c.topologies, out_root=c.out_root, force=c.force,
                                 max_order=c.max_order, max_hlg_arcs=c.max_hlg_arcs, push_labels=c.push_labels)
        print(size_table(infos))
        print(f"total {time.perf_counter() - t0:.1f} s")

    from recipes.cli import run_hydra_app

    run_hydra_app(_app, argv)


if __name__ == "__main__":
    main()
