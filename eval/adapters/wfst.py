"""Our WFST decoder (decoders.wfst, k2 intersect_dense_pruned semantics) behind the decoder protocol.

Reads the graph image ctx.graph_dir/{HLG,TLG}.bin (cfg `graph`), decodes on ctx.device: the C++ CPU
reference on CPU tensors, the CUDA kernels when the device is cuda. Supports per-utterance word boosts.

`output` picks what a hypothesis is (decoders/lattice.py for the lattice modes):
- best: decode()'s Viterbi 1-best (no lattice);
- nbest: the lattice's best path, with the `nbest_size` best distinct word sequences in Hypothesis.nbest and
  word start/end frames;
- mbr: Kaldi's minimum-Bayes-risk hypothesis, with word confidences and times, over the word-determinized lattice
  (`mbr_determinize` true, the default: Kaldi's recipes and Riva's decode_mbr) or over the lattice itself, summing
  a word sequence's posterior over its alignments (false; WfstLattices.mbr);
- nbest_rescore / lattice_rescore: icefall's n-best / whole-lattice rescoring (eval/rescore.py) at
  `rescore_lm_scale` with the ARPA at `rescore_arpa`; empty: the workload's order-`rescore_order` ARPA
  (Workload.arpa_of_order: lm_4gram.arpa by default, built on first use and cached), or without a workload
  (a user's model and LM) ctx.arpa_path, refused when its order is below `rescore_order` (0: any order).
Lattices come from the CUDA lattice pass on cuda (pruned on the host) and the CPU reference on cpu (decoders/lattice.py).
"""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional, Sequence

import torch

from decoders.graph import WfstGraph
from decoders.lattice import count_lattice_stats
from decoders.types import Hypothesis
from decoders.wfst import WfstDecoder, WfstDecoderConfig, count_rescue_causes
from eval.adapters.base import DecodingContext, adapter_schema, library_config, register_decoder, typed_config


class WfstOutput(str, Enum):
    best = "best"
    nbest = "nbest"
    mbr = "mbr"
    nbest_rescore = "nbest_rescore"
    lattice_rescore = "lattice_rescore"


# Every WfstDecoderConfig field (search beams, capacities, ...) plus the graph choice and the output mode; values in
# conf/decoder/wfst.yaml.
CONFIG_SCHEMA = adapter_schema("wfst", WfstDecoderConfig, [
    ("name", str, "wfst"),
    ("graph", str, "TLG"),  # "TLG" (epsilon arcs) or "HLG" (epsilon-free)
    ("output", WfstOutput, WfstOutput.best),
    ("nbest_size", int, 10),
    ("mbr_determinize", bool, True),
    ("rescore_arpa", str, ""),
    ("rescore_order", int, 4),
    ("rescore_lm_scale", float, 1.0),
])


