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
# how blank is written in the token tables of the field: k2/icefall "<blk>", "<blank>", "<b>"; torchaudio "-"
BLANK_SYMBOLS = ("<blk>", "<blank>", "<b>", "-")
SEPARATOR_SYMBOLS = ("<space>", "|")  # the char word separator in token tables (ours/icefall, torchaudio)

BlankPosition = Literal["first", "last"]


@dataclass
class TokenSet:
    tokens: list[str]  # column order, blank included
    blank_id: int
    kind: Literal["char", "bpe"]
    sp_model_path: Optional[str] = None
    # a pronunciation lexicon the user supplied ({word: [spelling, ...]}, spellings as token strings): graph recipes
    # spell words with it instead of spelling them letter by letter / with the sentencepiece model
    lexicon: Optional[dict] = field(default=None, repr=False)
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

    @classmethod
    def from_tokens_file(cls, path: str | Path, kind: Optional[str] = None, blank_symbol: Optional[str] = None,
                         sp_model_path: Optional[str] = None) -> "TokenSet":
        """A token table in the field's formats: k2/icefall `tokens.txt` ("symbol id" per line, ids 0..V-1 in
        column order) or torchaudio's (one symbol per line, in column order). Blank: `blank_symbol`, else the one of
        BLANK_SYMBOLS present. The char word separator may be written "<space>" or torchaudio's "|". Disambiguation
        symbols (#0, #1, ...) are not model outputs and are skipped. `kind`: "char" or "bpe"; default: "bpe" when a
        symbol starts with "▁", else "char". Errors are one-line ValueErrors naming the file and line."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"token table not found: {path}")
        entries: list[tuple[int, str]] = []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                fields = line.split()
                if not fields:
                    continue
                if len(fields) > 2 or (len(fields) == 2 and not fields[1].lstrip("-").isdigit()):
                    raise ValueError(f"{path}:{lineno}: expected 'symbol' or 'symbol id', got {line.strip()!r:.60}")
                sym = fields[0]
                if sym.startswith("#") and sym[1:].isdigit():
                    continue
                idx = int(fields[1]) if len(fields) == 2 else len(entries)
                entries.append((idx, sym))
        if not entries:
            raise ValueError(f"{path}: no tokens")
        entries.sort()
        ids = [i for i, _ in entries]
        if ids != list(range(len(entries))):
            raise ValueError(f"{path}: token ids must be 0..{len(entries) - 1} without gaps or repeats (columns of the "
                             f"model's output), got {ids[:8]}{'...' if len(ids) > 8 else ''}")
        symbols = [s for _, s in entries]
        if len(set(symbols)) != len(symbols):
            dup = next(s for s in symbols if symbols.count(s) > 1)
            raise ValueError(f"{path}: symbol {dup!r} appears twice")
        if blank_symbol is None:
            present = [b for b in BLANK_SYMBOLS if b in symbols]
            if not present:
                raise ValueError(f"{path}: no blank symbol (one of {list(BLANK_SYMBOLS)}); name yours with blank_symbol=")
            blank_symbol = present[0]
        elif blank_symbol not in symbols:
            raise ValueError(f"{path}: blank symbol {blank_symbol!r} is not in the table")
        if kind is None:
            kind = "bpe" if any(s.startswith(WORD_START) for s in symbols) else "char"
        if kind not in ("char", "bpe"):
            raise ValueError(f"token kind must be 'char' or 'bpe', got {kind!r}")
        blank_id = symbols.index(blank_symbol)
        tokens = [BLANK_SYMBOL if i == blank_id else s for i, s in enumerate(symbols)]
        if kind == "char":
            for sep in SEPARATOR_SYMBOLS:
                if sep in tokens and " " not in tokens:
                    tokens[tokens.index(sep)] = " "
            if " " not in tokens:
                raise ValueError(f"{path}: a character token table needs a word separator ({' or '.join(SEPARATOR_SYMBOLS)})")
        return cls(tokens=tokens, blank_id=blank_id, kind=kind, sp_model_path=sp_model_path)

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
