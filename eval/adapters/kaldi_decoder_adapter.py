"""Kaldi's CPU decoders (`kaldi-decoder` from PyPI: FasterDecoder / LatticeSimpleDecoder over kaldifst
graphs) on the TLG itself, epsilon arcs included: the Kaldi-semantics baseline.

Graph: `<graph_dir>/TLG.fst` (OpenFst, Kaldi numbering: `<eps>` = 0, token id = log-prob column + 1).
`kaldi_decoder.DecodableCtc(log_probs)` reads column = label - 1, which is exactly that numbering; the
acoustic cost of a frame is -log_prob. Score reported = -(graph cost + acoustic cost) of the best path
(natural log, higher is better), i.e. the same quantity k2py's adapter reports on the HLG.

Semantics vs k2: Kaldi prunes tokens with a fixed beam around the best token of the frame (with
max_active/min_active adjusting the cutoff by histogram, `beam_delta`), processes epsilon arcs inside the
frame, and at the end prefers final states (FasterDecoder falls back to the best non-final token when none
is final: `reached_final` false, counted in `pop_stats()["partial_count"]`). k2's dynamic beam instead
drifts towards search_beam frame by frame. With wide beams both return the Viterbi best path.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from decoders.types import Hypothesis
from eval.adapters.base import DecodingContext, load_graph_cached, register_decoder, typed_config


@dataclass
class KaldiDecoderConfig:
    name: str = "kaldi"
    decoder: str = "faster"  # "faster" (FasterDecoder) or "lattice" (LatticeSimpleDecoder, 1-best of lattice)
    beam: float = 20.0  # same magnitude as k2py's search_beam
    max_active: int = 10000
    min_active: int = 30
    lattice_beam: float = 8.0  # lattice decoder only
    acoustic_scale: float = 1.0
    graph_file: str = "TLG.fst"


CONFIG_SCHEMA = KaldiDecoderConfig

def _load(graph_dir: Path, graph_file: str):
    """(OpenFst TLG, word list) for a graph directory, cached per process."""

    def parse(path: Path):
        import kaldifst

        fst = kaldifst.StdVectorFst.read(str(path))
        if fst is None:  # kaldifst returns None for const FSTs read as vector
            fst = kaldifst.StdConstFst.read(str(path))
        if fst is None:
            raise ValueError(f"kaldi adapter: {path} is not a readable OpenFst file")
        words = [l.split()[0] for l in open(graph_dir / "words.txt", encoding="utf-8") if l.strip()]
        return fst, words

    return load_graph_cached("kaldi", graph_dir, graph_file, parse)


class KaldiDecoder:
    name = "kaldi"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("kaldi", cfg)
        c = cfg
        if c.decoder not in ("faster", "lattice"):
            raise ValueError(f"kaldi: decoder must be 'faster' or 'lattice', got {c.decoder!r}")
        if c.beam <= 0:
            raise ValueError(f"kaldi: beam must be > 0, got {c.beam}")
        if not 0 <= c.min_active < c.max_active or c.max_active < 2:
            raise ValueError(f"kaldi: need 0 <= min_active < max_active and max_active >= 2 "
                             f"(got {c.min_active}, {c.max_active})")
        if ctx.graph_dir is None:
            raise FileNotFoundError("kaldi adapter needs DecodingContext.graph_dir (the TLG directory)")
        import kaldi_decoder  # noqa: F401  (fail early when the package is missing)

        self.cfg = c
        self.tokens = ctx.tokens
        self.fst, self.words = _load(Path(ctx.graph_dir), c.graph_file)
        self._partial = 0

    def pop_stats(self) -> dict:
        out = {"overflow_count": 0, "partial_count": self._partial}
        self._partial = 0
        return out

    def _decoder(self):
        import kaldi_decoder

        c = self.cfg
        if c.decoder == "faster":
            opts = kaldi_decoder.FasterDecoderOptions(beam=c.beam, max_active=c.max_active, min_active=c.min_active)
            return kaldi_decoder.FasterDecoder(self.fst, opts)
        opts = kaldi_decoder.LatticeSimpleDecoderConfig(beam=c.beam, lattice_beam=c.lattice_beam)
        return kaldi_decoder.LatticeSimpleDecoder(self.fst, opts)

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor,
               boosts: Optional[Sequence[dict]] = None) -> list[Hypothesis]:
        import kaldi_decoder
        import kaldifst

        if boosts and any(boosts):
            raise NotImplementedError("kaldi baseline does not support word boosting")
        if log_probs.dim() != 3 or log_probs.shape[2] != self.tokens.vocab_size:
            raise ValueError(f"kaldi: log_probs must be (B, T, {self.tokens.vocab_size}), got {tuple(log_probs.shape)}")
        lp_all = log_probs.detach().to("cpu", torch.float32).numpy()
        out = []
        for b in range(lp_all.shape[0]):
            T = int(lengths[b])
            if T == 0:
                out.append(Hypothesis(tokens=[], words=[], score=float("-inf"), timesteps=[]))
                continue
            lp = np.ascontiguousarray(lp_all[b, :T] * self.cfg.acoustic_scale, dtype=np.float32)  # (T, V)
            dec = self._decoder()
            dec.decode(kaldi_decoder.DecodableCtc(lp))
            if hasattr(dec, "reached_final") and not dec.reached_final():
                self._partial += 1
            ok, lat = dec.get_best_path()
            if not ok:
                self._partial += 1
                out.append(Hypothesis(tokens=[], words=[], score=float("-inf"), timesteps=[]))
                continue
            ok, ilabels, olabels, weight = kaldifst.get_linear_symbol_sequence(lat)
            columns = [l - 1 for l in ilabels]  # Kaldi token id -> column (recipes.graphs.symbols)
            tokens, prev = [], None
            for col in columns:
                if col != self.tokens.blank_id and col != prev:
                    tokens.append(col)
                prev = col
            words = [self.words[w] for w in olabels if 0 < w < len(self.words)]
            score = -(float(weight.value1) + float(weight.value2))
            out.append(Hypothesis(tokens=tokens, words=words, score=score))
        return out


@register_decoder("kaldi")
def build_kaldi(cfg, ctx: DecodingContext) -> KaldiDecoder:
    return KaldiDecoder(cfg, ctx)
