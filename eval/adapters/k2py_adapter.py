"""k2's own pruned intersection (CPU, `k2py.OnlineDenseIntersecter`) on the epsilon-free HLG: the semantic
oracle of our WFST decoder.

Graph: `<graph_dir>/HLG.k2.txt` (k2 text; label = log-prob column, -1 = final; compound aux ids from
`HLG.k2.txt.aux.json` for arcs that output several words). k2py reads label 0 as an ordinary column, so it
needs the epsilon-free HLG, never the TLG.

Result: the best path's words and score. k2py reports the best path's per-frame labels and its aux labels
(not its total score), so the adapter re-scores that label sequence on the same HLG with an exact Viterbi
forced pass (`recipes.graphs.paths.forced_best_path`): score = graph score + sum of log-probs along the
path, words = the aux labels of that path (including words sitting on final arcs).

Online vs offline semantics (k2/csrc/intersect_pruned.cu; k2py deviations pinned by
tests/test_wfst_cpu.py::k2_model_decode):
- Offline `intersect_dense_pruned` appends one extra frame to the dense FSA on which only label -1 has a
  finite score (0; -inf on real frames): FINAL arcs are taken only on step T, pruned by the same dynamic
  beam (cutoff = best end score - dynamic beam; the beam drifts towards search_beam while the active-state
  count stays within [min_active, max_active], shrinks x0.8 above max_active, grows x1.25 below
  min_active). Recent k2 also raises min_active in the last frames (to max_active / 2 over the last 5, as
  modelled by our WFST tests; not in every k2 version), which needs the utterance length. A path that does not reach the final state is not in the lattice: an
  utterance whose final state was pruned away yields an EMPTY result.
- `OnlineDenseIntersecter` runs the same forward pass chunk by chunk with the utterance length unknown:
  (1) the last-5-frames min_active rule is inert (no T); (2) k2py's dense matrix holds 0, not -inf, in the
  label -1 column on REAL frames, so FINAL arcs compete for each frame's best score (tightening that
  frame's cutoff) and the dead-end final state joins the frontier as one more active state; (3) the final
  step happens in `finish()`, and with allow_partial (k2py's default, kept here) an utterance whose final
  state is not reached returns the best PARTIAL path instead of nothing.
- Output-beam pruning (backward passes over 30-frame windows offline, per chunk online) never removes the
  best path (its backward score is 0), so the 1-best is unaffected.
All three only matter when pruning binds (tight beams / small max_active); at the defaults the best path is
the offline one (checked here: identical words and scores to kaldi-decoder's Viterbi on the TLG, 80 tiny
utterances x 3 topologies). How the harness accounts for it: every utterance is decoded as ONE chunk
followed by `finish()`; the forced pass tells whether the returned path ends in the final state, and
utterances that did not (partial results, where offline k2 would return an empty hypothesis) are counted in
`pop_stats()["partial_count"]` (the runner sums it into each result row's decoder_stats) and logged as a
warning, so that a comparison with an offline decoder can exclude or flag them (`overflow_count` is always 0
here: k2py has no fixed-capacity buffers). Our WFST decoder's
tests model deviations (1)-(2) explicitly when they compare with k2py at tight beams.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from decoders.graph import WfstGraph
from decoders.types import Hypothesis
from eval.adapters.base import DecodingContext, load_graph_cached, register_decoder, typed_config

log = logging.getLogger(__name__)


@dataclass
class K2pyConfig:
    name: str = "k2py"
    search_beam: float = 20.0
    output_beam: float = 8.0
    min_active_states: int = 30
    max_active_states: int = 10000
    allow_partial: bool = True  # k2py default: best partial path when no final state survives
    acoustic_scale: float = 1.0  # log-probs are multiplied by this before decoding (graph scores unscaled)
    graph_file: str = "HLG.k2.txt"


CONFIG_SCHEMA = K2pyConfig

def _load(graph_dir: Path, graph_file: str):
    """(k2py graph dict, WfstGraph, path index) for a graph directory, cached per process."""

    def parse(text_path: Path):
        import k2py

        from recipes.graphs.paths import ArcIndex

        graph = WfstGraph.load(graph_dir / "HLG.bin") if (graph_dir / "HLG.bin").is_file() else \
            WfstGraph.from_k2_text(text_path, words=graph_dir / "words.txt")
        k2g = k2py.CreateFsaVecFromStr(text_path.read_text(encoding="utf-8"), -1, False)
        return k2g, graph, ArcIndex(graph)

    return load_graph_cached("k2py", graph_dir, graph_file, parse)


class K2pyDecoder:
    name = "k2py"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("k2py", cfg)
        c = cfg
        if c.search_beam <= 0 or c.output_beam <= 0:
            raise ValueError(f"k2py: search_beam and output_beam must be > 0 (got {c.search_beam}, {c.output_beam})")
        if not 0 <= c.min_active_states < c.max_active_states:
            raise ValueError("k2py: need 0 <= min_active_states < max_active_states")
        if ctx.graph_dir is None:
            raise FileNotFoundError("k2py adapter needs DecodingContext.graph_dir (the HLG directory)")
        self.cfg = c
        self.tokens = ctx.tokens
        self.k2_graph, self.graph, self._index = _load(Path(ctx.graph_dir), c.graph_file)
        if self.graph.num_tokens != ctx.tokens.vocab_size:
            raise ValueError(f"k2py: graph reads {self.graph.num_tokens} columns, token set has {ctx.tokens.vocab_size}")
        self.words = self.graph.words or []
        self._partial = 0

    def pop_stats(self) -> dict:
        out = {"overflow_count": 0, "partial_count": self._partial}
        self._partial = 0
        return out

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor,
               boosts: Optional[Sequence[dict]] = None) -> list[Hypothesis]:
        import k2py

        if boosts and any(boosts):
            raise NotImplementedError("k2py baseline does not support word boosting")
        if log_probs.dim() != 3 or log_probs.shape[2] != self.graph.num_tokens:
            raise ValueError(f"k2py: log_probs must be (B, T, {self.graph.num_tokens}), got {tuple(log_probs.shape)}")
        lp_all = log_probs.detach().to("cpu", torch.float32).numpy()
        out = []
        c = self.cfg
        for b in range(lp_all.shape[0]):
            T = int(lengths[b])
            lp = np.ascontiguousarray(lp_all[b, :T] * c.acoustic_scale, dtype=np.float32)  # (T, V)
            if T == 0:
                out.append(Hypothesis(tokens=[], words=[], score=float("-inf"), timesteps=[]))
                continue
            dec = k2py.OnlineDenseIntersecter(self.k2_graph["fsa"], self.k2_graph["aux_labels"], c.search_beam,
                                              c.output_beam, c.min_active_states, c.max_active_states,
                                              c.allow_partial)
            dec.decode(lp, False)
            _, labels = dec.finish()
            frame_labels = [int(x) for x in labels[0]][:T]
            if len(frame_labels) != T:
                out.append(Hypothesis(tokens=[], words=[], score=float("-inf"), timesteps=[]))
                self._partial += 1
                continue
            path = self._forced(frame_labels, lp)
            if not path.reached_final:
                self._partial += 1
                log.warning("k2py: utterance %d of the batch ended in a non-final state (partial result; offline "
                            "intersect_dense_pruned would return nothing)", b)
            tokens, steps = [], []
            prev = None
            for t, lab in enumerate(frame_labels):
                if lab != self.tokens.blank_id and lab != prev:
                    tokens.append(lab)
                    steps.append(t)
                prev = lab
            words = [self.words[w] if w < len(self.words) else str(w) for w in path.words]
            out.append(Hypothesis(tokens=tokens, words=words, score=path.score, timesteps=steps))
        return out

    def _forced(self, labels, lp):
        from recipes.graphs.paths import forced_best_path

        return forced_best_path(self.graph, labels, lp, _index=self._index)


@register_decoder("k2py")
def build_k2py(cfg, ctx: DecodingContext) -> K2pyDecoder:
    return K2pyDecoder(cfg, ctx)
