"""G, L, LG, TLG and HLG with kaldifst/kaldilm (OpenFst algorithms) and array operations for the HLG's
epsilon removal (recipes/graphs/hlg.py).

Recipe (Kaldi/EESEN/Riva for TLG, icefall's compile_hlg.py order for HLG):
  G   = arpa2fst(ARPA, disambig #0 on back-off arcs)                          (kaldilm)
  L   = lexicon transducer with #k disambiguation, #0:#0 loop, optional space (char sets)
  LG  = minimize_encoded(determinize_star(L o G)), ilabel-sorted              (kaldifst)
  TLG = T o LG  with T's eps:#k loops: keeps epsilon arcs, no #k on its input (what Riva's decoder reads)
  HLG = rmepsilon(H) o LG' where LG' = LG with #k -> eps (after determinization), finals made explicit arcs,
        every epsilon removed (words of removed arcs prepended to the arcs that follow, as
        k2.remove_epsilon's ragged aux_labels), connected; H's own epsilons (compact) are removed on H
        (30 states) rather than on H o LG' (millions of arcs): every HLG arc reads one frame (k2-style).

Determinization leaves some words on arcs whose input was a disambiguation symbol (a word that is a prefix of
another word, e.g. "a"/"ab", is only known once #1 is read); epsilon removal prepends them to the following
arcs' outputs, so an arc may carry 2+ words (a compound output id during composition, expanded into the
graph's aux CSR afterwards; counted in graph_info).
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import kaldifst
import numpy as np

from recipes.graphs.fstutil import FstArrays, arrays_to_fst, fst_to_arrays, log_size
from recipes.graphs.hlg import WordSequences, connect_arrays, epsilon_free_topology, log_arrays, remove_epsilons
from recipes.graphs.symbols import TokenTable, WordTable
from recipes.graphs.topologies import build_topology, topology_arrays

log = logging.getLogger(__name__)


def compile_G(arpa_path: str | Path, words_txt: str | Path, max_order: int = -1) -> "kaldifst.StdVectorFst":
    """ARPA -> G (acceptor over word ids; back-off arcs read #0). Words not in words.txt are skipped."""
    import kaldilm

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "G.fst")
        if str(arpa_path).endswith(".gz"):  # e.g. LibriSpeech's 3-gram.pruned.3e-7.arpa.gz
            import gzip
            import shutil

            plain = os.path.join(d, "lm.arpa")
            with gzip.open(arpa_path, "rb") as fin, open(plain, "wb") as fout:
                shutil.copyfileobj(fin, fout)
            arpa_path = plain
        kaldilm.arpa2fst(
            input_arpa=str(arpa_path),
            output_fst=out,
            disambig_symbol="#0",
            read_symbol_table=str(words_txt),
            max_order=max_order,
        )
        G = kaldifst.StdVectorFst.read(out)
    if G is None:
        raise RuntimeError(f"compile_G: kaldilm produced no FST from {arpa_path}")
    kaldifst.arcsort(G, sort_type="ilabel")
    log_size("G", G)
    return G


