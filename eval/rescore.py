"""Rescoring WFST lattices with a larger n-gram LM: icefall's whole-lattice rescoring and n-best rescoring.

    lm = NgramLM("data/workload/tiny/lm_4gram.arpa")
    hyps = lattice_rescore(decoder.decode_lattice(log_probs, lengths), lm, lm_scale=1.0)

Semantics (icefall `rescore_with_whole_lattice` / `rescore_with_n_best_list`, egs/librispeech/ASR/*/decode.py):
- A lattice arc's score is acoustic_scale * log-prob + graph weight (+ boost). The graph weights are the old LM's
  scores (our T and L carry no weights, so the HLG/TLG weights are G's, as icefall's `HLG.lm_scores`); rescoring
  removes them (the "am score" of a path is its score minus its graph weights) and adds
  lm_scale * ln P_new(words </s>) from the ARPA (natural log, back-off as ARPA defines it).
- Whole-lattice: the best path of the lattice composed with the n-gram LM (exact: Viterbi over
  (lattice state, LM history of order - 1 words)); icefall does the same with k2.intersect on G then best_path.
- n-best: the k best distinct word sequences of the lattice (decoders.lattice nbest), each keeping its best
  path's am score, re-ranked by am + lm_scale * ln P_new.
The ARPA is read by recipes.lm.ArpaModel (plain Python: for the embedded workloads' LMs, not LibriSpeech's 4-gram).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Union

import numpy as np

from decoders.lattice import WfstLattices
from decoders.types import Hypothesis

LN10 = math.log(10.0)


class NgramLM:
    """An ARPA n-gram LM scoring words in natural log, with memoised back-off lookups."""

    def __init__(self, arpa: Union[str, Path]):
        from recipes.lm import BOS, EOS, ArpaModel

        path = Path(arpa)
        if not path.is_file():
            raise FileNotFoundError(f"rescore: no ARPA file at {path}")
        self.model = ArpaModel(path)
        if self.model.order < 1:
            raise ValueError(f"rescore: {path} has no n-grams")
        self.order = self.model.order
        self.bos, self.eos = BOS, EOS
        self._memo: dict[tuple, float] = {}

    def start(self) -> tuple:
        return (self.bos,)[-(self.order - 1):] if self.order > 1 else ()

    def score(self, word: str, history: tuple) -> tuple[float, tuple]:
        """(ln p(word | history), the next history)."""
        key = (history, word)
        lp = self._memo.get(key)
        if lp is None:
            lp = self._memo[key] = self.model.log10_prob(word, history) * LN10
        nxt = (history + (word,))[-(self.order - 1):] if self.order > 1 else ()
        return lp, nxt

    def sentence(self, words) -> float:
        h, total = self.start(), 0.0
        for w in list(words) + [self.eos]:
            lp, h = self.score(w, h)
            total += lp
        return total


def _am_scores(lats: WfstLattices, i: int) -> np.ndarray:
    """Per arc of utterance i: its score minus its graph weight (the old LM's part)."""
    u = lats._utt(i)
    weight = np.asarray(lats.graph.weight, dtype=np.float64)[u["arc"]]
    return u["score"].astype(np.float64) - weight


def lattice_rescore(lats: WfstLattices, lm: NgramLM, lm_scale: float = 1.0) -> list[Hypothesis]:
    """Whole-lattice rescoring: per utterance the best path of (lattice without graph weights) o (lm_scale * LM).
    Hypothesis.score is the rescored score; an empty lattice gives no words and -inf."""
    if not (isinstance(lm_scale, (int, float)) and math.isfinite(lm_scale)):
        raise ValueError(f"rescore: lm_scale must be a finite number, got {lm_scale!r}")
    out = []
    for i in range(len(lats)):
        u = lats._utt(i)
        S = len(u["frame"])
        if S == 0:
            out.append(Hypothesis(tokens=[], words=[], score=-math.inf))
            continue
        am = _am_scores(lats, i).tolist()
        words = [lats._word_strings(ws) for ws in lats._arc_words(u["arc"])]
        src, dst = u["src"].tolist(), u["dst"].tolist()
        # table[s]: {LM history: (score, (previous state, previous history, arc))}; states are topologically
        # sorted and arcs sorted by source, so one pass in arc order is a topological relaxation
        table: list[dict] = [dict() for _ in range(S)]
        table[0][lm.start()] = (0.0, None)
        for a in range(len(src)):
            s, d = src[a], dst[a]
            for h, (sc, _) in list(table[s].items()):
                v, h2 = sc + am[a], h
                for w in words[a]:
                    lp, h2 = lm.score(w, h2)
                    v += lm_scale * lp
                cur = table[d].get(h2)
                if cur is None or v > cur[0]:
                    table[d][h2] = (v, (s, h, a))
        best, best_h = -math.inf, None
        for h, (sc, _) in table[S - 1].items():
            v = sc + lm_scale * lm.score(lm.eos, h)[0]
            if v > best:
                best, best_h = v, h
        if best_h is None:
            out.append(Hypothesis(tokens=[], words=[], score=-math.inf))
            continue
        path, s, h = [], S - 1, best_h
        while table[s][h][1] is not None:
            ps, ph, a = table[s][h][1]
            path.append(a)
            s, h = ps, ph
        path.reverse()
        out.append(lats._path_hypothesis(u, path, best))
    return out


def nbest_rescore(lats: WfstLattices, lm: NgramLM, k: int, lm_scale: float = 1.0) -> list[Hypothesis]:
    """n-best rescoring: the k best distinct word sequences re-ranked by am + lm_scale * ln P_new(words)."""
    if not (isinstance(lm_scale, (int, float)) and math.isfinite(lm_scale)):
        raise ValueError(f"rescore: lm_scale must be a finite number, got {lm_scale!r}")
    out = []
    for i in range(len(lats)):
        u = lats._utt(i)
        am = _am_scores(lats, i)
        best = None
        for path, _ in lats.nbest_paths(i, k):
            h = lats._path_hypothesis(u, path, 0.0)
            v = float(am[path].sum()) + lm_scale * lm.sentence(h.words)
            if best is None or v > best.score:
                best = h._replace(score=v)
        out.append(best if best is not None else Hypothesis(tokens=[], words=[], score=-math.inf))
    return out