class WfstAdapter:
    name = "wfst"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("wfst", cfg)
        if cfg.graph not in ("TLG", "HLG"):
            raise ValueError(f"wfst: graph must be 'TLG' or 'HLG', got {cfg.graph!r}")
        if ctx.graph_dir is None:
            raise ValueError("wfst: DecodingContext.graph_dir is not set")
        path = Path(ctx.graph_dir) / f"{cfg.graph}.bin"
        if not path.is_file():
            raise FileNotFoundError(f"wfst: no graph image at {path}")
        self.device = torch.device(ctx.device if str(ctx.device).startswith("cuda") else "cpu")
        config = library_config(WfstDecoderConfig, cfg, blank_id=ctx.tokens.blank_id)
        self.decoder = WfstDecoder(WfstGraph.load(path), config, self.device)
        self.output = WfstOutput(cfg.output)
        if cfg.nbest_size < 1:
            raise ValueError(f"wfst: nbest_size must be >= 1, got {cfg.nbest_size}")
        self.nbest_size = int(cfg.nbest_size)
        self.mbr_determinize = bool(cfg.mbr_determinize)
        self.lm = None
        self.lm_scale = float(cfg.rescore_lm_scale)
        if self.output in (WfstOutput.nbest_rescore, WfstOutput.lattice_rescore):
            from eval.rescore import NgramLM

            order = int(cfg.rescore_order)
            if order < 0:
                raise ValueError(f"wfst: rescore_order must be >= 0 (0: any), got {order}")
            workload = (ctx.extra or {}).get("workload")
            if cfg.rescore_arpa:
                arpa = cfg.rescore_arpa
            elif order and workload is not None and hasattr(workload, "arpa_of_order"):
                arpa = workload.arpa_of_order(order)
            else:
                arpa = ctx.arpa_path
            if not arpa:
                raise ValueError(f"wfst: output={self.output.value} needs rescore_arpa (or the workload's ARPA)")
            self.lm = NgramLM(arpa)
            if self.lm.order < order:
                raise ValueError(f"wfst: output={self.output.value}: {arpa} is an order-{self.lm.order} LM, below "
                                 f"rescore_order={order}; set rescore_arpa=<an order-{order} ARPA> (or rescore_order=0)")
            self.rescore_arpa = str(arpa)
        self.last_result = None
        self._stats = {"overflow_count": 0, "rescued_count": 0, "partial_count": 0, "oov_boost_words": 0}
        if self.output is not WfstOutput.best:
            self._stats.update(lattice_arcs=0, lattice_bytes=0, lattice_dense_map_calls=0, lattice_hashed_map_calls=0)

    def pop_stats(self) -> dict:
        """Counters since the last call (the runner reports them): utterances whose overflow the rescue could
        not absorb, utterances re-decoded with larger capacities, allow_partial results (no final state
        reached), and boost words that are not in the graph's vocabulary."""
        out, self._stats = self._stats, {k: 0 for k in self._stats}
        return out

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor,
               boosts: Optional[Sequence[dict]] = None) -> list[Hypothesis]:
        if log_probs.dtype not in (torch.float32, torch.float16):
            log_probs = log_probs.float()
        log_probs = log_probs.to(self.device)
        if self.output is not WfstOutput.best:
            return self._decode_lattice(log_probs, lengths, boosts)
        result = self.decoder.decode(log_probs, lengths.cpu(), boosts=boosts)
        self.last_result = result  # overflow / oov reports for the harness
        self._stats["overflow_count"] += sum(1 for o in result.overflow if o)
        self._stats["rescued_count"] += len(result.rescued)
        count_rescue_causes(self._stats, result.rescued_overflow)
        self._stats["partial_count"] += sum(1 for hp, rf in zip(result.has_path, result.reached_final) if hp and not rf)
        self._stats["oov_boost_words"] += sum(len(o) for o in result.oov_boost_words)
        return [Hypothesis(tokens=[], words=list(w), score=float(s))
                for w, s in zip(result.word_strings, result.scores.tolist())]


    def _decode_lattice(self, log_probs, lengths, boosts) -> list[Hypothesis]:
        lats = self.decoder.decode_lattice(log_probs, lengths.cpu(), boosts=boosts)
        self.last_result = lats
        count_lattice_stats(self._stats, lats)
        self._stats["partial_count"] += sum(1 for hp, rf in zip(lats.has_path, lats.reached_final) if hp and not rf)
        self._stats["oov_boost_words"] += sum(len(o) for o in lats.oov_boost_words)
        self._stats["lattice_arcs"] += int(lats.arcs.shape[0])
        if self.output is WfstOutput.mbr:
            return lats.mbr(determinize=self.mbr_determinize)
        if self.output is WfstOutput.lattice_rescore:
            from eval.rescore import lattice_rescore

            return lattice_rescore(lats, self.lm, self.lm_scale)
        if self.output is WfstOutput.nbest_rescore:
            from eval.rescore import nbest_rescore

            return nbest_rescore(lats, self.lm, self.nbest_size, self.lm_scale)
        out = []
        for hyps in lats.nbest(self.nbest_size):
            out.append(hyps[0]._replace(nbest=list(hyps)) if hyps else
                       Hypothesis(tokens=[], words=[], score=float("-inf"), nbest=[]))
        return out


@register_decoder("wfst")
def _build(cfg, ctx: DecodingContext) -> WfstAdapter:
    return WfstAdapter(cfg, ctx)
