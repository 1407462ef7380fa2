"""pyctcdecode 0.5.0 (Kensho's pure-Python CTC prefix beam search, shallow fusion of a word KenLM) as a CPU baseline.

pyctcdecode is what many Hugging Face / NeMo users reach for first ("CTC + KenLM in three lines"), so its WER and
speed beside Flashlight and our decoders answer "why not just use pyctcdecode". Conventions bridged here (read off
pyctcdecode 0.5.0's source, `language_model.py` / `decoder.py` / `alphabet.py`):

- **LM weight units.** `LanguageModel.score` computes `alpha * log10_p * LOG_BASE_CHANGE_FACTOR + beta` with
  `LOG_BASE_CHANGE_FACTOR = 1 / log10(e) = ln(10)`: alpha multiplies the *natural-log* LM score, beta is added once per
  word. The harness's `lm_weight` / `word_score` are natural-log too (total = acoustic_ln + lm_weight * lm_ln +
  word_score * words, Flashlight's adapter convention), so they are passed unchanged as alpha / beta (Flashlight's
  adapter, whose KenLM term is log10, multiplies by ln 10 instead). The same two numbers mean the same objective in
  both decoders. Without an LM, pyctcdecode applies neither (beta rides on the LM call).
- **Open vocabulary.** Unlike Flashlight's lexicon decoder (`unk_score` -inf: no out-of-lexicon word), pyctcdecode
  may emit any spelling: a word outside the unigram list gets `unk_score_offset` (log10, default -10, so it is worth
  `lm_weight * ln 10 * -10` nats) added to its LM score, and a partial word that is no prefix of a known word costs
  `unk_score_offset` nats (unscaled) per frame it is extended in (`score_partial_token`). Those are pyctcdecode's
  defaults, kept.
- **Unigrams.** pyctcdecode's own ARPA reader (`load_unigram_set_from_arpa`) keeps only unigram lines with three
  tab-separated fields, so words without a back-off weight are dropped and then penalised as unknown (9 of the tiny
  workload's 2,000 words). The adapter reads the unigram section itself (every entry, `<s>`, `</s>`, `<unk>` left
  out) and passes the list as `unigrams=`.
- **Labels** (`pyctcdecode_labels`): one label per log-prob column, blank "" (pyctcdecode's blank). BPE token sets
  pass the sentencepiece pieces as they are ("▁" marks a word start, which is how pyctcdecode detects BPE), the
  unknown piece as pyctcdecode's "▁⁇▁" (a word of its own, "⁇", as sentencepiece decodes it). Char sets pass the
  characters, " " as pyctcdecode's word separator, "<unk>" as its "⁇". Control pieces (`<s>`, `</s>`, `<pad>`: the
  sentencepiece model says so; without one, any other "<...>" token) decode to nothing, which in CTC is what a blank
  is, and pyctcdecode allows one blank label only: their columns are folded into the blank column (log-sum-exp) and
  dropped. Byte-fallback pieces cannot be pyctcdecode labels and are refused. After building, the adapter checks that
  pyctcdecode kept every label as given and detected the token kind (its alphabet normaliser renames "|", "_",
  "<pad>", "<unk>" silently).
- **Input.** pyctcdecode takes one (T, V) numpy array per utterance; it re-applies log-softmax (identity on
  log-probs) and clips at log(1e-15). Utterances are decoded one by one with `decode_beams` (`prune_history` as its
  own `decode()` sets it for a 1-best answer).
- **Output.** `Hypothesis.words` is pyctcdecode's text split on spaces; `tokens` is empty (pyctcdecode returns text
  and word frame spans, not the token path; the harness scores words); `word_start_frames` / `word_end_frames` are its
  word spans (start frame, frame after the end); `score` its combined score (acoustic prefix log-prob + alpha * LM +
  beta * words + unknown-word and hotword terms).
- **Word boosting.** pyctcdecode's `hotwords` + `hotword_weight`: one weight per call, in nats added per matched word
  (not scaled by alpha, like the harness's boosts), with partial credit while a hotword is being spelled. A
  per-utterance {word: boost} whose words share one value is passed as that utterance's hotwords with that weight; a
  dict with several values raises NotImplementedError (no per-word weights in pyctcdecode).
- **Processes.** `num_processes` > 1: a pool of spawned worker processes, each with its own decoder, deals out a
  batch's utterances (as the Flashlight adapter does). pyctcdecode's own `decode_beams_batch(pool)` refuses spawn
  pools (its issue 65) and a fork of a process holding torch's thread pools can deadlock, so its pool is not used.
- **Install.** pyctcdecode 0.5.0's metadata pins `numpy<2`, which would downgrade numpy under pandas 3; its code runs
  on numpy 2 (this module's tests), so `make setup` installs it with `--no-deps` (its one runtime dependency, pygtrie,
  and kenlm are in the `baselines` extra). Without pyctcdecode the row is unavailable and says so; without kenlm, with
  `use_lm=true`, likewise (`decoder.use_lm=false` decodes without an LM).
"""
from __future__ import annotations

