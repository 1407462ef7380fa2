"""Staged graph build for one token set: lang (L, G, LG) once, then TLG/HLG per topology, every format.

Layout (`out_dir` = data/graphs/<scale>/<tokenkind>_blank<first|last>):
  lang/        words.txt tokens.txt lexicon.txt lexicon_disambig.txt L_disambig.fst G.fst LG.fst
               LG_epsfree.fst LG_epsfree.json (compound word labels)
  <topology>/  TLG.fst TLG.bin HLG.bin HLG.pt HLG.k2.txt words.txt tokens.txt tokens_k2.txt lexicon.txt
               graph_info.json (written last: its presence marks the stage as done)
A stage whose outputs exist is skipped (force=True rebuilds).
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import kaldifst
import numpy as np

from decoders.graph import IMAGE_VERSION, image_version
from decoders.openfst import read_openfst, write_openfst_vector

from recipes.graphs.compile import (
    compile_G, compile_HLG, compile_L, compile_LG, compile_TLG, estimate_epsfree_arcs, prepare_LG_for_HLG,
)
from recipes.graphs.convert import hlg_to_graph, tlg_to_graph
from recipes.graphs.fstutil import fst_size, fst_to_arrays
from recipes.graphs.hlg import log_arrays
from recipes.graphs.info import word_label_positions
from recipes.graphs.symbols import TokenTable, WordTable, read_arpa_words
from recipes.graphs.topologies import TOPOLOGIES
from recipes.lexicon import LexiconReport, add_disambig_symbols, build_lexicon, write_lexicon
from recipes.tokens import TokenSet

log = logging.getLogger(__name__)

GRAPH_FILES = ("TLG.fst", "TLG.bin", "HLG.bin", "HLG.pt", "HLG.k2.txt", "words.txt", "tokens.txt",
               "tokens_k2.txt", "lexicon.txt", "graph_info.json")
HLG_FILES = ("HLG.bin", "HLG.pt", "HLG.k2.txt")
DEFAULT_MAX_HLG_ARCS = 20_000_000  # estimated epsilon-free LG arcs above which the HLG is not built (bench char: 19.8M
# estimated, 19.4M built -> 52M-arc HLGs in ~7.7 GB; raise it with the memory to match)
# HLG.k2.txt (k2py's CPU baseline; text, ~35 bytes and a Python f-string per arc) is written up to this many arcs
DEFAULT_MAX_K2_TEXT_ARCS = 20_000_000


def file_sha256(path) -> str:
    """The short file digest graph_info.json's `sources` record (first 16 hex digits of its sha256)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]



def graph_sizes(g) -> dict:
    """A graph's size as graph_info.json records it."""
    return {"states": g.num_states, "arcs": g.num_arcs, "epsilon_arcs": g.num_epsilon_arcs,
            "final_arcs": g.num_final_arcs, "multiword_arcs": g.num_multiword_arcs}


def arrays_size(a) -> dict:
    """An OpenFst graph's size (fstutil.fst_size's fields) from its arrays."""
    return {"states": a.num_states, "arcs": a.num_arcs, "epsilon_arcs": int(np.count_nonzero(a.ilabel == 0)),
            "final_states": int(np.count_nonzero(np.isfinite(a.final)))}


def token_set_dir_name(tokens: TokenSet) -> str:
    pos = "first" if tokens.blank_id == 0 else "last" if tokens.blank_id == tokens.vocab_size - 1 else f"{tokens.blank_id}"
    return f"{tokens.kind}_blank{pos}"


@dataclass
class LangArtifacts:
    lang_dir: Path
    table: TokenTable
    words: WordTable
    LG: object
    LG_epsfree: object  # None when the HLG was refused (see hlg_skipped)
    compounds: list
    sizes: dict = field(default_factory=dict)
    lexicon_report: dict = field(default_factory=dict)
    build_s: float = 0.0
    hlg_skipped: Optional[str] = None
    rebuilt: bool = False  # True when this call (re)built the lang stage: dependent stages rebuild too


