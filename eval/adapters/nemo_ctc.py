"""NeMo's own CTC decoders behind the decoder protocol: the baselines a NeMo user compares with first.

- `nemo_greedy`: `GreedyBatchedCTCInfer` (NeMo's batched greedy CTC; `decoding.strategy=greedy_batch`).
- `nemo_beam`: `BeamBatchedCTCInfer` (`decoding.strategy=beam_batch`), NeMo's batched CTC beam search with shallow
  fusion of its GPU n-gram LM (`NGramGPULanguageModel`, read from a token-level ARPA: `beam.ngram_lm_model`,
  `beam.ngram_lm_alpha`, `beam.beam_beta`, `beam.beam_threshold`) and, for word boosts, NeMo's GPU phrase boosting
  (`GPUBoostingTreeModel` built by `BoostingTreeModelConfig` from the boosted words: `beam.boosting_tree`,
  `beam.boosting_tree_alpha`).

The token LM is NeMo's convention: an ARPA over the model's token ids written as `chr(id + 100)`
(recipes/token_lm.py). `token_lm` names one; left empty, it is built from `lm_text` (default: `corpus.txt` beside
the workload's word ARPA, i.e. the workload's LM training text) with the project's KN estimator, order 3 (NeMo
trains it with KenLM's lmplz, not installed here), and cached by content hash under `lm_cache_dir`.

NeMo's CTC beam search with an LM requires the blank to be the last column (`assert blank_index != 0`); a
blank-first model's log-probs are passed with the blank column moved last and the ids mapped back, which is the
same model (NeMo ids are the columns without the blank either way).

Boosts: the harness passes per-utterance {word: boost}; NeMo's boosting tree takes one phrase list and one
`context_score` per tree, so rows of a batch are grouped by identical boost dicts and each group decoded with its
tree (cached per list); the harness's boost value b becomes NeMo's `context_score` (per token, scaled by
`depth_scaling`, NeMo's default 2.0 for CTC; `boosting_tree_alpha` multiplies it as NeMo documents). A dict whose
words carry different values cannot be one NeMo tree: NotImplementedError names it. Tokenization of phrases goes
through the harness's TokenSet (the same sentencepiece model NeMo's SentencePieceTokenizer would load).

Scores: NeMo's own hypothesis score (acoustic + alpha * LM + beta * tokens (+ LM end-of-sentence)).
"""
from __future__ import annotations

import contextlib
import io
import logging as _pylogging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from decoders.types import Hypothesis
from eval.adapters.base import DecodingContext, register_decoder, typed_config


@dataclass
class NemoGreedyConfig:
    name: str = "nemo_greedy"
    allow_cuda_graphs: bool = True


@dataclass
class NemoBeamConfig:
    name: str = "nemo_beam"
    beam_size: int = 10
    ngram_lm_alpha: float = 0.5
    beam_beta: float = 1.0
    beam_threshold: float = 20.0
    use_lm: bool = True
    token_lm: Optional[str] = None
    lm_text: Optional[str] = None
    lm_cache_dir: Optional[str] = None
    boosting_tree_alpha: float = 1.0
    depth_scaling: float = 2.0
    allow_cuda_graphs: bool = True


CONFIG_SCHEMA = NemoBeamConfig  # nemo_greedy's schema is NemoGreedyConfig (eval/adapters/nemo_greedy.py)