import contextlib
import logging
import math
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from decoders.types import Hypothesis
from eval.adapters.base import DecodingContext, UtterancePool, register_decoder, typed_config
from recipes.tokens import TokenSet

# pyctcdecode's spellings (pyctcdecode/alphabet.py)
BLANK_LABEL = ""
UNK_LABEL_CHAR = "\u2047"  # "⁇"
UNK_LABEL_BPE = "\u2581\u2047\u2581"  # "▁⁇▁": an unknown piece bounded by word breaks on both sides
ARPA_SPECIAL_WORDS = ("<s>", "</s>", "<unk>")
_SPECIAL_TOKEN = re.compile(r"^<[^<>\s]+>$")


@dataclass
class PyctcdecodeConfig:
    name: str = "pyctcdecode"
    beam_width: int = 32  # hypotheses kept per frame: Flashlight's beam_size here (pyctcdecode's default is 100)
    beam_prune_logp: float = -17.0  # drop hypotheses this far below the best: Flashlight's beam_threshold (pyctcdecode: -10)
    token_min_logp: float = -5.0  # tokens below this log-prob are not tried (the frame's argmax always is): its default
    prune_history: bool = True  # merge hypotheses with the same LM history (pyctcdecode's decode() does, for 1-best)
    lm_weight: float = 0.5  # pyctcdecode's alpha: weight of the natural-log LM score (Flashlight's dev-chosen value)
    word_score: float = 2.0  # pyctcdecode's beta: natural-log bonus per word (Flashlight's dev-chosen value)
    unk_score_offset: float = -10.0  # log10 added to an out-of-vocabulary word's LM score (pyctcdecode's default)
    lm_score_boundary: bool = True  # score <s> ... </s> (pyctcdecode's default; Flashlight does the same)
    use_lm: bool = True  # false: pyctcdecode without an LM (no alpha, no beta)
    arpa_path: Optional[str] = None  # default: the workload's word ARPA (DecodingContext.arpa_path)
    num_processes: int = 1  # worker processes decoding a batch's utterances in parallel; 1 = in this process


CONFIG_SCHEMA = PyctcdecodeConfig


@dataclass(frozen=True)
class LabelMap:
    """pyctcdecode labels for a token set: `labels[j]` names input column `keep[j]`; the columns in `folded` are
    added (log-sum-exp) into the blank column and dropped."""

    labels: tuple
    keep: tuple
    folded: tuple
    blank_index: int  # of the blank in `labels`

    def columns(self, log_probs: np.ndarray) -> np.ndarray:
        """(T, V) log-probs -> (T, len(labels)) in label order."""
        if self.folded:
            log_probs = log_probs.copy()
            blank = self.keep[self.blank_index]
            log_probs[:, blank] = np.logaddexp.reduce(log_probs[:, [blank, *self.folded]], axis=1)
        if len(self.keep) == log_probs.shape[1] and not self.folded:
            return log_probs
        return log_probs[:, list(self.keep)]