def build_lang(
    lang_dir: Path,
    tokens: TokenSet,
    word_list: Sequence[str],
    arpa_path: Path,
    *,
    force: bool = False,
    max_order: int = -1,
    max_hlg_arcs: int = DEFAULT_MAX_HLG_ARCS,
    sources: Optional[dict] = None,
    push_labels: bool = False,
) -> LangArtifacts:
    """Stage 1: lexicon, L, G, LG and the epsilon-free LG' (shared by every topology). The epsilon-free LG'
    (hence the HLG) is refused when its estimated size exceeds max_hlg_arcs (recorded, TLG still built)."""
    lang_dir = Path(lang_dir)
    lang_dir.mkdir(parents=True, exist_ok=True)
    done = lang_dir / "lang_info.json"
    t0 = time.perf_counter()
    meta = json.loads(done.read_text()) if done.exists() else None
    if meta is not None and not force and sources is not None and meta.get("sources") != sources:
        log.info("lang stage: inputs changed since %s was built, rebuilding", lang_dir)
        meta = None
    if meta is not None and not force:
        log.info("lang stage: %s exists, skipping", lang_dir)
        LG = kaldifst.StdVectorFst.read(str(lang_dir / "LG.fst"))
        skipped = meta.get("hlg_skipped")
        LGp = None if skipped else read_openfst(lang_dir / "LG_epsfree.fst")
        words = WordTable(meta["words"])
        table = TokenTable(tokens, meta["num_disambig"])
        return LangArtifacts(lang_dir, table, words, LG, LGp, [tuple(c) for c in meta["compounds"]],
                             meta["sizes"], meta["lexicon_report"], meta["build_s"], skipped)
    arpa_words = read_arpa_words(arpa_path)
    all_words = list(dict.fromkeys(list(word_list) + arpa_words))
    report = LexiconReport()
    lexicon = build_lexicon(all_words, tokens, report=report)
    words = WordTable.from_words(lexicon.keys())
    # keep word order of the table in the lexicon files (deterministic)
    lexicon = {w: lexicon[w] for w in words.words}
    entries, max_disambig = add_disambig_symbols(lexicon)
    table = TokenTable(tokens, num_disambig=max_disambig + 1)  # #0 .. #max
    write_lexicon(lexicon, lang_dir / "lexicon.txt")
    with open(lang_dir / "lexicon_disambig.txt", "w", encoding="utf-8") as f:
        for w, s in entries:
            f.write(w + " " + " ".join("<space>" if t == " " else t for t in s) + "\n")
    words.write(lang_dir / "words.txt")
    table.write(lang_dir / "tokens.txt")
    sizes = {}
    G = compile_G(arpa_path, lang_dir / "words.txt", max_order=max_order)
    sizes["G"] = fst_size(G)
    G.write(str(lang_dir / "G.fst"))
    optional_space = tokens.kind == "char" and " " in tokens.tokens
    L = compile_L(entries, table, words, optional_space=optional_space)
    sizes["L_disambig"] = fst_size(L)
    L.write(str(lang_dir / "L_disambig.fst"))
    LG = compile_LG(L, G, push_labels=push_labels)
    sizes["LG"] = fst_size(LG)
    LG.write(str(lang_dir / "LG.fst"))
    LGa = fst_to_arrays(LG)  # one array copy for the estimate and LG'
    est = estimate_epsfree_arcs(LGa, table)
    sizes["LG_epsfree_estimated_arcs"] = est
    skipped = None
    if est > max_hlg_arcs:
        skipped = (f"epsilon-free LG would have ~{est} arcs (> max_hlg_arcs={max_hlg_arcs}): HLG not built; "
                   "use the TLG (epsilons) or raise max_hlg_arcs")
        log.warning(skipped)
        LGp, compounds = None, []
    else:
        LGp, compounds = prepare_LG_for_HLG(LGa, table, words)
        sizes["LG_epsfree"] = log_arrays("LG'", LGp)
        write_openfst_vector(lang_dir / "LG_epsfree.fst", LGp)
    rep = {"num_words": report.num_words, "num_oov": len(report.oov_words), "oov_words": report.oov_words[:50],
           "max_disambig": max_disambig, "optional_space": optional_space}
    build_s = time.perf_counter() - t0
    done.write_text(json.dumps({"words": words.words, "num_disambig": table.num_disambig, "sizes": sizes,
                                "compounds": [list(c) for c in compounds], "lexicon_report": rep,
                                "build_s": build_s, "hlg_skipped": skipped, "sources": sources}, indent=1))
    return LangArtifacts(lang_dir, table, words, LG, LGp, compounds, sizes, rep, build_s, skipped, rebuilt=True)


