"""Our WFST decoder (decoders.wfst, k2 intersect_dense_pruned semantics) behind the decoder protocol.

Reads the graph image ctx.graph_dir/{HLG,TLG}.bin (cfg `graph`), decodes on ctx.device: the C++ CPU
reference on CPU tensors, the CUDA kernels when the device is cuda. Supports per-utterance word boosts.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import torch

from decoders.graph import WfstGraph
from decoders.types import Hypothesis
from decoders.wfst import WfstDecoder, WfstDecoderConfig
from eval.adapters.base import DecodingContext, adapter_schema, library_config, register_decoder, typed_config


# Every WfstDecoderConfig field (search beams, capacities, ...) plus the graph choice; values in conf/decoder/wfst.yaml.
CONFIG_SCHEMA = adapter_schema("wfst", WfstDecoderConfig, [
    ("name", str, "wfst"),
    ("graph", str, "TLG"),  # "TLG" (epsilon arcs) or "HLG" (epsilon-free)
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
        self.last_result = None
        self._stats = {"overflow_count": 0, "rescued_count": 0, "partial_count": 0, "oov_boost_words": 0}

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
        result = self.decoder.decode(log_probs, lengths.cpu(), boosts=boosts)
        self.last_result = result  # overflow / oov reports for the harness
        self._stats["overflow_count"] += sum(1 for o in result.overflow if o)
        self._stats["rescued_count"] += len(result.rescued)
        self._stats["partial_count"] += sum(1 for hp, rf in zip(result.has_path, result.reached_final) if hp and not rf)
        self._stats["oov_boost_words"] += sum(len(o) for o in result.oov_boost_words)
        return [Hypothesis(tokens=[], words=list(w), score=float(s))
                for w, s in zip(result.word_strings, result.scores.tolist())]


@register_decoder("wfst")
def _build(cfg, ctx: DecodingContext) -> WfstAdapter:
    return WfstAdapter(cfg, ctx)