def _piece_kinds(tokens: TokenSet) -> dict:
    """column -> "unk" | "control" | "byte" for the token set's special pieces (from the sentencepiece model when there
    is one; else "<unk>" is the unknown token and every other "<...>" token a control symbol)."""
    kinds = {}
    sp = None
    if tokens.kind == "bpe" and (tokens._sp is not None or tokens.sp_model_path):
        sp = tokens._sentencepiece()
    for col, tok in enumerate(tokens.tokens):
        if col == tokens.blank_id:
            continue
        if sp is not None:
            pid = col - (1 if tokens.blank_id == 0 else 0)
            if 0 <= pid < sp.get_piece_size() and sp.id_to_piece(pid) == tok:
                if sp.is_unknown(pid):
                    kinds[col] = "unk"
                elif sp.is_control(pid):
                    kinds[col] = "control"
                elif sp.is_byte(pid):
                    kinds[col] = "byte"
                continue
        if tok == "<unk>":
            kinds[col] = "unk"
        elif _SPECIAL_TOKEN.match(tok):
            kinds[col] = "byte" if re.match(r"^<0x[0-9A-Fa-f]{2}>$", tok) else "control"
    return kinds


def pyctcdecode_labels(tokens: TokenSet) -> LabelMap:
    """The token set's columns as pyctcdecode labels (module docstring: blank "", unknown "⁇" / "▁⁇▁", control pieces
    folded into the blank). One-line ValueErrors for what pyctcdecode cannot represent."""
    kinds = _piece_kinds(tokens)
    byte = [tokens.tokens[c] for c, k in kinds.items() if k == "byte"]
    if byte:
        raise ValueError(f"pyctcdecode: byte-fallback pieces ({byte[0]!r}, ...) cannot be pyctcdecode labels")
    labels, keep, folded = [], [], []
    for col, tok in enumerate(tokens.tokens):
        kind = kinds.get(col)
        if col == tokens.blank_id:
            label = BLANK_LABEL
        elif kind == "control":
            folded.append(col)
            continue
        elif kind == "unk":
            label = UNK_LABEL_BPE if tokens.kind == "bpe" else UNK_LABEL_CHAR
        else:
            label = tok
        if tokens.kind == "bpe" and " " in label:
            raise ValueError(f"pyctcdecode: BPE piece {tok!r} (column {col}) contains a space")
        if tokens.kind == "char" and col != tokens.blank_id and (label.startswith("\u2581") or label.startswith("##")):
            raise ValueError(f"pyctcdecode: character token {tok!r} (column {col}) would make pyctcdecode read the "
                             f"alphabet as BPE")
        labels.append(label)
        keep.append(col)
    if len(set(labels)) != len(labels):
        dup = next(x for x in labels if labels.count(x) > 1)
        raise ValueError(f"pyctcdecode: two columns map to the label {dup!r}")
    if tokens.kind == "bpe" and not any(x.startswith("\u2581") for x in labels):
        raise ValueError("pyctcdecode: a BPE token set without any '\u2581' piece (pyctcdecode detects BPE by it)")
    if tokens.kind == "char" and " " not in labels:
        raise ValueError("pyctcdecode: a character token set needs the word separator ' '")
    return LabelMap(labels=tuple(labels), keep=tuple(keep), folded=tuple(folded),
                    blank_index=keep.index(tokens.blank_id))