@contextlib.contextmanager
def _quiet():
    """NeMo's ARPA reader prints tqdm bars and info lines; keep them out of the harness's output."""
    from nemo.utils import logging as nemo_logging

    level = nemo_logging.getEffectiveLevel()
    nemo_logging.setLevel(_pylogging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        nemo_logging.setLevel(level)


def _require_nemo():
    try:
        with _quiet():
            from nemo.collections.asr.parts.submodules import ctc_beam_decoding, ctc_greedy_decoding  # noqa: F401
    except ImportError as err:  # the row says why
        raise RuntimeError(f"NeMo ASR is not importable here ({err}); install the 'nemo' extra") from err


def _blank_last(log_probs: torch.Tensor, blank_id: int) -> torch.Tensor:
    """Columns reordered so the blank is last (NeMo's CTC convention); identity when it already is."""
    V = log_probs.shape[-1]
    if blank_id == V - 1:
        return log_probs
    order = [c for c in range(V) if c != blank_id] + [blank_id]
    return log_probs[..., torch.tensor(order, device=log_probs.device)]


def _column(nemo_id: int, blank_id: int) -> int:
    return nemo_id + (1 if nemo_id >= blank_id else 0)


def _check_inputs(log_probs: torch.Tensor, lengths: torch.Tensor, vocab_size: int) -> None:
    if not isinstance(log_probs, torch.Tensor) or log_probs.dim() != 3:
        raise ValueError(f"log_probs must be a (B, T, V) tensor, got {getattr(log_probs, 'shape', type(log_probs))}")
    if log_probs.shape[2] != vocab_size:
        raise ValueError(f"log_probs has V={log_probs.shape[2]} columns, the token set {vocab_size}")
    if lengths.dim() != 1 or lengths.shape[0] != log_probs.shape[0]:
        raise ValueError(f"lengths must be (B,) with B={log_probs.shape[0]}, got {tuple(lengths.shape)}")


class _TokenizerShim:
    """What NeMo's BoostingTreeModelConfig route reads of a TokenizerSpec: `text_to_ids` (NeMo ids, i.e. the
    columns without the blank) and `vocab_size`."""

    def __init__(self, tokens):
        self.tokens = tokens
        self.vocab_size = tokens.vocab_size - 1

    def text_to_ids(self, text: str) -> list[int]:
        b = self.tokens.blank_id
        return [c - (1 if c > b else 0) for c in self.tokens.encode(text)]


class NemoGreedyDecoder:
    name = "nemo_greedy"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("nemo_greedy", cfg)
        _require_nemo()
        from nemo.collections.asr.parts.submodules.ctc_greedy_decoding import GreedyBatchedCTCInfer

        self.tokens = ctx.tokens
        self.device = ctx.device
        with _quiet():
            self.infer = GreedyBatchedCTCInfer(blank_id=self.tokens.blank_id,
                                               allow_cuda_graphs=bool(cfg.allow_cuda_graphs))

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor,
               boosts: Optional[Sequence[dict]] = None) -> list[Hypothesis]:
        if boosts and any(boosts):
            raise NotImplementedError("nemo_greedy has no LM, so it cannot apply word boosts")
        _check_inputs(log_probs, lengths, self.tokens.vocab_size)
        if str(self.device).startswith("cuda") and not log_probs.is_cuda:
            log_probs = log_probs.to(self.device)
        with torch.inference_mode():
            (hyps,) = self.infer(decoder_output=log_probs.float(), decoder_lengths=lengths.to(log_probs.device))
        out = []
        for h in hyps:
            toks = fold_consecutive(torch.as_tensor(h.y_sequence).tolist(), self.tokens.blank_id)
            out.append(Hypothesis(tokens=toks, words=self.tokens.decode(toks).split(), score=float(h.score)))
        return out


def fold_consecutive(frame_labels: Sequence[int], blank_id: int) -> list[int]:
    """NeMo's greedy CTC returns one label per frame; `CTCDecoding.decode_hypothesis(fold_consecutive=True)` then
    keeps p when (p != previous or previous == blank) and p != blank. The same rule here."""
    out, previous = [], blank_id
    for p in (int(x) for x in frame_labels):
        if (p != previous or previous == blank_id) and p != blank_id:
            out.append(p)
        previous = p
    return out


def default_lm_text(ctx: DecodingContext) -> Optional[Path]:
    """The workload's LM training text: corpus.txt beside its word ARPA (recipes/workload.py layout)."""
    if ctx.arpa_path is None:
        return None
    p = Path(ctx.arpa_path).parent / "corpus.txt"
    return p if p.is_file() else None


def resolve_token_lm(cfg, ctx: DecodingContext) -> Path:
    """Path of the token-level ARPA (NeMo encoding): `cfg.token_lm`, else built from `cfg.lm_text` / the workload
    text and cached. One-line errors when neither exists."""
    if cfg.token_lm:
        p = Path(cfg.token_lm)
        if not p.is_file():
            raise FileNotFoundError(f"token_lm {p} not found")
        return p
    text = Path(cfg.lm_text) if cfg.lm_text else default_lm_text(ctx)
    if text is None:
        raise ValueError("no token LM: set token_lm= (a token-level ARPA in NeMo's encoding) or lm_text= (text to "
                         "train one), or run on a workload whose corpus.txt sits beside data.arpa_path")
    from recipes.token_lm import cached_token_arpa

    cache = Path(cfg.lm_cache_dir) if cfg.lm_cache_dir else Path.home() / ".cache" / "beamdec" / "token_lm"
    return cached_token_arpa(text, ctx.tokens, cache)


def check_arpa_vocab(path: Path, symbols: Sequence[Optional[str]]) -> None:
    """One-line errors for an empty/malformed ARPA or unigrams outside the token table (NeMo's reader asserts)."""
    from decoders.ctc_lm import read_arpa

    read_arpa(path, [s for s in symbols if s is not None])


