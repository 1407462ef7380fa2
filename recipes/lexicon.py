"""Lexicon: word -> token-piece spellings for a `TokenSet`, plus Kaldi-style disambiguation symbols.

Why a lexicon at all: the decoding graphs (L in TLG/HLG) and the lexicon-constrained baselines
(Flashlight) need, for every word the LM knows, the token sequence(s) the CTC model emits for it.

- char token sets: a word is spelled letter by letter (`"hello" -> ["h","e","l","l","o"]`). The word
  separator (the space token `" "`) is NOT part of a spelling; graph recipes make it optional between
  words (see `recipes.graphs.lexicon_fst`), the Flashlight adapter passes it as its silence token.
- bpe token sets: a word is segmented by the token set's sentencepiece model, exactly as the tokenizer
  segments it inside a sentence (the first piece carries the "▁" word-start marker).

OOV handling: a word that cannot be spelled with the token set (a character outside a char vocabulary, or
a sentencepiece `<unk>` piece) is left out of the lexicon and reported (`LexiconReport.oov_words`). If the
word list holds an unknown-word entry (`<unk>`/`<UNK>`) and the token set has an `<unk>` token, that word
is spelled as the single `<unk>` token (icefall's convention), so the LM's unk mass stays reachable.

Homophones / prefixes: two words with the same spelling, or a spelling that is a proper prefix of another,
make L non-determinizable; `add_disambig_symbols` appends `#1, #2, ...` exactly like Kaldi's
`add_lex_disambig.pl` (and icefall's `add_disambig_symbols`).
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal, Optional, Sequence

from recipes.tokens import TokenSet

log = logging.getLogger(__name__)

Lexicon = dict  # dict[str, list[list[str]]]: word -> list of spellings (token symbols)

UNK_WORDS = ("<unk>", "<UNK>")
SPECIAL_WORDS = ("<eps>", "<s>", "</s>", "#0")
SPACE_SYMBOL = "<space>"  # how the char space token is written in text files (tokens.txt, lexicon.txt)


@dataclass
class LexiconReport:
    """What `build_lexicon` did with the word list (for logs and graph_info.json)."""

    num_words: int = 0
    num_spellings: int = 0
    oov_words: list = field(default_factory=list)
    skipped_special: list = field(default_factory=list)


def token_to_symbol(token: str) -> str:
    """Token string -> the symbol used in text files (the space character cannot be a field)."""
    return SPACE_SYMBOL if token == " " else token


def symbol_to_token(symbol: str) -> str:
    """A text-file symbol -> the token string ("<space>" and torchaudio's "|" are the char word separator)."""
    return " " if symbol in (SPACE_SYMBOL, "|") else symbol


def _spell_char(word: str, tokens: TokenSet) -> Optional[list[str]]:
    index = set(tokens.tokens)
    if any(ch not in index or ch == " " for ch in word):
        return None
    return list(word)


def _spell_bpe(word: str, tokens: TokenSet) -> Optional[list[str]]:
    sp = tokens._sentencepiece()
    ids = sp.encode(word)
    if not ids or any(i == sp.unk_id() for i in ids):
        return None
    off = 1 if tokens.blank_id == 0 else 0
    return [tokens.tokens[i + off] for i in ids]


def build_lexicon(
    words: Sequence[str],
    tokens: TokenSet,
    *,
    oov: Literal["skip", "error"] = "skip",
    report: Optional[LexiconReport] = None,
) -> Lexicon:
    """Spell every word of `words` with `tokens`; returns {word: [spelling, ...]} in word-list order.

    words: the LM's vocabulary (order kept; duplicates ignored). Special symbols (`<eps>`, `<s>`, `</s>`,
        `#0`) are skipped: they are not spoken words.
    oov: "skip" leaves unspellable words out (listed in `report.oov_words`), "error" raises ValueError.
    report: optional `LexiconReport` filled in place.
    """
    if oov not in ("skip", "error"):
        raise ValueError(f"build_lexicon: oov must be 'skip' or 'error', got {oov!r}")
    if tokens.kind not in ("char", "bpe"):
        raise ValueError(f"build_lexicon: unsupported token kind {tokens.kind!r} (expected 'char' or 'bpe')")
    rep = report if report is not None else LexiconReport()
    spell = _spell_char if tokens.kind == "char" else _spell_bpe
    if tokens.lexicon is not None:  # the user's own lexicon: its spellings, its words only
        return _from_user_lexicon(words, tokens, oov, rep)
    unk_token = "<unk>" if "<unk>" in tokens.tokens else None
    lexicon: Lexicon = {}
    for word in words:
        word = word.strip()
        if not word or word in lexicon:
            continue
        if word in SPECIAL_WORDS:
            rep.skipped_special.append(word)
            continue
        if word in UNK_WORDS:
            if unk_token is not None:
                lexicon[word] = [[unk_token]]
            else:
                rep.skipped_special.append(word)
            continue
        if any(ch.isspace() for ch in word):
            raise ValueError(f"build_lexicon: word {word!r} contains whitespace")
        spelling = spell(word, tokens)
        if spelling is None:
            if oov == "error":
                raise ValueError(f"build_lexicon: word {word!r} cannot be spelled with the {tokens.kind} token set")
            rep.oov_words.append(word)
            continue
        lexicon[word] = [spelling]
    rep.num_words = len(lexicon)
    rep.num_spellings = sum(len(v) for v in lexicon.values())
    if rep.oov_words:
        log.warning(
            "lexicon: %d OOV word(s) left out (first: %s)", len(rep.oov_words), ", ".join(rep.oov_words[:5])
        )
    return lexicon


def _from_user_lexicon(words: Sequence[str], tokens: TokenSet, oov: str, rep: LexiconReport) -> Lexicon:
    """build_lexicon over `tokens.lexicon` (checked by `check_lexicon`): words without an entry are OOV."""
    lexicon: Lexicon = {}
    for word in words:
        word = word.strip()
        if not word or word in lexicon:
            continue
        if word in SPECIAL_WORDS:
            rep.skipped_special.append(word)
            continue
        spellings = tokens.lexicon.get(word)
        if spellings is None:
            if oov == "error":
                raise ValueError(f"build_lexicon: word {word!r} is not in the lexicon")
            rep.oov_words.append(word)
            continue
        lexicon[word] = [list(s) for s in spellings]
    rep.num_words = len(lexicon)
    rep.num_spellings = sum(len(v) for v in lexicon.values())
    if rep.oov_words:
        log.warning("lexicon: %d LM word(s) without a lexicon entry left out (first: %s)", len(rep.oov_words),
                    ", ".join(rep.oov_words[:5]))
    return lexicon


def check_lexicon(lexicon: Lexicon, tokens: TokenSet, where: str = "lexicon") -> Lexicon:
    """A user lexicon made fit for `tokens`: every symbol must be a non-blank token; a char spelling's trailing
    word separator (torchaudio's lexicons end every word with "|") is dropped, since the graph recipes make the
    separator optional between words. Raises a one-line ValueError naming the word and symbol otherwise."""
    index = set(tokens.tokens)
    blank = tokens.tokens[tokens.blank_id]
    out: Lexicon = {}
    for word, spellings in lexicon.items():
        fixed = []
        for s in spellings:
            s = list(s)
            if tokens.kind == "char" and len(s) > 1 and s[-1] == " ":
                s = s[:-1]
            bad = next((t for t in s if t not in index or t == blank), None)
            if bad is not None:
                raise ValueError(f"{where}: word {word!r} is spelled with {token_to_symbol(bad)!r}, which is not a "
                                 f"token of the token table" + (" (it is the blank)" if bad == blank else ""))
            if tokens.kind == "char" and " " in s:
                raise ValueError(f"{where}: word {word!r} has the word separator inside its spelling")
            if s not in fixed:
                fixed.append(s)
        out[word] = fixed
    if not out:
        raise ValueError(f"{where}: no entries")
    return out


def write_lexicon(lexicon: Lexicon, path: str | Path) -> None:
    """Write `word tok1 tok2 ...` lines (one per spelling; Kaldi/icefall lexicon.txt format)."""
    with open(path, "w", encoding="utf-8") as f:
        for word, spellings in lexicon.items():
            for spelling in spellings:
                f.write(word + " " + " ".join(token_to_symbol(t) for t in spelling) + "\n")


def read_lexicon(path: str | Path) -> Lexicon:
    """Inverse of `write_lexicon` (spellings of one word are grouped; order kept)."""
    lexicon: Lexicon = defaultdict(list)
    if not Path(path).is_file():
        raise FileNotFoundError(f"lexicon not found: {path}")
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 2:
                raise ValueError(f"read_lexicon: {path}:{lineno}: word {fields[0]!r} has an empty spelling")
            lexicon[fields[0]].append([symbol_to_token(s) for s in fields[1:]])
    return dict(lexicon)


def add_disambig_symbols(lexicon: Lexicon) -> tuple[list[tuple[str, list[str]]], int]:
    """Append `#1, #2, ...` to spellings that are shared (homophones) or prefixes of other spellings.

    Returns (entries, max_disambig): entries as (word, spelling + optional "#k") in lexicon order;
    max_disambig is the largest k used (0 when none was needed). Same rule as Kaldi's
    add_lex_disambig.pl: a spelling gets a symbol if it occurs more than once or is a proper prefix of
    another spelling; each such group of identical spellings gets #1, #2, ... in order.
    """
    entries = [(w, list(s)) for w, spellings in lexicon.items() for s in spellings]
    count = defaultdict(int)
    for _, s in entries:
        count[tuple(s)] += 1
    prefixes = set()
    for _, s in entries:
        t = tuple(s)
        for i in range(1, len(t)):
            prefixes.add(t[:i])
    next_id: dict = defaultdict(int)
    max_disambig = 0
    out = []
    for w, s in entries:
        t = tuple(s)
        if count[t] > 1 or t in prefixes:
            next_id[t] += 1
            k = next_id[t]
            max_disambig = max(max_disambig, k)
            out.append((w, s + [f"#{k}"]))
        else:
            out.append((w, s))
    return out, max_disambig


def lexicon_words(lexicon: Lexicon) -> Iterable[str]:
    return lexicon.keys()
