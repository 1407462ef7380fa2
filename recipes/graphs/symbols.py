"""Symbol numbering of the decoding graphs: THE one place that maps log-prob columns to FST labels.

Two numberings exist in the field and both are produced here:
- Kaldi/OpenFst (TLG.fst, what Riva's decoder and kaldi-decoder read): `<eps>` = 0, the token in log-prob
  column c has id c + 1 (blank included, wherever it sits), then `#0, #1, ...` disambiguation symbols.
  A decoder reads column = label - 1.
- k2 (HLG.pt, HLG.k2.txt, our graph image): label = column; -1 enters the final state.

Words (both numberings): `<eps>` = 0, real words 1..W (sorted), then `#0`, `<s>`, `</s>` (icefall layout).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from decoders.openfst import write_symbol_table
from recipes.lexicon import token_to_symbol
from recipes.tokens import TokenSet

EPS = "<eps>"


def kaldi_token_id(column: int) -> int:
    """Log-prob column -> Kaldi/OpenFst token label (0 is epsilon)."""
    return int(column) + 1


def column_of_kaldi_token(label: int) -> int:
    """Kaldi/OpenFst token label (>= 1) -> log-prob column."""
    if label < 1:
        raise ValueError(f"column_of_kaldi_token: label {label} is epsilon or negative, not a token")
    return int(label) - 1


@dataclass
class TokenTable:
    """Kaldi-numbered token symbols for one TokenSet plus `num_disambig` disambiguation symbols."""

    tokens: TokenSet
    num_disambig: int

    @property
    def vocab_size(self) -> int:
        return self.tokens.vocab_size

    @property
    def blank_label(self) -> int:
        return kaldi_token_id(self.tokens.blank_id)

    @property
    def non_blank_labels(self) -> list[int]:
        return [kaldi_token_id(c) for c in self.tokens.non_blank_ids]

    def disambig_label(self, k: int) -> int:
        """Label of `#k` (k = 0..num_disambig-1)."""
        if not 0 <= k < self.num_disambig:
            raise ValueError(f"disambig_label: #{k} outside [0, {self.num_disambig})")
        return self.vocab_size + 1 + k

    @property
    def disambig_labels(self) -> list[int]:
        return [self.disambig_label(k) for k in range(self.num_disambig)]

    @property
    def first_disambig_label(self) -> int:
        return self.vocab_size + 1

    def label_of(self, symbol: str) -> int:
        if symbol.startswith("#") and symbol[1:].isdigit():
            return self.disambig_label(int(symbol[1:]))
        idx = self.tokens._index.get(symbol)
        if idx is None:
            raise ValueError(f"TokenTable.label_of: token {symbol!r} is not in the token set")
        return kaldi_token_id(idx)

    def symbols(self) -> list[str]:
        """id -> symbol for the Kaldi numbering (tokens.txt of TLG.fst)."""
        return [EPS] + [token_to_symbol(t) for t in self.tokens.tokens] + [f"#{k}" for k in range(self.num_disambig)]

    def write(self, path: str | Path) -> None:
        write_symbol_table(path, self.symbols())


@dataclass
class WordTable:
    """Word symbols: `<eps>` 0, words 1..W, `#0`, `<s>`, `</s>`."""

    words: list[str]  # real words, sorted

    @classmethod
    def from_words(cls, words: Iterable[str]) -> "WordTable":
        special = {EPS, "#0", "<s>", "</s>"}
        return cls(sorted({w for w in words if w and w not in special}))

    def symbols(self) -> list[str]:
        return [EPS] + self.words + ["#0", "<s>", "</s>"]

    @property
    def disambig0(self) -> int:
        return len(self.words) + 1

    @property
    def num_real_words(self) -> int:
        return len(self.words)

    def index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.symbols())}

    def write(self, path: str | Path) -> None:
        write_symbol_table(path, self.symbols())


def read_arpa_words(arpa_path: str | Path) -> list[str]:
    """Unigram words of an ARPA file (plain or .gz)."""
    import gzip

    opener = gzip.open if str(arpa_path).endswith(".gz") else open
    words = []
    in_unigrams = False
    with opener(arpa_path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("\\1-grams:"):
                in_unigrams = True
                continue
            if in_unigrams:
                if line.startswith("\\"):
                    break
                fields = line.split()
                if len(fields) >= 2:
                    words.append(fields[1])
    if not words:
        raise ValueError(f"read_arpa_words: no unigrams found in {arpa_path}")
    return words