def compile_L(
    entries: Sequence[tuple[str, list[str]]],
    table: TokenTable,
    words: WordTable,
    *,
    optional_space: bool,
) -> "kaldifst.StdVectorFst":
    """Lexicon transducer tokens -> words, with disambiguation symbols (entries from
    `recipes.lexicon.add_disambig_symbols`). The word is output on the FIRST token of its spelling (as
    early as possible: the paper's boosting needs early word labels). State 0 is the start and the only
    final state; it carries `#0:#0` (passes G's back-off symbol) and, for char sets, an optional word
    separator loop `<space>:<eps>`."""
    widx = words.index()
    src, dst, ilab, olab = [], [], [], []
    nstates = 1
    for word, spelling in entries:
        w = widx.get(word)
        if w is None:
            raise ValueError(f"compile_L: word {word!r} is not in the word table")
        labels = [table.label_of(t) for t in spelling]
        prev = 0
        for j, lab in enumerate(labels):
            nxt = 0 if j == len(labels) - 1 else nstates
            if nxt != 0:
                nstates += 1
            src.append(prev)
            dst.append(nxt)
            ilab.append(lab)
            olab.append(w if j == 0 else 0)
            prev = nxt
    src.append(0); dst.append(0); ilab.append(table.disambig_label(0)); olab.append(words.disambig0)
    if optional_space:
        src.append(0); dst.append(0); ilab.append(table.label_of(" ")); olab.append(0)
    final = np.full(nstates, np.inf, dtype=np.float32)
    final[0] = 0.0
    L = arrays_to_fst(
        FstArrays(0, nstates, np.asarray(src, np.int32), np.asarray(dst, np.int32), np.asarray(ilab, np.int32),
                  np.asarray(olab, np.int32), np.zeros(len(src), np.float32), final)
    )
    kaldifst.arcsort(L, sort_type="olabel")
    log_size("L_disambig", L)
    return L


def push_output_labels(fst) -> "kaldifst.StdVectorFst":
    """OpenFst label pushing towards the initial state (pynini: kaldifst has no push): at every state the
    longest common prefix of the outgoing paths' word labels moves onto the arcs that lead to it, so words
    are emitted as early as possible (paper, word boosting limitation 3)."""
    try:
        import pynini
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError("push_labels=true needs pynini (pip install 'ctc-decoding-harness[graphs]')") from e
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.fst"), os.path.join(d, "out.fst")
        fst.write(src)
        pushed = pynini.push(pynini.Fst.read(src), push_labels=True)
        pushed.write(dst)
        out = kaldifst.StdVectorFst.read(dst)
    if out is None:
        raise RuntimeError("push_output_labels: could not read back the pushed FST")
    return out


def compile_LG(L, G, *, push_labels: bool = False) -> "kaldifst.StdVectorFst":
    """LG = minimize(det(L o G)), ilabel-sorted (Kaldi: fsttablecompose | fstdeterminizestar --use-log |
    fstminimizeencoded); optionally output labels pushed towards the start (`push_output_labels`)."""
    LG = kaldifst.compose(L, G, connect=True)
    log_size("L o G", LG)
    # kaldifst's return value is inverted: True means "stopped early at max_states" (partial FST)
    if kaldifst.determinize_star(LG, use_log=True):
        raise RuntimeError("compile_LG: determinize_star stopped early (max_states reached)")
    log_size("det(LG)", LG)
    kaldifst.minimize_encoded(LG)
    log_size("min(det(LG))", LG)
    if push_labels:
        LG = push_output_labels(LG)
        log_size("push_labels(LG)", LG)
    kaldifst.arcsort(LG, sort_type="ilabel")
    return LG


def compile_TLG(LG, topology: str, table: TokenTable) -> "kaldifst.StdVectorFst":
    """TLG = T o LG, T with eps:#k loops (Riva's mkgraph_ctc.sh recipe): epsilon arcs kept."""
    T = build_topology(topology, table, with_disambig=True)
    log_size(f"T[{topology}]", T)
    TLG = kaldifst.compose(T, LG, connect=True)
    kaldifst.connect(TLG)
    kaldifst.arcsort(TLG, sort_type="ilabel")
    log_size(f"TLG[{topology}]", TLG)
    return TLG


def estimate_epsfree_arcs(LG, table: TokenTable) -> int:
    """Arcs of LG after removing its disambiguation (back-off) arcs: every state inherits the arcs of the
    states its #k chain reaches (the classic blow-up of epsilon removal on a back-off LM). Computed on the
    back-off DAG without building anything, so huge HLGs can be refused before they exhaust memory."""
    a = LG if isinstance(LG, FstArrays) else fst_to_arrays(LG)
    dis = a.ilabel >= table.first_disambig_label
    real = np.bincount(a.src[~dis], minlength=a.num_states).astype(np.float64)
    fin = np.isfinite(a.final).astype(np.float64)  # explicit final arcs
    clos = real + fin
    for _ in range(16):  # back-off chains are as long as the LM order
        new = real + fin + np.bincount(a.src[dis], weights=clos[a.dest[dis]], minlength=a.num_states)
        if np.array_equal(new, clos):
            break
        clos = new
    return int(clos.sum())