class NemoBeamDecoder:
    name = "nemo_beam"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("nemo_beam", cfg)
        _require_nemo()
        from nemo.collections.asr.parts.submodules.ctc_beam_decoding import BeamBatchedCTCInfer

        for k in ("ngram_lm_alpha", "beam_beta", "beam_threshold", "boosting_tree_alpha", "depth_scaling"):
            if not math.isfinite(float(getattr(cfg, k))):
                raise ValueError(f"nemo_beam: {k} must be finite, got {getattr(cfg, k)}")
        if not isinstance(cfg.beam_size, int) or cfg.beam_size < 1:
            raise ValueError(f"nemo_beam: beam_size must be a positive int, got {cfg.beam_size!r}")
        self.cfg = cfg
        self.tokens = ctx.tokens
        self.device = ctx.device
        self.vocab = ctx.tokens.vocab_size
        self.lm_path: Optional[Path] = None
        if cfg.use_lm:
            from recipes.token_lm import nemo_token_symbols

            self.lm_path = resolve_token_lm(cfg, ctx)
            check_arpa_vocab(self.lm_path, nemo_token_symbols(ctx.tokens))
        with _quiet():
            self.infer = BeamBatchedCTCInfer(
                blank_index=self.vocab - 1, beam_size=cfg.beam_size, return_best_hypothesis=True,
                ngram_lm_model=str(self.lm_path) if self.lm_path else None, ngram_lm_alpha=float(cfg.ngram_lm_alpha),
                beam_beta=float(cfg.beam_beta), beam_threshold=float(cfg.beam_threshold),
                allow_cuda_graphs=bool(cfg.allow_cuda_graphs),
            )
        algo = self.infer.search_algorithm
        self._base_models = list(algo.fusion_models or [])
        self._base_alphas = list(algo.fusion_models_alpha or [])
        self._trees: dict = {}
        self._set_fusion(None)

    def _tree(self, words: tuple, value: float):
        key = (words, value)
        if key not in self._trees:
            from nemo.collections.asr.parts.context_biasing.boosting_graph_batched import (
                BoostingTreeModelConfig,
                GPUBoostingTreeModel,
            )

            bcfg = BoostingTreeModelConfig(key_phrases_list=list(words), context_score=float(value),
                                           depth_scaling=float(self.cfg.depth_scaling), use_triton=True)
            with _quiet():
                self._trees[key] = GPUBoostingTreeModel.from_config(bcfg, tokenizer=_TokenizerShim(self.tokens))
        return self._trees[key]

    def _set_fusion(self, tree) -> None:
        """Fusion models = the LM (+ this boosting tree). Unchanged -> nothing to do (NeMo keeps its captured
        graphs); changed -> NeMo's graphs are reset (they hold the previous models)."""
        if getattr(self, "_current_tree", "unset") is tree:
            return
        self._current_tree = tree
        algo = self.infer.search_algorithm
        models, alphas = list(self._base_models), list(self._base_alphas)
        if tree is not None:
            models.append(tree)
            alphas.append(float(self.cfg.boosting_tree_alpha))
        algo.fusion_models = models or None
        algo.fusion_models_alpha = alphas or None
        # NeMo's RNN-T/TDT label-looping decoders turn CUDA graphs off when a fusion model cannot be captured (its
        # pure-PyTorch LM advance, used without Triton, synchronises with the host); its CTC beam search does not
        # check, so the adapter applies the same rule.
        if self.cfg.allow_cuda_graphs and all(m.compatible_with_cuda_graphs() for m in models):
            algo.maybe_enable_cuda_graphs()
        else:
            algo.disable_cuda_graphs()
        algo.reset_cuda_graphs_state()  # captured graphs hold the previous fusion models

    def _decode_group(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> list[Hypothesis]:
        blank = self.tokens.blank_id
        x = _blank_last(log_probs.float(), blank)
        with torch.inference_mode():
            (hyps,) = self.infer(decoder_output=x, decoder_lengths=lengths.to(x.device))
        out = []
        for h in hyps:
            ids = [int(t) for t in torch.as_tensor(h.y_sequence).tolist()]
            toks = [_column(i, blank) for i in ids]
            out.append(Hypothesis(tokens=toks, words=self.tokens.decode(toks).split(), score=float(h.score)))
        return out

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor,
               boosts: Optional[Sequence[dict]] = None) -> list[Hypothesis]:
        _check_inputs(log_probs, lengths, self.vocab)
        if str(self.device).startswith("cuda") and not log_probs.is_cuda:
            log_probs = log_probs.to(self.device)
        B = log_probs.shape[0]
        if not boosts or not any(boosts):
            self._set_fusion(None)
            return self._decode_group(log_probs, lengths)
        if len(boosts) != B:
            raise ValueError(f"boosts must have one dict per utterance (B={B}), got {len(boosts)}")
        groups: dict = {}
        for b, d in enumerate(boosts):
            d = d or {}
            values = set(float(v) for v in d.values())
            if len(values) > 1:
                raise NotImplementedError("NeMo's boosting tree takes one context_score per phrase list; this "
                                          f"utterance's boosts carry {len(values)} different values")
            for v in values:
                if not math.isfinite(v):
                    raise ValueError(f"boost values must be finite, got {v}")
            key = (tuple(sorted(d)), values.pop() if values else 0.0)
            groups.setdefault(key, []).append(b)
        out: list[Optional[Hypothesis]] = [None] * B
        for (words, value), rows in groups.items():
            tree = self._tree(words, value) if words and value != 0.0 else None
            self._set_fusion(tree)
            idx = torch.tensor(rows, device=log_probs.device)
            for r, h in zip(rows, self._decode_group(log_probs.index_select(0, idx),
                                                    lengths.index_select(0, idx.to(lengths.device)))):
                out[r] = h
        self._set_fusion(None)
        return out  # type: ignore[return-value]


@register_decoder("nemo_beam")
def build_beam(cfg, ctx: DecodingContext) -> NemoBeamDecoder:
    return NemoBeamDecoder(cfg, ctx)
