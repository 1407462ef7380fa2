"""NeMo's batched greedy CTC (`GreedyBatchedCTCInfer`) behind the decoder protocol; see eval/adapters/nemo_ctc.py."""
from __future__ import annotations

from eval.adapters.base import DecodingContext, register_decoder
from eval.adapters.nemo_ctc import NemoGreedyConfig, NemoGreedyDecoder

CONFIG_SCHEMA = NemoGreedyConfig


@register_decoder("nemo_greedy")
def build(cfg, ctx: DecodingContext) -> NemoGreedyDecoder:
    return NemoGreedyDecoder(cfg, ctx)
