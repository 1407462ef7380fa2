"""Our CTC prefix beam search with shallow fusion of a token-level n-gram LM and phrase boosting
(decoders/ctc_lm.py) behind the decoder protocol.

The LM is the same token-level ARPA NeMo's `nemo_beam` reads (NeMo's encoding, `chr(id + 100)`, built by
recipes/token_lm.py from the workload's text, or `token_lm=` a file), so `ctc_lm` and `nemo_beam` compare on one
LM. Word boosts {word: boost} become phrases of the word's tokens (`TokenSet.encode`; for BPE the word's pieces
with its word-start marker); words the token set cannot spell, or that are outside the workload's word list, are
counted in `pop_stats()["unknown_boost_words"]` (boosted anyway when spellable) and warned about once.
Runs on the log-probs' device (`ctc_lm@cuda`: the batched torch path; `kernel=fused` opts in to the fused CUDA kernel
for the token LM and boosting, which `kernel=auto`, the default, will pick once it has run on a GPU -- not yet).
`lm_level=word`: word-level fusion instead (decoders.ctc_lm.LexiconWordLM: the workload's word ARPA, a lexicon of its
word list spelled by the token set, `lm_weight` and `word_score` per word; torchaudio/Flashlight's convention).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional, Sequence

import torch

from decoders.ctc_lm import CtcLmConfig, NgramLM, PhraseBoost, ctc_lm_beam_search
from decoders.types import Hypothesis
from eval.adapters.base import DecodingContext, adapter_schema, library_config, register_decoder, typed_config

CONFIG_SCHEMA = adapter_schema("ctc_lm", CtcLmConfig, [
    ("name", str, "ctc_lm"),
    ("use_lm", bool, True),
    ("lm_level", str, "token"),
    ("word_score", float, 0.0),
    ("token_lm", Optional[str], None),
    ("lm_text", Optional[str], None),
    ("lm_cache_dir", Optional[str], None),
])

_LM_CACHE: dict = {}


def load_token_lm(cfg, ctx: DecodingContext) -> NgramLM:
    """The token LM (NeMo encoding) as device tables, parsed once per (file, token table) and process."""
    from eval.adapters.nemo_ctc import resolve_token_lm
    from recipes.token_lm import nemo_token_symbols

    path = resolve_token_lm(cfg, ctx)
    key = (str(Path(path).resolve()), tuple(ctx.tokens.tokens), ctx.tokens.blank_id)
    if key not in _LM_CACHE:
        _LM_CACHE[key] = NgramLM.from_arpa(path, nemo_token_symbols(ctx.tokens))
    return _LM_CACHE[key]


def load_word_lm(cfg, ctx: DecodingContext, lm_weight: float):
    """Word-level fusion: the workload's word ARPA (data.arpa_path) + a lexicon of its word list (data.words_path)
    spelled by the token set (torchaudio's convention: the tokenizer's encoding of each word)."""
    from decoders.ctc_lm import LexiconWordLM, read_arpa

    if ctx.arpa_path is None or ctx.words_path is None:
        raise ValueError("lm_level=word needs data.arpa_path (a word ARPA) and data.words_path (the lexicon's words)")
    key = ("word", str(Path(ctx.arpa_path).resolve()), str(Path(ctx.words_path).resolve()), tuple(ctx.tokens.tokens),
           ctx.tokens.blank_id, float(lm_weight), float(cfg.word_score))
    if key not in _LM_CACHE:
        with open(ctx.words_path, encoding="utf-8") as f:
            words = [line.split()[0] for line in f if line.strip()]
        lexicon = {}
        for w in words:
            try:
                lexicon[w] = [ctx.tokens.encode(w)]
            except ValueError:
                continue  # not spellable with these tokens
        mode = "bpe" if ctx.tokens.kind == "bpe" else "char"
        _LM_CACHE[key] = LexiconWordLM(read_arpa(ctx.arpa_path), lexicon, ctx.tokens.tokens, ctx.tokens.blank_id, mode,
                                       lm_weight=float(lm_weight), word_score=float(cfg.word_score))
    return _LM_CACHE[key]


class CtcLmDecoder:
    name = "ctc_lm"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("ctc_lm", cfg)
        self.tokens = ctx.tokens
        self.device = ctx.device
        self.config = library_config(CtcLmConfig, cfg, blank_id=ctx.tokens.blank_id, nbest=1)
        if cfg.lm_level not in ("token", "word"):
            raise ValueError(f"ctc_lm: lm_level must be 'token' or 'word', got {cfg.lm_level!r}")
        if not cfg.use_lm:
            self.lm = None
        elif cfg.lm_level == "word":
            self.lm = load_word_lm(cfg, ctx, self.config.lm_weight)
        else:
            self.lm = load_token_lm(cfg, ctx)
        self.vocabulary: Optional[set] = None
        if ctx.words_path is not None and Path(ctx.words_path).is_file():
            with open(ctx.words_path, encoding="utf-8") as f:
                self.vocabulary = {line.split()[0] for line in f if line.strip()}
        self._unknown = 0
        self._warned = False
        self._phrase_cache: dict = {}

    def pop_stats(self) -> dict:
        n, self._unknown = self._unknown, 0
        return {"unknown_boost_words": n}

    def _phrase(self, word: str) -> Optional[tuple]:
        if word not in self._phrase_cache:
            try:
                ids = tuple(self.tokens.encode(word))
            except ValueError:
                ids = ()
            unk = self.tokens.kind == "bpe" and any(self.tokens.tokens[i] == "<unk>" for i in ids)
            self._phrase_cache[word] = ids if ids and not unk else None
        return self._phrase_cache[word]

    def _boost(self, boosts: Sequence[dict], B: int) -> Optional[PhraseBoost]:
        if len(boosts) != B:
            raise ValueError(f"boosts must have one dict per utterance (B={B}), got {len(boosts)}")
        rows, unknown = [], []
        for d in boosts:
            row = {}
            for word, value in (d or {}).items():
                ids = self._phrase(word)
                if ids is None or (self.vocabulary is not None and word not in self.vocabulary):
                    unknown.append(word)
                if ids is not None:
                    row[ids] = row.get(ids, 0.0) + float(value)
            rows.append(row)
        self._unknown += len(unknown)
        if unknown and not self._warned:
            self._warned = True
            warnings.warn(f"ctc_lm: {len(unknown)} boosted word(s) unknown to the token set or word list, e.g. "
                          f"{sorted(set(unknown))[:5]} (reported in unknown_boost_words)", stacklevel=3)
        return PhraseBoost(rows, self.tokens.vocab_size, self.tokens.blank_id)

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor,
               boosts: Optional[Sequence[dict]] = None) -> list[Hypothesis]:
        if str(self.device).startswith("cuda") and not log_probs.is_cuda:
            log_probs = log_probs.to(self.device)
        if log_probs.dim() != 3 or log_probs.shape[-1] != self.tokens.vocab_size:
            raise ValueError(f"log_probs must be (B, T, V={self.tokens.vocab_size}), got {tuple(log_probs.shape)}")
        boost = self._boost(boosts, log_probs.shape[0]) if boosts and any(boosts) else None
        result = ctc_lm_beam_search(log_probs, lengths, self.config, lm=self.lm, boost=boost)
        return [Hypothesis(tokens=t[0], words=self.tokens.decode(t[0]).split(), score=float(s[0]))
                for t, s in zip(result.tokens, result.scores)]


@register_decoder("ctc_lm")
def build(cfg, ctx: DecodingContext) -> CtcLmDecoder:
    return CtcLmDecoder(cfg, ctx)
