"""G, L, LG, TLG and HLG with kaldifst/kaldilm (OpenFst algorithms; nothing hand-written but relabelling).

Recipe (Kaldi/EESEN/Riva for TLG, icefall for HLG):
  G   = arpa2fst(ARPA, disambig #0 on back-off arcs)                          (kaldilm)
  L   = lexicon transducer with #k disambiguation, #0:#0 loop, optional space (char sets)
  LG  = minimize_encoded(determinize_star(L o G)), ilabel-sorted              (kaldifst)
  TLG = T o LG  with T's eps:#k loops: keeps epsilon arcs, no #k on its input (what Riva's decoder reads)
  HLG = H o LG' where LG' = LG with #k -> eps, finals made explicit arcs, eps:eps removed (rmepsilon);
        then rmepsilon again (compact's eps) and connect: every arc reads one frame (k2-style).

The one non-OpenFst step: after `#k -> eps`, determinization has left some words on arcs whose input
was a disambiguation symbol (a word that is a prefix of another word, e.g. "a"/"ab", is only known once #1
is read). OpenFst's rmepsilon removes eps:eps arcs only (and kaldifst has no gallic semiring), so those
eps:word arcs are folded forward into the arcs that follow them, concatenating word sequences -- what
k2.remove_epsilon does with ragged aux_labels. An arc may then carry 2+ words (stored as a compound
output id during composition, expanded into the graph's aux CSR afterwards; counted in graph_info).
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Sequence

import kaldifst
import numpy as np

from recipes.graphs.fstutil import FstArrays, arrays_to_fst, fst_to_arrays, log_size
from recipes.graphs.symbols import TokenTable, WordTable
from recipes.graphs.topologies import build_topology

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


def _csr(src: np.ndarray, num_states: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(src, kind="stable")
    splits = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_states), out=splits[1:])
    return order, splits


def estimate_epsfree_arcs(LG, table: TokenTable) -> int:
    """Arcs of LG after removing its disambiguation (back-off) arcs: every state inherits the arcs of the
    states its #k chain reaches (the classic blow-up of epsilon removal on a back-off LM). Computed on the
    back-off DAG without building anything, so huge HLGs can be refused before they exhaust memory."""
    a = fst_to_arrays(LG)
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


def prepare_LG_for_HLG(LG, table: TokenTable, words: WordTable) -> tuple["kaldifst.StdVectorFst", list[tuple]]:
    """LG -> LG': disambiguation symbols to eps, finals as explicit `final_label` arcs into one final state,
    eps:eps arcs removed (OpenFst rmepsilon), residual eps:word arcs folded forward (see module doc).

    Returns (LG', compounds): output ids >= len(words.symbols()) index `compounds` (tuples of word ids).
    """
    a = fst_to_arrays(LG)
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
    LGp = arrays_to_fst(FstArrays(a.start, a.num_states + 1, src, dest, ilabel, olabel, cost, final))
    kaldifst.rmepsilon(LGp)
    kaldifst.connect(LGp)
    log_size("LG' (eps:eps removed)", LGp)
    b = fst_to_arrays(LGp)
    compounds: list[tuple] = []
    base = len(words.symbols())
    b, compounds, num_folded = _fold_word_epsilons(b, base)
    LGf = arrays_to_fst(b)
    kaldifst.connect(LGf)
    kaldifst.arcsort(LGf, sort_type="ilabel")
    size = log_size("LG' (eps-free)", LGf)
    size["folded_word_eps_arcs"] = num_folded
    log.info("LG': %d eps:word arcs folded forward, %d compound word labels", num_folded, len(compounds))
    return LGf, compounds


def _fold_word_epsilons(a: FstArrays, base: int, max_rounds: int = 64):
    """Replace every arc s -eps:w/c-> t by s -x:(w v)/(c+c')-> u for each arc t -x:v/c'-> u."""
    compounds: list[tuple] = []
    cindex: dict[tuple, int] = {}

    def seq(label: int) -> tuple:
        if label == 0:
            return ()
        if label >= base:
            return compounds[label - base]
        return (label,)

    def label_of(s: tuple) -> int:
        if not s:
            return 0
        if len(s) == 1:
            return s[0]
        if s not in cindex:
            cindex[s] = base + len(compounds)
            compounds.append(s)
        return cindex[s]

    num_folded = 0
    for _ in range(max_rounds):
        eps = np.nonzero(a.ilabel == 0)[0]
        if eps.size == 0:
            return a, compounds, num_folded
        num_folded += int(eps.size)
        order, splits = _csr(a.src, a.num_states)
        keep = a.ilabel != 0
        ns, nd, ni, no, nc = [], [], [], [], []
        for e in eps.tolist():
            s, t, w, c = int(a.src[e]), int(a.dest[e]), int(a.olabel[e]), float(a.cost[e])
            if np.isfinite(a.final[t]):
                raise RuntimeError("_fold_word_epsilons: finals must be explicit arcs before folding")
            for f in order[splits[t]:splits[t + 1]].tolist():
                ns.append(s)
                nd.append(int(a.dest[f]))
                ni.append(int(a.ilabel[f]))
                no.append(label_of(seq(w) + seq(int(a.olabel[f]))))
                nc.append(np.float32(c) + a.cost[f])
        a = FstArrays(
            a.start,
            a.num_states,
            np.concatenate([a.src[keep], np.asarray(ns, np.int32)]),
            np.concatenate([a.dest[keep], np.asarray(nd, np.int32)]),
            np.concatenate([a.ilabel[keep], np.asarray(ni, np.int32)]),
            np.concatenate([a.olabel[keep], np.asarray(no, np.int32)]),
            np.concatenate([a.cost[keep], np.asarray(nc, np.float32)]),
            a.final,
        )
    raise RuntimeError("_fold_word_epsilons: epsilon chains did not terminate (epsilon cycle with words?)")


def compile_HLG(LGp, topology: str, table: TokenTable) -> "kaldifst.StdVectorFst":
    """HLG = H o LG' with H's finality as explicit final_label arcs; eps:eps removed (compact)."""
    final_label = table.first_disambig_label
    H = build_topology(topology, table, with_disambig=False, final_label=final_label)
    log_size(f"H[{topology}]", H)
    HLG = kaldifst.compose(H, LGp, connect=True)
    log_size(f"H o LG'[{topology}]", HLG)
    kaldifst.rmepsilon(HLG)
    kaldifst.connect(HLG)
    kaldifst.arcsort(HLG, sort_type="ilabel")
    log_size(f"HLG[{topology}]", HLG)
    return HLG