def build_topology_graphs(
    out_dir: Path,
    lang: LangArtifacts,
    tokens: TokenSet,
    topology: str,
    *,
    sources: dict,
    arpa_path: Optional[Path] = None,
    force: bool = False,
    max_k2_text_arcs: int = DEFAULT_MAX_K2_TEXT_ARCS,
) -> dict:
    """Stage 2 (per topology): TLG and HLG in every format + graph_info.json (HLG.k2.txt only up to
    max_k2_text_arcs arcs). Returns graph_info."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology must be one of {TOPOLOGIES}, got {topology!r}")
    out_dir = Path(out_dir)
    info_path = out_dir / "graph_info.json"
    needed = [f for f in GRAPH_FILES if not (lang.hlg_skipped and f in HLG_FILES)]
    if info_path.exists() and json.loads(info_path.read_text()).get("HLG", {}).get("k2_text", True) is not True:
        needed.remove("HLG.k2.txt")  # too large for k2 text when it was built (graph_info says so)
    # an image of an older format version is rebuilt, not skipped (the decoder would refuse it)
    stale = [f for f in needed if f.endswith(".bin") and (out_dir / f).exists()
             and image_version(out_dir / f) != IMAGE_VERSION]
    if info_path.exists() and not force and not stale and all((out_dir / f).exists() for f in needed):
        old = json.loads(info_path.read_text())
        if old.get("sources") == sources and not lang.rebuilt:
            log.info("%s: graph_info.json exists, skipping", out_dir)
            return old
        log.info("%s: inputs changed, rebuilding", out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    table, words = lang.table, lang.words
    symbols = words.symbols()
    base_info = {"topology": topology, "token_kind": tokens.kind, "blank_id": tokens.blank_id,
                 "vocab_size": tokens.vocab_size}
    TLG = compile_TLG(lang.LG, topology, table)
    TLG.write(str(out_dir / "TLG.fst"))
    TLG = fst_to_arrays(TLG)
    t_tlg = time.perf_counter() - t0
    tlg = tlg_to_graph(TLG, table, symbols, info={**base_info, "kind": "TLG"})
    tlg.save(out_dir / "TLG.bin")
    tlg_info = {**graph_sizes(tlg), "openfst": arrays_size(TLG), "build_s": round(t_tlg, 3)}
    del tlg, TLG
    t1 = time.perf_counter()
    hlg_info = None
    if lang.LG_epsfree is not None:
        steps = {}
        t = time.perf_counter()
        hlg = hlg_to_graph(compile_HLG(lang.LG_epsfree, topology, table, timings=steps), table, symbols,
                           lang.compounds, info={**base_info, "kind": "HLG"})  # no reference kept to the arrays
        steps["to_graph_s"] = time.perf_counter() - t - steps["compose_s"]
        outputs = [("HLG.bin", hlg.save), ("HLG.pt", hlg.save_k2)]
        k2_text = hlg.num_arcs <= max_k2_text_arcs
        if k2_text:  # multi-word arcs: compound ids in HLG.k2.txt.aux.json
            outputs.append(("HLG.k2.txt", hlg.write_k2_text))
        else:
            for stale in (out_dir / "HLG.k2.txt", out_dir / "HLG.k2.txt.aux.json"):
                stale.unlink(missing_ok=True)
        for name, write in outputs:
            t = time.perf_counter()
            write(out_dir / name)
            steps[f"write_{name}_s"] = time.perf_counter() - t
        hlg_info = {**graph_sizes(hlg), "k2_text": k2_text if k2_text else
                    f"not written: {hlg.num_arcs} arcs > max_k2_text_arcs={max_k2_text_arcs}",
                    "steps_s": {k: round(v, 3) for k, v in steps.items()}}
        log.info("HLG[%s] steps (s): %s", topology, hlg_info["steps_s"])
        del hlg
    t_hlg = time.perf_counter() - t1
    for name in ("words.txt", "tokens.txt", "lexicon.txt"):
        shutil.copyfile(lang.lang_dir / name, out_dir / name)
    tokens.write_tokens_txt(out_dir / "tokens_k2.txt")

    info = {
        **base_info,
        "num_words": words.num_real_words,
        "num_disambig": table.num_disambig,
        "numbering": {"TLG.fst": "Kaldi: <eps>=0, token id = column + 1, then #k (tokens.txt)",
                      "HLG.*": "k2: label = column, -1 = final (tokens_k2.txt)"},
        "TLG": tlg_info,
        "HLG": {**hlg_info, "build_s": round(t_hlg, 3)} if hlg_info is not None else
               {"skipped": lang.hlg_skipped, "estimated_arcs": lang.sizes.get("LG_epsfree_estimated_arcs")},
        "word_label_position_LG": word_label_positions(lang.LG, table, symbols, lang.lang_dir / "lexicon.txt"),
        "lang": {"sizes": lang.sizes, "lexicon": lang.lexicon_report, "build_s": round(lang.build_s, 3)},
        "build_s": round(time.perf_counter() - t0, 3),
        "sources": sources,
        "source_paths": {"arpa": str(arpa_path) if arpa_path else None, "sp_model": tokens.sp_model_path},
    }
    info_path.write_text(json.dumps(info, indent=1))
    log.info("%s: TLG %s | HLG %s", out_dir, tlg_info, hlg_info if hlg_info is not None else lang.hlg_skipped)
    return info


def build_token_set_graphs(
    out_dir: Path,
    tokens: TokenSet,
    word_list: Sequence[str],
    arpa_path: Path,
    *,
    topologies: Sequence[str] = TOPOLOGIES,
    force: bool = False,
    max_order: int = -1,
    max_hlg_arcs: int = DEFAULT_MAX_HLG_ARCS,
    push_labels: bool = False,
    max_k2_text_arcs: int = DEFAULT_MAX_K2_TEXT_ARCS,
) -> dict[str, dict]:
    """All stages for one token set; returns {topology: graph_info}."""
    out_dir = Path(out_dir)
    # content hashes decide whether a stage is up to date (paths may differ between machines/runs)
    sources = {"arpa_sha256": file_sha256(arpa_path),
               "tokens_sha256": hashlib.sha256("\n".join(tokens.tokens).encode()).hexdigest()[:16],
               "blank_id": tokens.blank_id,
               "words_sha256": hashlib.sha256("\n".join(word_list).encode()).hexdigest()[:16],
               "max_order": max_order, "max_hlg_arcs": max_hlg_arcs, "push_labels": push_labels,
               "max_k2_text_arcs": max_k2_text_arcs}
    if tokens.sp_model_path:
        sources["sp_model_sha256"] = file_sha256(tokens.sp_model_path)
    from filelock import FileLock

    out_dir.mkdir(parents=True, exist_ok=True)
    # one builder per token-set directory at a time (the harness may build on demand while a CLI runs)
    with FileLock(str(out_dir / ".build.lock")):
        lang = build_lang(out_dir / "lang", tokens, word_list, arpa_path, force=force, max_order=max_order,
                          max_hlg_arcs=max_hlg_arcs, sources=sources, push_labels=push_labels)
        return {t: build_topology_graphs(out_dir / t, lang, tokens, t, sources=sources, arpa_path=arpa_path,
                                         force=force, max_k2_text_arcs=max_k2_text_arcs)
                for t in topologies}