def arpa_unigrams(path: Path) -> list[str]:
    """Every word of the ARPA's unigram section (with or without a back-off weight), `<s>`, `</s>`, `<unk>` left out."""
    words, inside = [], False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line == "\\1-grams:":
                inside = True
                continue
            if inside and (line.startswith("\\") or not line):
                if line.startswith("\\"):
                    break
                continue
            if inside:
                fields = line.split()
                if len(fields) >= 2 and fields[1] not in ARPA_SPECIAL_WORDS:
                    words.append(fields[1])
    if not words:
        raise ValueError(f"pyctcdecode: no unigrams in {path} (not an ARPA file?)")
    return words


def _finite(cfg, *names):
    for n in names:
        v = getattr(cfg, n)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            raise ValueError(f"pyctcdecode: {n} must be a finite number, got {v!r}")


@contextlib.contextmanager
def _pyctcdecode_info_off():
    """pyctcdecode logs at INFO what it detected ("Alphabet determined to be of BPE style.", "Using arpa instead of
    binary LM file"): the adapter checks those things itself, so only its warnings are kept."""
    logger = logging.getLogger("pyctcdecode")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


class PyctcdecodeDecoder:
    name = "pyctcdecode"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("pyctcdecode", cfg)
        _finite(cfg, "lm_weight", "word_score", "unk_score_offset", "beam_prune_logp", "token_min_logp")
        if isinstance(cfg.beam_width, bool) or not isinstance(cfg.beam_width, int) or cfg.beam_width < 1:
            raise ValueError(f"pyctcdecode: beam_width must be an integer >= 1, got {cfg.beam_width!r}")
        if cfg.beam_prune_logp > 0:
            raise ValueError(f"pyctcdecode: beam_prune_logp must be <= 0 (a gap below the best), got {cfg.beam_prune_logp}")
        if cfg.lm_weight < 0:
            raise ValueError(f"pyctcdecode: lm_weight must be >= 0, got {cfg.lm_weight}")
        if isinstance(cfg.num_processes, bool) or not isinstance(cfg.num_processes, int) or cfg.num_processes < 1:
            raise ValueError(f"pyctcdecode: num_processes must be an integer >= 1, got {cfg.num_processes!r}")
        if not str(ctx.device).startswith("cpu"):
            raise RuntimeError(f"pyctcdecode is a CPU decoder; got device {ctx.device!r}")
        try:
            import pyctcdecode
        except ImportError as e:
            raise ImportError(f"pyctcdecode is not importable ({e}); `pip install --no-deps pyctcdecode==0.5.0 "
                              f"pygtrie` (make setup does)") from e
        self.cfg = cfg
        self.tokens: TokenSet = ctx.tokens
        self.label_map = pyctcdecode_labels(ctx.tokens)
        self.arpa: Optional[Path] = None
        kenlm_path, unigrams = None, None
        if cfg.use_lm:
            try:
                import kenlm  # noqa: F401
            except ImportError as e:
                raise ImportError(f"kenlm not importable ({e}): pyctcdecode's LM needs it (`pip install kenlm`, builds "
                                  f"C++ from source, ~80 s on 2 cores); decoder.use_lm=false decodes without an LM") from e
            arpa = Path(cfg.arpa_path or ctx.arpa_path or "")
            if not arpa.is_file():
                raise FileNotFoundError(f"pyctcdecode: ARPA LM not found: {str(arpa) or '(none given)'} "
                                        f"(decoder.use_lm=false decodes without an LM)")
            self.arpa = arpa
            kenlm_path, unigrams = str(arpa), arpa_unigrams(arpa)
        with _pyctcdecode_info_off():
            self.decoder = pyctcdecode.build_ctcdecoder(
                list(self.label_map.labels), kenlm_model_path=kenlm_path, unigrams=unigrams,
                alpha=float(cfg.lm_weight), beta=float(cfg.word_score), unk_score_offset=float(cfg.unk_score_offset),
                lm_score_boundary=bool(cfg.lm_score_boundary))
        # pyctcdecode keeps its LM in a class-level dict until cleanup(); free it with this adapter
        self._cleanup = weakref.finalize(self, self.decoder.cleanup)
        alphabet = self.decoder._alphabet
        if tuple(alphabet.labels) != self.label_map.labels or alphabet.is_bpe != (ctx.tokens.kind == "bpe"):
            changed = [(a, b) for a, b in zip(self.label_map.labels, alphabet.labels) if a != b]
            raise ValueError(f"pyctcdecode changed the labels it was given (is_bpe={alphabet.is_bpe}, first change "
                             f"{changed[:1]}, {len(alphabet.labels)} labels for {len(self.label_map.labels)})")
        self.num_processes = int(cfg.num_processes)
        self._pool = UtterancePool(PyctcdecodeDecoder, cfg, ctx, self.num_processes) if self.num_processes > 1 else None

    @staticmethod
    def _hotwords(boosts: Optional[dict]) -> tuple[Optional[list], float]:
        if not boosts:
            return None, 0.0
        values = {float(v) for v in boosts.values()}
        if len(values) > 1:
            raise NotImplementedError("pyctcdecode has one hotword_weight per call; this utterance's boosts carry "
                                      f"{len(values)} different values")
        (weight,) = values
        return sorted(boosts), weight

    def decode_utterance(self, emission: np.ndarray, boosts: Optional[dict] = None) -> Hypothesis:
        """One utterance: emission (frames, V) float32 natural-log posteriors in the token set's column order."""
        if emission.shape[0] == 0:
            return Hypothesis(tokens=[], words=[], score=0.0, word_start_frames=[], word_end_frames=[])
        hotwords, weight = self._hotwords(boosts)
        cfg = self.cfg
        beams = self.decoder.decode_beams(
            self.label_map.columns(emission), beam_width=int(cfg.beam_width),
            beam_prune_logp=float(cfg.beam_prune_logp), token_min_logp=float(cfg.token_min_logp),
            prune_history=bool(cfg.prune_history), hotwords=hotwords, hotword_weight=weight)
        text, _lm_state, word_frames, _acoustic, combined = beams[0]
        return Hypothesis(tokens=[], words=text.split(), score=float(combined),
                          word_start_frames=[float(s) for _, (s, _) in word_frames],
                          word_end_frames=[float(e) for _, (_, e) in word_frames])

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor,
               boosts: Optional[Sequence[dict]] = None) -> list[Hypothesis]:
        if not isinstance(log_probs, torch.Tensor) or log_probs.dim() != 3 or log_probs.shape[-1] != self.tokens.vocab_size:
            raise ValueError(f"log_probs must be (B, T, {self.tokens.vocab_size}), got "
                             f"{tuple(getattr(log_probs, 'shape', ()))}")
        if lengths.dim() != 1 or lengths.shape[0] != log_probs.shape[0]:
            raise ValueError(f"lengths must be (B,) with B={log_probs.shape[0]}, got {tuple(lengths.shape)}")
        if boosts is not None and len(boosts) != log_probs.shape[0]:
            raise ValueError(f"boosts must have one dict per utterance ({log_probs.shape[0]}), got {len(boosts)}")
        emissions = log_probs.detach().to("cpu", torch.float32).numpy()  # (B, T, V)
        if np.isnan(emissions).any():  # pyctcdecode would carry NaN scores and return an arbitrary beam
            raise ValueError("pyctcdecode: log_probs contain NaN")
        lengths = lengths.to("cpu")
        items = [(np.ascontiguousarray(emissions[b, : int(lengths[b])]), boosts[b] if boosts is not None else None)
                 for b in range(emissions.shape[0])]
        if self.num_processes == 1:
            return [self.decode_utterance(e, bst) for e, bst in items]
        return self._pool.map(items)

    def close(self) -> None:
        """Stop the worker processes (a later decode starts them again)."""
        if self._pool is not None:
            self._pool.close()


@register_decoder("pyctcdecode")
def build(cfg, ctx: DecodingContext) -> PyctcdecodeDecoder:
    return PyctcdecodeDecoder(cfg, ctx)
