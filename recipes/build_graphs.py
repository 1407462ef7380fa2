"""Build the decoding graphs of a workload: TLG + HLG for every topology and token set, in every format.

CLI (Hydra app, staged: a stage whose output exists is skipped; `force=true` rebuilds):
    python -m recipes.build_graphs workload.scale=tiny
    python -m recipes.build_graphs workload.scale=bench token_kinds=[bpe] blanks=[last] topologies=[compact]
    python -m recipes.build_graphs arpa=/path/3-gram.pruned.3e-7.arpa.gz nemo_model=stt_en_conformer_ctc_small \
        out_root=data/graphs/librispeech        # LibriSpeech-style recipe (NeMo tokenizer + an ARPA)
    python -m recipes.build_graphs arpa=lm.arpa tokens=tokens.txt lexicon=lexicon.txt out_root=data/graphs/mine
        # the field's inputs (torchaudio ctc_decoder(lexicon, tokens, lm), icefall lang_dir): a token table in
        # column order (k2 "symbol id" lines or torchaudio's one symbol per line) and a lexicon ("word t1 t2 ...")
    python -m recipes.build_graphs arpa=lm.arpa tokens=chars.txt out_root=data/graphs/mine    # a character model:
        # words (the ARPA's unigrams, or words=) spelled letter by letter; also nemo_model=<char .nemo>
With `arpa=` the token set comes from exactly one of nemo_model= (a .nemo path or a pretrained name), sp_model=
(a sentencepiece model, blank=`blanks[0]`) or tokens= (a token table; token_kind=char|bpe when the symbols do not
tell); options of the embedded workload (workload.*, token_kinds) are refused then, as is lexicon= without arpa=.

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


def model_token_set(*, nemo_model: Optional[str] = None, sp_model_path: Optional[str] = None,
                    tokens_path: Optional[str] = None, token_kind: Optional[str] = None, blank: str = "last",
                    lexicon_path: Optional[str] = None) -> TokenSet:
    """The token set of a user's model from exactly one of: a NeMo model (`.nemo` path or pretrained name), a
    sentencepiece model, a token table (`TokenSet.from_tokens_file`). `lexicon_path`: the user's lexicon, checked
    against the tokens and attached (`TokenSet.lexicon`), so graph recipes spell words with it."""
    given = [n for n, v in (("nemo_model", nemo_model), ("sp_model", sp_model_path), ("tokens", tokens_path)) if v]
    if len(given) != 1:
        raise ValueError("graphs for a model's tokens need exactly one of nemo_model=<.nemo or pretrained name>, "
                         f"sp_model=<sentencepiece .model>, tokens=<tokens.txt>; got {given or 'none'}")
    if token_kind is not None and not tokens_path:
        raise ValueError(f"token_kind applies to tokens=<tokens.txt> only; {given[0]} defines its own kind")
    if nemo_model:
        from recipes import nemo_tokenizer

        tokens = nemo_tokenizer.token_set_from_nemo(nemo_model)  # raises clearly if NeMo/model unavailable
    elif sp_model_path:
        if not Path(sp_model_path).is_file():
            raise FileNotFoundError(f"sentencepiece model not found: {sp_model_path}")
        tokens = TokenSet.from_sentencepiece(sp_model_path, blank=blank)
    else:
        tokens = TokenSet.from_tokens_file(tokens_path, kind=token_kind)
    if lexicon_path:
        from recipes.lexicon import check_lexicon, read_lexicon

        tokens.lexicon = check_lexicon(read_lexicon(lexicon_path), tokens, where=str(lexicon_path))
    elif tokens.kind == "bpe" and not tokens.sp_model_path:
        raise ValueError(f"{tokens_path}: a BPE token table without its sentencepiece model cannot spell words; give "
                         "lexicon=<lexicon.txt> (or sp_model= instead of tokens=)")
    return tokens


def user_inputs_digest(tokens: TokenSet, arpa_path: str | Path, words: Sequence[str]) -> str:
    """What a user's graphs are built from, as one digest: tokens, ARPA contents, word list, lexicon."""
    h = hashlib.sha256()
    h.update(tokens_sha256(tokens).encode())
    h.update(str(tokens.blank_id).encode())
    h.update(file_sha256(arpa_path).encode())
    h.update("\n".join(words).encode())
    if tokens.lexicon is not None:
        h.update(repr(sorted(tokens.lexicon.items())).encode())
    if tokens.sp_model_path:
        h.update(file_sha256(tokens.sp_model_path).encode())
    return h.hexdigest()[:12]


