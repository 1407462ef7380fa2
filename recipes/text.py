"""Synthetic language for the embedded workload: a Zipfian, pronounceable word vocabulary and a sentence
generator with real n-gram structure.

Why synthetic: LibriSpeech, its 3-gram LM and NeMo checkpoints cannot be downloaded here, but decoders only
care about the *shape* of the data: a large Zipfian vocabulary, short frequent words and long rare ones,
n-gram statistics an LM can learn (so that LM fusion actually fixes acoustic errors), sentence lengths like
LibriSpeech's. Nothing here pretends to be English.

The generating process (vectorised over sentences with numpy, so the `bench` corpus of ~20M tokens takes
seconds):
- every word belongs to one of K latent classes ("syntax"); the class sequence is a sparse first-order
  Markov chain; within a class, words are emitted proportionally to their global Zipf weight;
- with probability `collocation_prob`, the next word is instead one of the previous word's few preferred
  successors ("collocations"), which creates frequent bigrams and, by chaining, frequent trigrams.
Sentence lengths (in words) are log-normal, clipped, mean ~ 18 words (LibriSpeech test sentences ~ 20).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Spelling inventory: onsets, vowel nuclei and codas of English-looking syllables. Only a-z and "'" occur.
_ONSETS = (
    "b c d f g h j k l m n p r s t v w y z bl br ch cl cr dr fl fr gl gr pl pr sh sl sm sn sp st str th tr "
    "wh qu sc sk sw"
).split()
_ONSET_W = np.array([5 if len(o) == 1 else 1 for o in _ONSETS], dtype=np.float64)
_NUCLEI = "a e i o u a e i o u a e i o a e a e i o ai ea ee oo ou y".split()
_CODAS = "- - - - - - - - - - n r s t l m d n r s t nd st ng ck th rk nt ll ss rt".split()  # "-" = open syllable


def make_vocabulary(num_words: int, seed: int) -> list[str]:
    """`num_words` distinct pronounceable words, in Zipf rank order (index 0 = most frequent).

    Frequent words are short (1 syllable), rare ones longer (up to 4), as in natural languages; ~2 % of the
    rarer words carry a possessive "'s" so that the apostrophe token is exercised. Syllables are drawn in
    vectorised batches (200k words in ~1 s); duplicates are skipped, so rank order stays deterministic.
    """
    if num_words < 1:
        raise ValueError(f"num_words must be >= 1, got {num_words}")
    rng = np.random.default_rng([seed, 1])
    onsets = np.array([""] + _ONSETS, dtype=object)
    onset_p = np.concatenate([[0.0], _ONSET_W / _ONSET_W.sum()])
    nuclei = np.array(_NUCLEI, dtype=object)
    codas = np.array(["" if c == "-" else c for c in _CODAS], dtype=object)
    words: list[str] = []
    seen: set[str] = set()
    rank0 = 0
    max_syll = 4
    while len(words) < num_words:
        n = max(1024, int(1.1 * (num_words - len(words))))
        ranks = rank0 + np.arange(n)
        rank0 += n
        # mean syllable count grows with log rank: 1 for the top ~20 words, ~2 in the 100k tail
        mean_syll = 1.0 + 0.12 * np.maximum(0.0, np.log(ranks + 1.0) - 3.0)
        n_syll = np.clip(1 + rng.poisson(mean_syll - 1.0), 1, max_syll)
        on = onsets[rng.choice(len(onsets), size=(n, max_syll), p=onset_p)]
        vowel_initial = rng.random(n) < 0.25
        on[vowel_initial, 0] = ""
        syl = on + nuclei[rng.integers(len(nuclei), size=(n, max_syll))] + codas[rng.integers(len(codas), size=(n, max_syll))]
        possessive = (ranks > 200) & (rng.random(n) < 0.02)
        for i in range(n):
            word = "".join(syl[i, : n_syll[i]]) + ("'s" if possessive[i] else "")
            if word in seen:
                continue
            seen.add(word)
            words.append(word)
            if len(words) == num_words:
                break
    return words


def zipf_weights(num_words: int, exponent: float = 1.0, shift: float = 2.7) -> np.ndarray:
    """Zipf-Mandelbrot weights p(r) ~ 1 / (r + shift)^exponent, r = 1..num_words, normalised."""
    r = np.arange(1, num_words + 1, dtype=np.float64)
    w = 1.0 / (r + shift) ** exponent
    return w / w.sum()


@dataclass
class GeneratorParams:
    num_classes: int
    # Zipf-Mandelbrot exponent: 1.1 makes the 1000 most frequent words cover ~70 % of running text, as in
    # English (1.0 gives ~58 % with 200k words, and far too many BPE tokens per word)
    zipf_exponent: float = 1.1
    collocation_prob: float = 0.35
    num_collocations: int = 6
    class_concentration: float = 0.08  # Dirichlet alpha of class transitions (small = sparse syntax)
    mean_words: float = 18.0
    min_words: int = 2
    max_words: int = 60


class SentenceGenerator:
    """The latent-class + collocation process described in the module docstring. Deterministic per seed."""

    def __init__(self, num_words: int, params: GeneratorParams, seed: int):
        rng = np.random.default_rng([seed, 2])
        V, K = num_words, params.num_classes
        if V < K:
            raise ValueError(f"num_words ({V}) must be >= num_classes ({K})")
        self.num_words, self.params = V, params
        self.unigram = zipf_weights(V, params.zipf_exponent)
        # class of each word; the 40 most frequent words ("function words") spread over all classes
        self.word_class = rng.integers(0, K, size=V)
        self.word_class[: min(V, K)] = np.arange(min(V, K))
        # per-class emission CDFs, concatenated so that row c spans (c, c+1] (see _sample_rows)
        order = np.argsort(self.word_class, kind="stable")
        self._class_words = order  # words sorted by class
        cls_sorted = self.word_class[order]
        w = self.unigram[order]
        cls_mass = np.bincount(cls_sorted, weights=w, minlength=K)
        cls_mass[cls_mass == 0] = 1.0
        within = w / cls_mass[cls_sorted]
        # cumulative within class, offset by class index
        cum = np.cumsum(within)
        starts = np.searchsorted(cls_sorted, np.arange(K))
        base = np.concatenate([[0.0], cum])[starts]  # cumulative mass before each class
        self._emit_cdf = cum - base[cls_sorted] + cls_sorted
        self._emit_cdf[np.r_[starts[1:] - 1, len(cum) - 1]] = np.arange(1, K + 1)  # exact row ends
        # class transitions (sparse Dirichlet) and the start distribution
        trans = rng.dirichlet(np.full(K, params.class_concentration), size=K)
        start = rng.dirichlet(np.full(K, 0.3))
        self._trans_cdf = (np.cumsum(trans, axis=1) + np.arange(K)[:, None]).ravel()
        self._trans_cdf[K - 1 :: K] = np.arange(1, K + 1)
        self._start_cdf = np.cumsum(start)
        self._start_cdf[-1] = 1.0
        # collocations: each word's preferred successors, drawn from the global Zipf law
        C = params.num_collocations
        self.collocations = rng.choice(V, size=(V, C), p=self.unigram)
        cw = 0.55 ** np.arange(C)
        self._colloc_cdf = np.cumsum(cw / cw.sum())
        self._colloc_cdf[-1] = 1.0

    def _emit(self, cls: np.ndarray, u: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(self._emit_cdf, cls + u, side="right")
        return self._class_words[np.minimum(idx, self.num_words - 1)]

    def sample_lengths(self, num_sentences: int, rng: np.random.Generator) -> np.ndarray:
        p = self.params
        sigma = 0.55
        mu = np.log(p.mean_words) - sigma**2 / 2
        n = np.round(rng.lognormal(mu, sigma, size=num_sentences)).astype(np.int64)
        return np.clip(n, p.min_words, p.max_words)

    def sample(self, num_sentences: int, seed: int, stream: int) -> tuple[np.ndarray, np.ndarray]:
        """Sample sentences. Returns (word_ids (total,), offsets (num_sentences + 1,)) -- CSR layout.

        `stream` separates independent uses (LM corpus, test sets) of the same generator seed.
        """
        rng = np.random.default_rng([seed, 3, stream])
        lengths = self.sample_lengths(num_sentences, rng)
        max_len = int(lengths.max()) if num_sentences else 0
        out = np.zeros((num_sentences, max_len), dtype=np.int32)
        K = self.params.num_classes
        prev = np.zeros(num_sentences, dtype=np.int64)
        cls = np.zeros(num_sentences, dtype=np.int64)
        for pos in range(max_len):
            active = np.nonzero(lengths > pos)[0]
            n = len(active)
            if pos == 0:
                c = np.searchsorted(self._start_cdf, rng.random(n))
                c = np.minimum(c, K - 1)
                w = self._emit(c, rng.random(n))
            else:
                pc = cls[active]
                c = np.searchsorted(self._trans_cdf, pc + rng.random(n), side="right") - pc * K
                c = np.clip(c, 0, K - 1)
                w = self._emit(c, rng.random(n))
                use_col = rng.random(n) < self.params.collocation_prob
                k = np.searchsorted(self._colloc_cdf, rng.random(n))
                wc = self.collocations[prev[active], np.minimum(k, self.params.num_collocations - 1)]
                w = np.where(use_col, wc, w)
            prev[active] = w
            cls[active] = self.word_class[w]
            out[active, pos] = w
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        mask = np.arange(max_len)[None, :] < lengths[:, None]
        return out[mask].astype(np.int32), offsets.astype(np.int64)


def sentences_to_text(words: list[str], ids: np.ndarray, offsets: np.ndarray) -> list[str]:
    """CSR word ids -> one text line per sentence."""
    arr = np.asarray(words, dtype=object)
    toks = arr[ids]
    return [" ".join(toks[offsets[i] : offsets[i + 1]]) for i in range(len(offsets) - 1)]
