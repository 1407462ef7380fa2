"""`TokenSet`: the model's output vocabulary in log-prob column order, blank included.

Every consumer (simulator, graph recipes, decoders' detokenizers, NeMo bridge) goes through this one type,
so that column ids mean the same thing everywhere. Blank position is explicit: NeMo puts blank LAST,
torchaudio/k2 recipes usually FIRST; both are supported.

- kind "char": tokens are characters; the word separator is the space token " " (NeMo's char models).
- kind "bpe": tokens are sentencepiece pieces; "▁" marks a word start (NeMo's BPE models).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Sequence

BLANK_SYMBOL = "<blk>"
WORD_START = "\u2581"  # sentencepiece's "▁"

BlankPosition = Literal["first", "last"]


@dataclass
class TokenSet:
    tokens: list[str]  # column order, blank included
    blank_id: int
    kind: Literal["char", "bpe"]
    sp_model_path: Optional[str] = None
    _index: dict = field(default_factory=dict, repr=False)
    _sp: object = field(default=None, repr=False)

    def __post_init__(self):
        if not 0 <= self.blank_id < len(self.tokens):
            raise ValueError(f"blank_id {self.blank_id} outside [0, {len(self.tokens)})")
        self._index = {t: i for i, t in enumerate(self.tokens)}

    @property
    def vocab_size(self) -> int:
        """Number of log-prob columns (blank included)."""
        return len(self.tokens)

    @property
    def non_blank_ids(self) -> list[int]:
        return [i for i in range(len(self.tokens)) if i != self.blank_id]

    # ---- construction ----
    @classmethod
    def from_chars(cls, alphabet: Sequence[str], blank: BlankPosition = "last") -> "TokenSet":
        syms = list(alphabet)
        if " " not in syms:
            syms = [" "] + syms
        tokens = syms + [BLANK_SYMBOL] if blank == "last" else [BLANK_SYMBOL] + syms
        return cls(tokens=tokens, blank_id=len(tokens) - 1 if blank == "last" else 0, kind="char")

    @classmethod
    def from_sentencepiece(cls, model_path: str | Path, blank: BlankPosition = "last") -> "TokenSet":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(model_path))
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        tokens = pieces + [BLANK_SYMBOL] if blank == "last" else [BLANK_SYMBOL] + pieces
        ts = cls(
            tokens=tokens,
            blank_id=len(tokens) - 1 if blank == "last" else 0,
            kind="bpe",
            sp_model_path=str(model_path),
        )
        ts._sp = sp
        return ts

    # ---- column <-> piece id (sentencepiece ids skip the blank column) ----
    def _piece_offset(self) -> int:
        return 1 if self.blank_id == 0 else 0

    # ---- text <-> columns ----
    def encode(self, text: str) -> list[int]:
        """Text (already normalised) -> column ids, no blanks."""
        if self.kind == "bpe":
            sp = self._sentencepiece()
            off = self._piece_offset()
            return [i + off for i in sp.encode(text)]
        out = []
        for ch in text:
            if ch not in self._index:
                raise ValueError(f"character {ch!r} is not in the token set")
            out.append(self._index[ch])
        return out

    def decode(self, columns: Sequence[int]) -> str:
        """Column ids (blank-free, already collapsed) -> text."""
        ids = [int(c) for c in columns if int(c) != self.blank_id]
        if self.kind == "bpe":
            off = self._piece_offset()
            return self._sentencepiece().decode([i - off for i in ids])
        return " ".join("".join(self.tokens[i] for i in ids).split())

    def _sentencepiece(self):
        if self._sp is None:
            import sentencepiece as spm

            if self.sp_model_path is None:
                raise ValueError("bpe TokenSet without a sentencepiece model path")
            self._sp = spm.SentencePieceProcessor(model_file=self.sp_model_path)
        return self._sp

    # ---- persistence: tokens.txt (symbol id per line, k2/icefall style) ----
    def write_tokens_txt(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for i, t in enumerate(self.tokens):
                f.write(f"{'<space>' if t == ' ' else t} {i}\n")