def read_words(words_path: Optional[str | Path], arpa_path: str | Path) -> list[str]:
    """The graph's words: a word list ("word ..." per line) when given, else the ARPA's unigrams."""
    if words_path is None:
        from recipes.graphs.symbols import read_arpa_words

        return read_arpa_words(arpa_path)
    if not Path(words_path).is_file():
        raise FileNotFoundError(f"word list not found: {words_path}")
    return [line.split()[0] for line in open(words_path, encoding="utf-8") if line.strip()]


def model_graphs_root(out_root: str | Path, tokens: TokenSet, arpa_path: str | Path,
                      words: Sequence[str]) -> Path:
    """Where the graphs of a user's (tokens, ARPA, words, lexicon) go under `out_root`: content-addressed
    (`user/<tokenkind>_blank<pos>-<digest>`), so another model or LM never reuses them and the same inputs always
    find them again; the topologies are folders below."""
    return Path(out_root) / "user" / f"{token_set_dir_name(tokens)}-{user_inputs_digest(tokens, arpa_path, words)}"


def build_graphs_for_tokens(tokens: TokenSet, arpa_path: str | Path, out_dir: str | Path, *,
                            words: Optional[Sequence[str]] = None, topologies: Sequence[str] = TOPOLOGIES,
                            force: bool = False, quiet: bool = True) -> dict:
    """Graphs of every topology in `topologies` for a user's token set and ARPA, into `out_dir/<topology>`.
    A stamp (`user_inputs.json`: the digest of tokens, ARPA, words and lexicon) makes a re-run with other inputs
    rebuild instead of keeping graphs of the old ones. `quiet`: kaldilm's parser log lines are dropped."""
    import json

    from recipes.cli import quiet_native_output

    arpa_path = Path(arpa_path)
    if not arpa_path.is_file():
        raise FileNotFoundError(f"ARPA LM not found: {arpa_path}")
    words = list(words) if words is not None else read_words(None, arpa_path)
    out_dir = Path(out_dir)
    digest = user_inputs_digest(tokens, arpa_path, words)
    stamp = out_dir / "user_inputs.json"
    if stamp.is_file() and json.loads(stamp.read_text(encoding="utf-8")).get("digest") != digest:
        log.info("graph inputs changed since %s was built (tokens, LM, words or lexicon): rebuilding", out_dir)
        force = True
    with quiet_native_output(quiet):
        infos = build_token_set_graphs(out_dir, tokens, words, arpa_path, topologies=topologies, force=force)
    stamp.write_text(json.dumps({"digest": digest, "arpa": str(arpa_path), "token_kind": tokens.kind,
                                 "user_lexicon": tokens.lexicon is not None}) + "\n", encoding="utf-8")
    return infos


def build_graphs_for_model(
    arpa_path: str | Path,
    out_dir: str | Path,
    *,
    nemo_model: Optional[str] = None,
    sp_model_path: Optional[str] = None,
    tokens_path: Optional[str] = None,
    token_kind: Optional[str] = None,
    lexicon_path: Optional[str] = None,
    words_path: Optional[str | Path] = None,
    blank: str = "last",
    topologies: Sequence[str] = TOPOLOGIES,
    force: bool = False,
    quiet: bool = True,
) -> dict:
    """LibriSpeech-style recipe: a model's tokens (`model_token_set`: a NeMo model, a sentencepiece model or a token
    table, optionally with the user's lexicon) + an ARPA (e.g. 3-gram.pruned.3e-7.arpa.gz). Words default to the
    ARPA unigrams. Output: `out_dir/<tokenkind>_blank<pos>/<topology>`."""
    tokens = model_token_set(nemo_model=nemo_model, sp_model_path=sp_model_path, tokens_path=tokens_path,
                             token_kind=token_kind, blank=blank, lexicon_path=lexicon_path)
    return build_graphs_for_tokens(tokens, arpa_path, Path(out_dir) / token_set_dir_name(tokens),
                                   words=read_words(words_path, arpa_path), topologies=topologies, force=force,
                                   quiet=quiet)


# ---------------------------------------------------------------------------------------------- CLI
@dataclass
class WorkloadRef:
    scale: str = "tiny"
    root: str = "data/workload"


