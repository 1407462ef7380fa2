"""A toy lexicon/LM for tests and examples: prefix words and homophone-free spellings over {a, b, n}.
Log-probabilities are irregular on purpose, so that different word sequences never tie exactly.

"a" is a prefix of "ab" (needs #1), "ba" a prefix of "bab"; the bigram list is sparse on purpose, so
that some sentences start and end with LM back-off arcs (e.g. "<s> nab" and "nab </s>" back off).
"""
from __future__ import annotations

from pathlib import Path

from recipes.tokens import TokenSet

TOY_WORDS = ["a", "ab", "ba", "bab", "nab"]
TOY_ARPA = """\\data\\
ngram 1=7
ngram 2=4

\\1-grams:
-1.0317 </s>
-99 <s> -0.5113
-0.7291 a -0.3079
-0.8413 ab -0.2237
-0.9127 ba -0.1351
-1.1173 bab -0.2671
-1.2239 nab -0.4027

\\2-grams:
-0.2113 <s> a
-0.3371 a ab
-0.4061 ab </s>
-0.2519 ba bab

\\end\\
"""


def toy_tokens(blank: str = "last") -> TokenSet:
    return TokenSet.from_chars(["a", "b", "n"], blank=blank)


def write_toy_arpa(path: str | Path) -> Path:
    Path(path).write_text(TOY_ARPA, encoding="utf-8")
    return Path(path)