def prepare_LG_for_HLG(LG, table: TokenTable, words: WordTable) -> tuple[FstArrays, list[tuple]]:
    """LG -> LG' (arrays): disambiguation symbols to eps (after determinization, as icefall), finals as explicit
    `final_label` arcs into one final state, then every epsilon removed (`recipes.graphs.hlg.remove_epsilons`:
    words on removed arcs are prepended to the arcs that follow, as k2.remove_epsilon's ragged aux_labels),
    trimmed (connect); arcs sorted by input label.

    Returns (LG', compounds): output ids >= len(words.symbols()) index `compounds` (tuples of word ids).
    """
    a = LG if isinstance(LG, FstArrays) else fst_to_arrays(LG)
    final_label = table.first_disambig_label  # free once #k are gone
    ilabel = a.ilabel.copy()
    ilabel[ilabel >= table.first_disambig_label] = 0
    olabel = a.olabel.copy()
    olabel[olabel == words.disambig0] = 0
    fin = np.nonzero(np.isfinite(a.final))[0].astype(np.int32)
    super_final = a.num_states
    src = np.concatenate([a.src, fin])
    dest = np.concatenate([a.dest, np.full(fin.shape, super_final, np.int32)])
    ilabel = np.concatenate([ilabel, np.full(fin.shape, final_label, np.int32)])
    olabel = np.concatenate([olabel, np.zeros(fin.shape, np.int32)])
    cost = np.concatenate([a.cost, a.final[fin]])
    final = np.full(a.num_states + 1, np.inf, np.float32)
    final[super_final] = 0.0
    b = FstArrays(a.start, a.num_states + 1, src, dest, ilabel, olabel, cost, final)
    seqs = WordSequences(base=len(words.symbols()))
    b, stats = remove_epsilons(b, seqs)
    b = connect_arrays(b)  # keeps the input-label order remove_epsilons left
    size = log_arrays("LG' (eps-free)", b)
    log.info("LG': %d epsilon arcs removed (%d with a word; paths up to %d deep), %d compound word labels",
             stats["epsilon_arcs_removed"], stats["word_epsilon_arcs"], stats["max_depth"], len(seqs.compounds))
    size.update(stats)
    return b, seqs.compounds


def compile_HLG(LGp, topology: str, table: TokenTable, timings: Optional[dict] = None) -> FstArrays:
    """HLG = rmepsilon(H) o LG' (kaldifst composition), H's finality as explicit final_label arcs; epsilon-free
    because LG' reads a token on every arc and H's epsilons were removed on H itself. Returns arrays
    (`timings["compose_s"]`: the seconds it took, when a dict is given)."""
    import time

    t0 = time.perf_counter()
    final_label = table.first_disambig_label
    H = epsilon_free_topology(topology_arrays(topology, table, with_disambig=False, final_label=final_label))
    log_size(f"H[{topology}] (eps-free)", H)
    LGf = arrays_to_fst(LGp) if isinstance(LGp, FstArrays) else LGp
    HLG = kaldifst.compose(H, LGf, connect=True)
    del LGf
    HLG = kaldifst.StdConstFst(HLG)  # the vector FST is freed here: one copy of the largest graph at a time
    a = fst_to_arrays(HLG)
    del HLG
    log_arrays(f"HLG[{topology}]", a)
    if np.any(a.ilabel == 0):
        raise RuntimeError("compile_HLG: the composition has epsilon arcs (the topology's were not removed)")
    if timings is not None:
        timings["compose_s"] = time.perf_counter() - t0
    return a
