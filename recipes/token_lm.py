"""Token-level n-gram ARPA in NeMo's encoding, from a text corpus and the model's tokenizer.

NeMo's `NGramGPULanguageModel` (and its KenLM route, `scripts/asr_language_modeling/ngram_lm/train_kenlm.py`)
reads a *token-level* ARPA: each sentence is tokenized with the ASR model's tokenizer and every token id `i`
(the model's output index without the blank, i.e. the sentencepiece id) is written as the one character
`chr(i + DEFAULT_TOKEN_OFFSET)`, DEFAULT_TOKEN_OFFSET = 100 (nemo/collections/asr/parts/submodules/ngram_lm/
constants.py; kenlm_utils.tokenize_str). NeMo trains the counts with KenLM's `lmplz`, which is not installed on
the machines this project runs on, so the n-grams here are estimated by the project's own order-3 interpolated
Kneser-Ney estimator (`recipes.lm.estimate_kneser_ney`, the same one that builds the word ARPA). Order 3 is
that estimator's order (NeMo recipes often use higher orders for BPE tokens; say so beside any comparison).

`nemo_token_ids(tokens)`: the NeMo id of every non-blank column (column order without the blank), shared by the
NeMo adapter and our own token-level LM fusion so both read the same ARPA the same way.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from recipes.lm import build_arpa
from recipes.tokens import TokenSet

NEMO_TOKEN_OFFSET = 100  # nemo.collections.asr.parts.submodules.ngram_lm.constants.DEFAULT_TOKEN_OFFSET


def nemo_token_ids(tokens: TokenSet) -> dict[int, int]:
    """column id -> NeMo token id (the column's index once the blank column is removed)."""
    return {c: c - (1 if c > tokens.blank_id else 0) for c in tokens.non_blank_ids}


def nemo_token_symbols(tokens: TokenSet) -> list[Optional[str]]:
    """Per column, the ARPA symbol NeMo writes for it (`chr(id + 100)`), None for the blank."""
    ids = nemo_token_ids(tokens)
    return [None if c == tokens.blank_id else chr(ids[c] + NEMO_TOKEN_OFFSET) for c in range(tokens.vocab_size)]


def _sentences(text_path: Path, tokens: TokenSet, max_sentences: Optional[int]) -> tuple[np.ndarray, np.ndarray]:
    ids = nemo_token_ids(tokens)
    flat: list[int] = []
    offsets = [0]
    with open(text_path, encoding="utf-8") as f:
        for line in f:
            text = line.strip()
            if not text:
                continue
            cols = tokens.encode(text)
            if not cols:
                continue
            flat.extend(ids[c] for c in cols)
            offsets.append(len(flat))
            if max_sentences is not None and len(offsets) - 1 >= max_sentences:
                break
    if len(offsets) == 1:
        raise ValueError(f"{text_path}: no non-empty sentence to train a token LM on")
    return np.asarray(flat, dtype=np.int64), np.asarray(offsets, dtype=np.int64)


def token_arpa_key(text_path: Path, tokens: TokenSet, prune_threshold: float) -> str:
    """Content hash of what the token ARPA depends on (text, token table, pruning)."""
    h = hashlib.sha256()
    h.update(Path(text_path).read_bytes())
    h.update("\x00".join(tokens.tokens).encode())
    h.update(f"{tokens.blank_id}|{tokens.kind}|{prune_threshold}|v2".encode())
    if tokens.sp_model_path:
        h.update(Path(tokens.sp_model_path).read_bytes())
    return h.hexdigest()[:16]


def build_token_arpa(
    text_path: str | Path,
    tokens: TokenSet,
    out_path: str | Path,
    prune_threshold: float = 0.0,
    max_sentences: Optional[int] = None,
) -> Path:
    """Write the order-3 token-level KN ARPA of `text_path` (one sentence per line, normalised) in NeMo's
    encoding to `out_path` (atomically). Every non-blank token is in the unigrams (unseen ones by the uniform
    interpolation), so the ARPA's vocabulary is exactly the model's."""
    text_path, out_path = Path(text_path), Path(out_path)
    if not text_path.is_file():
        raise FileNotFoundError(f"token LM text {text_path} not found")
    ids, offsets = _sentences(text_path, tokens, max_sentences)
    symbols = [s for s in nemo_token_symbols(tokens) if s is not None]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + f".tmp{os.getpid()}")
    build_arpa(ids, offsets, symbols, tmp, prune_threshold=prune_threshold)
    _strip_leading_blank_lines(tmp)
    os.replace(tmp, out_path)
    return out_path


def _strip_leading_blank_lines(path: Path) -> None:
    # recipes.lm.write_arpa starts with an empty line (kaldilm and KenLM accept it); NeMo's ARPA reader asserts
    # that the first line is "\\data\\", as KenLM's lmplz writes it.
    text = path.read_text(encoding="utf-8")
    path.write_text(text.lstrip("\n"), encoding="utf-8")


def cached_token_arpa(text_path: str | Path, tokens: TokenSet, cache_dir: str | Path,
                      prune_threshold: float = 0.0) -> Path:
    """`build_token_arpa` once per (text, tokens, pruning) content: `cache_dir/token_3gram_<hash>.arpa`."""
    text_path = Path(text_path)
    if not text_path.is_file():
        raise FileNotFoundError(f"token LM text {text_path} not found")
    path = Path(cache_dir) / f"token_3gram_{token_arpa_key(text_path, tokens, prune_threshold)}.arpa"
    if not path.is_file():
        build_token_arpa(text_path, tokens, path, prune_threshold=prune_threshold)
    return path


def symbols_for(tokens: TokenSet, encoding: str) -> Sequence[Optional[str]]:
    """ARPA symbol per column for a token-level LM: 'nemo' (chr(id + 100)) or 'piece' (the token string)."""
    if encoding == "nemo":
        return nemo_token_symbols(tokens)
    if encoding == "piece":
        return [None if c == tokens.blank_id else t for c, t in enumerate(tokens.tokens)]
    raise ValueError(f"unknown token LM encoding {encoding!r}; valid choices: ['nemo', 'piece']")