@dataclass
class BuildGraphsConfig:
    workload: WorkloadRef = field(default_factory=WorkloadRef)
    token_kinds: Optional[list] = None  # the workload's token sets; default: both kinds
    blanks: Optional[list] = None  # default: ["last"]
    topologies: list = field(default_factory=lambda: list(TOPOLOGIES))
    out_root: str = "data/graphs"
    force: bool = False
    max_order: int = -1
    max_hlg_arcs: int = DEFAULT_MAX_HLG_ARCS  # refuse epsilon-free HLGs estimated above this many arcs
    push_labels: bool = False  # OpenFst label pushing of LG (pynini): words as early as possible
    # a model's own recipe (instead of the embedded workload) when `arpa` is set; tokens from exactly one of
    # nemo_model / sp_model / tokens
    arpa: Optional[str] = None
    nemo_model: Optional[str] = None
    sp_model: Optional[str] = None
    tokens: Optional[str] = None  # token table (k2 "symbol id" or torchaudio one symbol per line)
    token_kind: Optional[str] = None  # char | bpe, for tokens= (default: from the symbols)
    lexicon: Optional[str] = None  # "word t1 t2 ..." per line (Kaldi/icefall/torchaudio)
    words: Optional[str] = None
    verbose: bool = False  # show kaldilm's parser log lines


def check_cli_config(c: BuildGraphsConfig) -> None:
    """Options that would do nothing are refused (one line) instead of being ignored."""
    model_opts = {"nemo_model": c.nemo_model, "sp_model": c.sp_model, "tokens": c.tokens, "lexicon": c.lexicon,
                  "token_kind": c.token_kind, "words": c.words}
    if c.arpa:
        if c.token_kinds is not None:
            raise ValueError("token_kinds picks the embedded workload's token sets and does nothing with arpa=; the "
                             "token set comes from nemo_model=, sp_model= or tokens= (token_kind=char|bpe for tokens=)")
        if c.workload != WorkloadRef():
            raise ValueError("workload.* selects the embedded workload and does nothing with arpa=")
        if c.blanks is not None and (len(c.blanks) != 1 or not c.sp_model):
            raise ValueError("with arpa=, blanks=[first|last] applies to sp_model= only (one value); nemo_model= and "
                             "tokens= define the blank position themselves")
        if not (c.nemo_model or c.sp_model or c.tokens):
            raise ValueError("arpa= builds graphs for your model's tokens: also give nemo_model=<.nemo or pretrained "
                             "name>, sp_model=<sentencepiece .model> or tokens=<tokens.txt> (with lexicon=<lexicon.txt> "
                             "for a BPE token table); without arpa= the embedded workload's graphs are built")
    else:
        given = [k for k, v in model_opts.items() if v]
        if given:
            raise ValueError(f"{', '.join(k + '=' for k in given)} {'need' if len(given) > 1 else 'needs'} arpa=<ARPA LM> "
                             "(the model recipe); without arpa= the embedded "
                             "workload's own tokens, lexicon and LM are used")


def main(argv: Optional[list[str]] = None) -> None:
    import hydra
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="build_graphs_cli", node=BuildGraphsConfig)
    argv = list(sys.argv[1:] if argv is None else argv)

    from recipes.cli import one_line_errors

    @hydra.main(version_base=None, config_name="build_graphs_cli")
    @one_line_errors
    def _app(cfg: BuildGraphsConfig) -> None:
        c = OmegaConf.to_object(cfg)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True)
        # hydra's "disabled" job logging disables loggers that existed when it configured logging (ours):
        # re-enable them so that the size of every graph after every FST step is logged
        for name in list(logging.root.manager.loggerDict):
            if name.startswith("recipes"):
                logging.getLogger(name).disabled = False
        t0 = time.perf_counter()
        check_cli_config(c)
        _check("topologies", c.topologies, TOPOLOGIES)
        if c.arpa:
            infos = build_graphs_for_model(c.arpa, c.out_root, nemo_model=c.nemo_model, sp_model_path=c.sp_model,
                                           tokens_path=c.tokens, token_kind=c.token_kind, lexicon_path=c.lexicon,
                                           words_path=c.words, blank=(c.blanks or ["last"])[0],
                                           topologies=c.topologies, force=c.force, quiet=not c.verbose)
            infos = {("model", "-", t): v for t, v in infos.items()}
        else:
            from recipes.cli import quiet_native_output

            with quiet_native_output(not c.verbose):
                infos = build_graphs(scale=c.workload.scale, workload_root=c.workload.root,
                                     token_kinds=c.token_kinds or list(TOKEN_KINDS), blanks=c.blanks or ["last"],
                                     topologies=c.topologies, out_root=c.out_root, force=c.force,
                                     max_order=c.max_order, max_hlg_arcs=c.max_hlg_arcs, push_labels=c.push_labels)
        print(size_table(infos))
        print(f"total {time.perf_counter() - t0:.1f} s")

    from recipes.cli import run_hydra_app, user_wants_traceback

    user_wants_traceback()
    run_hydra_app(_app, argv)


if __name__ == "__main__":
    main()
