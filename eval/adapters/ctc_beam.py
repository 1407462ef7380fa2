"""Our CTC prefix beam search (decoders.ctc) behind the decoder protocol, with word output by detokenizing.

No LM and no lexicon: words are `ctx.tokens.decode(tokens).split()` of the best prefix. Score: the CTC
posterior log P(prefix | x) summed over alignments (see decoders/ctc.py). Runs on the log-probs' device
(CUDA kernels on a GPU, the C++ CPU reference otherwise). No word boosting: `ctc_lm` (eval/adapters/ctc_lm.py) is
the same search with an n-gram LM and phrase boosting.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from decoders.ctc import CtcBeamSearchConfig, ctc_beam_search
from decoders.types import Hypothesis
from eval.adapters.base import DecodingContext, adapter_schema, library_config, register_decoder, typed_config


# Every CtcBeamSearchConfig field but blank_id and nbest (filled by the harness, see CONTEXT_FIELDS); values in
# conf/decoder/ctc_beam.yaml.
CONFIG_SCHEMA = adapter_schema("ctc_beam", CtcBeamSearchConfig, [("name", str, "ctc_beam")])


class CtcBeamDecoder:
    name = "ctc_beam"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("ctc_beam", cfg)
        self.tokens = ctx.tokens
        self.device = ctx.device
        self.config = library_config(CtcBeamSearchConfig, cfg, blank_id=ctx.tokens.blank_id, nbest=1)

    def decode(
        self, log_probs: torch.Tensor, lengths: torch.Tensor, boosts: Optional[Sequence[dict]] = None
    ) -> list[Hypothesis]:
        if boosts and any(boosts):
            raise NotImplementedError("ctc_beam has no LM or lexicon, so it cannot apply word boosts (ctc_lm can)")
        if log_probs.dtype not in (torch.float32, torch.float16):
            log_probs = log_probs.float()
        if str(self.device).startswith("cuda") and not log_probs.is_cuda:
            log_probs = log_probs.to(self.device)
        result = ctc_beam_search(log_probs, lengths, self.config)
        hyps = []
        for b in range(len(result.tokens)):
            toks = result.tokens[b][0]
            hyps.append(Hypothesis(tokens=toks, words=self.tokens.decode(toks).split(),
                                   score=float(result.scores[b, 0])))
        return hyps


@register_decoder("ctc_beam")
def build(cfg, ctx: DecodingContext) -> CtcBeamDecoder:
    return CtcBeamDecoder(cfg, ctx)
