"""riva-asrlib-decoder (the released Riva/Kaldi CUDA WFST decoder) behind the decoder protocol. CUDA only.

Uses ctx.graph_dir/TLG.fst + words.txt (Kaldi numbering: <eps> = 0, token = log-prob column + 1) and
MBR decoding. Beams default to the paper's: default_beam 17, lattice_beam 8, max_active 10000.
API learnt from the package's python_decoder module (BatchedMappedDecoderCuda(config, fst, words, V)).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from decoders.types import Hypothesis
from eval.adapters.base import DecodingContext, register_decoder, typed_config


@dataclass
class RivaAdapterConfig:
    """riva-asrlib-decoder's BatchedMappedDecoderCudaConfig is a pybind object (no dataclass to build a schema
    from, and not importable without CUDA), so the adapter declares the settings it sets; values in
    conf/decoder/riva.yaml."""

    name: str = "riva"
    default_beam: float = 17.0
    lattice_beam: float = 8.0
    max_active: int = 10000
    max_batch_size: int = 200
    acoustic_scale: float = 1.0


CONFIG_SCHEMA = RivaAdapterConfig


class RivaAdapter:
    name = "riva"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("riva", cfg)
        if not torch.cuda.is_available():
            raise RuntimeError("riva: riva-asrlib-decoder needs a CUDA device")
        from riva.asrlib.decoder.python_decoder import BatchedMappedDecoderCuda, BatchedMappedDecoderCudaConfig

        if ctx.graph_dir is None:
            raise ValueError("riva: DecodingContext.graph_dir is not set")
        fst, words = Path(ctx.graph_dir) / "TLG.fst", Path(ctx.graph_dir) / "words.txt"
        for p in (fst, words):
            if not p.is_file():
                raise FileNotFoundError(f"riva: missing {p}")
        c = BatchedMappedDecoderCudaConfig()
        c.online_opts.decoder_opts.default_beam = float(cfg.default_beam)
        c.online_opts.decoder_opts.lattice_beam = float(cfg.lattice_beam)
        c.online_opts.decoder_opts.max_active = int(cfg.max_active)
        c.online_opts.determinize_lattice = True
        batch = int(cfg.max_batch_size)
        c.online_opts.max_batch_size = batch
        c.online_opts.num_channels = 2 * batch
        # The log-probs are scaled by acoustic_scale before the search (as for wfst, k2py and kaldi: an LM
        # weight of 1/acoustic_scale), so the lattice already carries scaled scores: post-processing uses 1.0.
        self.acoustic_scale = float(cfg.acoustic_scale)
        if not self.acoustic_scale > 0:
            raise ValueError(f"riva: acoustic_scale must be > 0, got {self.acoustic_scale}")
        c.online_opts.lattice_postprocessor_opts.acoustic_scale = 1.0
        c.n_input_per_chunk = 50
        self.max_batch = batch
        self.decoder = BatchedMappedDecoderCuda(c, str(fst), str(words), ctx.tokens.vocab_size)

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor,
               boosts: Optional[Sequence[dict]] = None) -> list[Hypothesis]:
        if boosts and any(boosts):
            raise NotImplementedError("riva adapter: word boosting is not wired (needs a per-stream boost graph)")
        lp = (log_probs.float().cuda() * self.acoustic_scale).contiguous()
        out: list[Hypothesis] = []
        for i in range(0, lp.shape[0], self.max_batch):
            res = self.decoder.decode_mbr(lp[i : i + self.max_batch], lengths[i : i + self.max_batch].to("cpu",
                                                                                                        torch.int64))
            out += [Hypothesis(tokens=[], words=[w[0] for w in sent], score=0.0) for sent in res]
        return out


@register_decoder("riva")
def _build(cfg, ctx: DecodingContext) -> RivaAdapter:
    return RivaAdapter(cfg, ctx)
