"""riva-asrlib-decoder (the released Riva/Kaldi CUDA WFST decoder) behind the decoder protocol. CUDA only.

Uses ctx.graph_dir/TLG.fst + words.txt (Kaldi numbering: <eps> = 0, token = log-prob column + 1) and
MBR decoding (`decode`); `decode_best` is Riva's 1-best (decode_nbest's first entry). Beams default to the
paper's: default_beam 17, lattice_beam 8, max_active 10000.
API learnt from the package's python_decoder module (BatchedMappedDecoderCuda(config, fst, words, V)) and its
test suite (riva/asrlib/decoder/test_graph_construction.py in riva-asrlib-decoder 0.4.4):
- decode_mbr returns per utterance a list of (word string, start s, end s) tuples;
- decode_nbest returns per utterance a list of NBestResult objects, best first, with `.score`, `.words` (word
  IDs of the graph's words.txt, "word id" per line), `.ilabels`, `.word_start_times_seconds`, ...; the list's
  length is `lattice_postprocessor_opts.nbest` (the suite sets 1).
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
    nbest: int = 1  # decode_nbest's list length (lattice_postprocessor_opts.nbest; the 1-best reads the first)


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
        if int(cfg.nbest) < 1:
            raise ValueError(f"riva: nbest must be >= 1, got {cfg.nbest}")
        c.online_opts.lattice_postprocessor_opts.nbest = int(cfg.nbest)  # as Riva's test suite sets it
        c.n_input_per_chunk = 50
        self.max_batch = batch
        self.device = torch.device("cuda")
        self.id_to_word = read_word_symbols(words)  # decode_nbest gives word IDs
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

    def decode_best(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> list[Hypothesis]:
        """Riva's 1-best: decode_nbest's first entry per utterance (its lattice's best path), words mapped through
        words.txt. Refuses a batch with frames where no utterance got a word (what an n-best list left empty, or a
        changed result layout, would score as 100 % deletions)."""
        lp = (log_probs.float().to(self.device) * self.acoustic_scale).contiguous()
        out: list[Hypothesis] = []
        for i in range(0, lp.shape[0], self.max_batch):
            res = self.decoder.decode_nbest(lp[i : i + self.max_batch], lengths[i : i + self.max_batch].to("cpu",
                                                                                                         torch.int64))
            out += nbest_best_hypotheses(res, self.id_to_word, lengths[i : i + self.max_batch])
        return out


def read_word_symbols(path) -> dict[int, str]:
    """words.txt ("word id" per line, Kaldi/OpenFst symbol table) -> {id: word}, as Riva's test suite reads it."""
    out: dict[int, str] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2:
                raise ValueError(f"riva: {path}:{n}: expected 'word id', got {line.rstrip()!r}")
            out[int(parts[1])] = parts[0]
    return out


def nbest_best_hypotheses(results, id_to_word: dict[int, str], lengths=None) -> list[Hypothesis]:
    """decode_nbest's result for a batch (per utterance a list of NBestResult, best first) -> the first entry of
    each as a Hypothesis: words mapped through `id_to_word` (<eps> dropped), score NBestResult.score as Riva gives
    it. An utterance with an empty list gets no words. Raises when the batch had frames (`lengths`, when given) but
    no utterance got a word, and on a word ID that words.txt does not have."""
    out: list[Hypothesis] = []
    for entries in results:
        if not entries:
            out.append(Hypothesis(tokens=[], words=[], score=float("-inf")))
            continue
        first = entries[0]
        if not hasattr(first, "words"):
            raise TypeError(f"riva: decode_nbest entry {type(first).__name__} has no .words (NBestResult expected)")
        words = []
        for wid in first.words:
            w = id_to_word.get(int(wid))
            if w is None:
                raise ValueError(f"riva: decode_nbest returned word ID {wid}, which words.txt does not have")
            if w != "<eps>":
                words.append(w)
        out.append(Hypothesis(tokens=[], words=words, score=float(first.score)))
    frames = int(lengths.sum()) if lengths is not None else 1
    if out and frames > 0 and not any(h.words for h in out):
        raise RuntimeError("riva: decode_nbest returned no words for any utterance of the batch "
                           "(lattice_postprocessor_opts.nbest unset, or its result layout changed)")
    return out


@register_decoder("riva")
def _build(cfg, ctx: DecodingContext) -> RivaAdapter:
    return RivaAdapter(cfg, ctx)
