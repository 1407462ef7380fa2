"""torchaudio's `cuda_ctc_decoder` (CUDA CTC prefix beam search) as a baseline, CUDA only.

torchaudio requires blank at column 0: when the token set puts blank last (NeMo), the log-prob columns
are permuted so blank comes first and the returned ids are mapped back. Scores are torchaudio's.
It has crashed with illegal memory accesses on realistic (peaky) inputs on the H200 with torchaudio 2.11,
which poisons the CUDA context of the whole process: benchmarks run it in a subprocess
(eval/bench/ctc_bench.py). Raises RuntimeError when torchaudio or CUDA is missing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from decoders.types import Hypothesis
from eval.adapters.base import DecodingContext, register_decoder, typed_config


@dataclass
class TorchaudioCtcConfig:
    name: str = "torchaudio_ctc"
    beam_size: int = 10
    blank_skip_threshold: float = 0.95


CONFIG_SCHEMA = TorchaudioCtcConfig


def build_torchaudio_decoder(vocab_size: int, beam_size: int, blank_skip_threshold: float, nbest: int = 1):
    """The torchaudio decoder over placeholder token strings (blank first, as torchaudio requires)."""
    if not torch.cuda.is_available():
        raise RuntimeError("torchaudio_ctc needs a CUDA device (torchaudio's cuda_ctc_decoder is CUDA-only)")
    try:
        from torchaudio.models.decoder import cuda_ctc_decoder
    except Exception as err:  # ImportError, or torchaudio built without CUDA CTC decoder
        raise RuntimeError(f"torchaudio_ctc: torchaudio.models.decoder.cuda_ctc_decoder unavailable: {err}") from err
    names = ["<blk>"] + [f"t{i}" for i in range(1, vocab_size)]
    return cuda_ctc_decoder(names, nbest=nbest, beam_size=beam_size, blank_skip_threshold=blank_skip_threshold)


def blank_first(log_probs: torch.Tensor, blank_id: int) -> tuple[torch.Tensor, list[int]]:
    """(log_probs with blank moved to column 0, map from new column id to the original id)."""
    V = log_probs.shape[-1]
    if blank_id == 0:
        return log_probs, list(range(V))
    perm = [blank_id] + [c for c in range(V) if c != blank_id]
    return log_probs[..., perm].contiguous(), perm


class TorchaudioCtcDecoder:
    name = "torchaudio_ctc"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("torchaudio_ctc", cfg)
        self.tokens = ctx.tokens
        self.decoder = build_torchaudio_decoder(ctx.tokens.vocab_size, int(cfg.beam_size),
                                                float(cfg.blank_skip_threshold))

    def decode(
        self, log_probs: torch.Tensor, lengths: torch.Tensor, boosts: Optional[Sequence[dict]] = None
    ) -> list[Hypothesis]:
        if boosts and any(boosts):
            raise NotImplementedError("torchaudio_ctc has no LM or lexicon, so it cannot apply word boosts")
        lp, back = blank_first(log_probs.float().cuda(), self.tokens.blank_id)
        out = self.decoder(lp, lengths.to(device=lp.device, dtype=torch.int32))
        hyps = []
        for nbest in out:
            h = nbest[0]
            toks = [back[c] for c in h.tokens]
            hyps.append(Hypothesis(tokens=toks, words=self.tokens.decode(toks).split(), score=float(h.score)))
        return hyps


@register_decoder("torchaudio_ctc")
def build(cfg, ctx: DecodingContext) -> TorchaudioCtcDecoder:
    return TorchaudioCtcDecoder(cfg, ctx)
