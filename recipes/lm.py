"""Order-3 (and order-n) interpolated Kneser-Ney LM with relative-entropy pruning, written as ARPA; and a small
ARPA reader.

Why our own estimator: the real target (LibriSpeech `3-gram.pruned.3e-7.arpa`) is an SRILM/KenLM-style
Kneser-Ney model pruned by relative entropy. `kaldingram` (PyPI) would estimate one too but writes no `<unk>`
and is not installed on the GPU host, and the `bench` corpus (~20M tokens) needs a vectorised estimator
anyway, so this module implements the textbook estimator in numpy (runs anywhere numpy runs):

- Chen & Goodman (1998) interpolated Kneser-Ney, one absolute discount per order D_n = n1 / (n1 + 2 n2);
  the highest order uses raw counts, lower orders continuation counts N1+(. w) (n-grams starting with
  `<s>` keep raw counts, as SRILM/KenLM do, since nothing can precede `<s>`); unigrams are interpolated with
  the uniform distribution over words + `</s>` + `<unk>`, so every vocabulary word -- seen or not -- and
  `<unk>` get a non-zero probability.
- Stolcke (1998) relative-entropy pruning, in the usual single-n-gram approximation: the n-gram (h, w) is
  dropped when P(h) p(w|h) [ln p(w|h) - ln(bow(h) p(w|h'))] < threshold, with P(h) the model's own
  probability of the history (as SRILM does). Trigrams are pruned first; a bigram survives while it is the
  prefix (history) or suffix of a surviving trigram, so the ARPA stays well-formed for KenLM/arpa2fst.
- Back-off weights are recomputed after pruning from the explicit probabilities so that every history is
  normalised exactly: bow(h) = (1 - sum_explicit p(w|h)) / (1 - sum_explicit p_backoff(w|h')).
  (Without pruning this equals the interpolation weight gamma(h), which a test checks.)

`estimate_kneser_ney` is the order-3 estimator every workload's `lm_3gram.arpa` comes from;
`estimate_kneser_ney_order` is the same estimator for any order n >= 2 (the highest order raw counts, every lower
order continuation counts, pruning from the highest order down, each kept n-gram's history and suffix kept), for
the higher-order rescoring LMs (`recipes.workload.Workload.arpa_of_order`, e.g. `lm_4gram.arpa`); at order 3 it
gives the order-3 estimator's tables (a test checks). n-grams are packed base V + 3 into int64, so
(V + 3) ** n must stay below 2 ** 63 (order 4 up to ~55k words: the tiny and small workloads, not bench).

Word ids: 0..V-1 are the vocabulary words; V = `<s>`, V+1 = `</s>`, V+2 = `<unk>`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
_LOG10E = 1.0 / math.log(10.0)


@dataclass
class NgramTable:
    """Explicit n-grams of one order: keys (ids packed base N), natural-log probs, natural-log bows."""

    keys: np.ndarray  # int64 (M,), sorted
    logp: np.ndarray  # float64 (M,)
    logbow: np.ndarray  # float64 (M,) 0.0 where the n-gram is not a history
    is_history: np.ndarray  # bool (M,) whether a bow line is written


@dataclass
class ArpaStats:
    counts_before_pruning: list[int]
    counts: list[int]
    discounts: list[float]
    num_tokens: int
    num_sentences: int
    seconds: dict = field(default_factory=dict)


def _discount(counts: np.ndarray) -> float:
    n1 = int(np.count_nonzero(counts == 1))
    n2 = int(np.count_nonzero(counts == 2))
    if n1 == 0 or n2 == 0:
        return 0.5
    d = n1 / (n1 + 2.0 * n2)
    return float(min(max(d, 0.05), 0.95))


def _group_sums(group: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    return np.bincount(group, weights=values, minlength=size)


def _padded_sentences(sentence_ids: np.ndarray, offsets: np.ndarray, V: int) -> np.ndarray:
    """CSR sentences checked and flattened as `<s> w1 .. wn </s>` per sentence (`<s>` = V, `</s>` = V + 1)."""
    bos, eos = V, V + 1
    S = len(offsets) - 1
    lengths = np.diff(offsets)
    if S == 0 or lengths.min() < 1:
        raise ValueError("sentences must be non-empty and at least one sentence is required")
    if sentence_ids.size and (sentence_ids.min() < 0 or sentence_ids.max() >= V):
        raise ValueError(f"sentence_ids must lie in [0, {V})")
    L = lengths + 2
    seq = np.empty(int(L.sum()), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(L)[:-1]])
    seq[starts] = bos
    seq[starts + L - 1] = eos
    body = np.ones(seq.size, dtype=bool)
    body[starts] = False
    body[starts + L - 1] = False
    seq[body] = sentence_ids
    return seq


def estimate_kneser_ney(
    sentence_ids: np.ndarray,
    offsets: np.ndarray,
    vocab_size: int,
    prune_threshold: float = 0.0,
    progress: bool = False,
) -> tuple[list[NgramTable], ArpaStats]:
    """Estimate the order-3 KN LM from CSR sentences (`sentence_ids` (total,), `offsets` (S + 1,)).

    Returns the three `NgramTable`s (unigrams cover every id except `<s>`'s probability, which ARPA
    writes as -99) and statistics. `prune_threshold` 0 disables pruning.
    """
    import time

    from tqdm import tqdm

    t0 = time.perf_counter()
    V = int(vocab_size)
    N = V + 3
    bos, eos, unk = V, V + 1, V + 2
    seq = _padded_sentences(sentence_ids, offsets, V)  # <s> w1 .. wn </s> per sentence, flattened
    S = len(offsets) - 1
    bar = tqdm(total=6, desc="kneser-ney", disable=not progress, leave=False)
    # bigrams/trigrams must not cross sentence ends: drop those whose non-final element is </s>
    a, b = seq[:-1], seq[1:]
    ok2 = a != eos
    k2_raw = a[ok2] * N + b[ok2]
    a3, b3, c3 = seq[:-2], seq[1:-1], seq[2:]
    ok3 = (a3 != eos) & (b3 != eos)
    k3 = (a3[ok3] * N + b3[ok3]) * N + c3[ok3]
    del a3, b3, c3, a, b, ok2, ok3
    tri_keys, tri_counts = np.unique(k3, return_counts=True)
    del k3
    bar.update()
    big_keys, big_raw = np.unique(k2_raw, return_counts=True)
    del k2_raw
    # continuation counts for bigrams: distinct left contexts = number of trigram types with that suffix
    suf_keys, suf_counts = np.unique(tri_keys % (N * N), return_counts=True)
    big_cnt = big_raw.astype(np.float64).copy()
    pos = np.searchsorted(big_keys, suf_keys)
    big_first = big_keys // N
    if not np.all(big_keys[pos] == suf_keys):
        raise RuntimeError("internal: trigram suffix missing from bigrams")
    not_bos = big_first != bos
    cont = np.zeros_like(big_cnt)
    cont[pos] = suf_counts
    big_cnt[not_bos] = cont[not_bos]
    # unigram continuation counts: distinct bigram types ending in w
    uni_cnt = np.bincount(big_keys % N, minlength=N).astype(np.float64)
    uni_cnt[bos] = 0.0
    bar.update()

    # ---- unigrams: KN interpolated with uniform over words + </s> + <unk> ----
    D1 = _discount(uni_cnt[uni_cnt > 0])
    total1 = uni_cnt.sum()
    nz1 = np.count_nonzero(uni_cnt)
    n_pred = V + 2
    p1 = np.maximum(uni_cnt - D1, 0.0) / total1 + (D1 * nz1 / total1) / n_pred
    p1[bos] = 0.0
    # ---- bigrams ----
    D2 = _discount(big_cnt)
    hist2 = big_first
    sum2 = _group_sums(hist2, big_cnt, N)
    types2 = np.bincount(hist2, minlength=N).astype(np.float64)
    gamma1 = np.where(sum2 > 0, D2 * types2 / np.maximum(sum2, 1e-300), 1.0)  # per unigram history
    big_last = big_keys % N
    p2 = (big_cnt - D2) / sum2[hist2] + gamma1[hist2] * p1[big_last]
    bar.update()
    # ---- trigrams ----
    D3 = _discount(tri_counts)
    tri_hist = tri_keys // N  # bigram key (a, b)
    tri_last = tri_keys % N
    h_uniq, h_inv, h_types = np.unique(tri_hist, return_inverse=True, return_counts=True)
    h_sum = np.bincount(h_inv, weights=tri_counts.astype(np.float64))
    gamma2 = D3 * h_types / h_sum  # per trigram history
    suffix_pos = np.searchsorted(big_keys, tri_keys % (N * N))
    p3 = (tri_counts - D3) / h_sum[h_inv] + gamma2[h_inv] * p2[suffix_pos]
    hist_pos = np.searchsorted(big_keys, h_uniq)  # trigram histories as bigram indices
    if not np.all(big_keys[hist_pos] == h_uniq):
        raise RuntimeError("internal: trigram history missing from bigrams")
    bar.update()
    counts_before = [V + 3, len(big_keys), len(tri_keys)]

    # ---- pruning (Stolcke, single n-gram approximation) ----
    keep3 = np.ones(len(tri_keys), dtype=bool)
    keep2 = np.ones(len(big_keys), dtype=bool)
    if prune_threshold > 0:
        # P(history) by the model: P(a b) = p1(a) p2(b|a); P(<s> b) = p2(b|<s>) (sentence start is certain)
        p_hist_big = np.where(hist2 == bos, 1.0, p1[hist2]) * p2  # P(a, b) for each bigram
        ph3 = p_hist_big[hist_pos][h_inv]
        delta3 = ph3 * p3 * (np.log(p3) - np.log(gamma2[h_inv] * p2[suffix_pos]))
        keep3 = delta3 >= prune_threshold
        ph2 = np.where(hist2 == bos, 1.0, p1[hist2])
        delta2 = ph2 * p2 * (np.log(p2) - np.log(gamma1[hist2] * p1[big_last]))
        keep2 = delta2 >= prune_threshold
        # a bigram needed by a surviving trigram (as its history or its suffix) survives
        needed = np.zeros(len(big_keys), dtype=bool)
        needed[suffix_pos[keep3]] = True
        needed[hist_pos[h_inv[keep3]]] = True
        keep2 |= needed
    bar.update()

    # ---- back-off weights from the explicit (kept) probabilities ----
    # unigram histories
    kept2_hist = hist2[keep2]
    num1 = 1.0 - _group_sums(kept2_hist, p2[keep2], N)
    den1 = 1.0 - _group_sums(kept2_hist, p1[big_last[keep2]], N)
    has2 = np.bincount(kept2_hist, minlength=N) > 0
    bow1 = np.ones(N)
    bow1[has2] = num1[has2] / den1[has2]
    # bigram histories: the lower model is the pruned bigram model (suffixes of kept trigrams are kept)
    tri_hist_idx = hist_pos[h_inv]  # bigram index of each trigram's history
    M2 = len(big_keys)
    num2 = 1.0 - _group_sums(tri_hist_idx[keep3], p3[keep3], M2)
    den2 = 1.0 - _group_sums(tri_hist_idx[keep3], p2[suffix_pos[keep3]], M2)
    has3 = np.bincount(tri_hist_idx[keep3], minlength=M2) > 0
    bow2 = np.ones(M2)
    bow2[has3] = num2[has3] / den2[has3]
    if np.any(bow1 <= 0) or np.any(bow2 <= 0):
        raise RuntimeError("internal: non-positive back-off weight")
    bar.update()
    bar.close()

    uni_keys = np.arange(N, dtype=np.int64)
    with np.errstate(divide="ignore"):
        uni_logp = np.log(p1)
    tables = [
        NgramTable(uni_keys, uni_logp, np.log(bow1), has2),
        NgramTable(big_keys[keep2], np.log(p2[keep2]), np.log(bow2[keep2]), has3[keep2]),
        NgramTable(tri_keys[keep3], np.log(p3[keep3]), np.zeros(int(keep3.sum())), np.zeros(int(keep3.sum()), bool)),
    ]
    stats = ArpaStats(
        counts_before_pruning=counts_before,
        counts=[N, int(keep2.sum()), int(keep3.sum())],
        discounts=[D1, D2, D3],
        num_tokens=int(sentence_ids.size),
        num_sentences=int(S),
        seconds={"estimate": time.perf_counter() - t0},
    )
    return tables, stats


def estimate_kneser_ney_order(
    sentence_ids: np.ndarray,
    offsets: np.ndarray,
    vocab_size: int,
    order: int,
    prune_threshold: float = 0.0,
    progress: bool = False,
) -> tuple[list[NgramTable], ArpaStats]:
    """`estimate_kneser_ney` for any order >= 2: the `order` NgramTables (unigrams .. order-grams) and statistics.

    Same estimator: one discount per order; the highest order uses raw counts, lower orders continuation counts
    (n-grams starting with `<s>` raw counts); unigrams interpolated with the uniform distribution over words +
    `</s>` + `<unk>`. Pruning (Stolcke, single n-gram approximation, P(h) the model's own probability of the
    history) goes from the highest order down; an n-gram survives while it is the history or the suffix of a
    surviving (n+1)-gram. Back-off weights are recomputed from the kept probabilities (exact normalisation)."""
    import time

    from tqdm import tqdm

    t0 = time.perf_counter()
    order = int(order)
    if order < 2:
        raise ValueError(f"order must be >= 2, got {order}")
    V = int(vocab_size)
    N = V + 3
    if N ** order >= 2 ** 63:
        raise ValueError(f"order {order} over {V} words does not fit int64 n-gram keys ((V+3)^order >= 2^63)")
    bos, eos = V, V + 1
    seq = _padded_sentences(sentence_ids, offsets, V)
    S = len(offsets) - 1
    bar = tqdm(total=4, desc=f"kneser-ney order {order}", disable=not progress, leave=False)
    # k-gram types (k >= 2) and raw counts: windows whose non-final elements are not </s> (no crossing of ends)
    keys: list = [None, np.arange(N, dtype=np.int64)]
    raw: list = [None, None]
    win, ok = seq.copy(), np.ones(seq.size, dtype=bool)
    for k in range(2, order + 1):
        ok = ok[:-1] & (seq[k - 2 : -1] != eos)
        win = win[:-1] * N + seq[k - 1 :]
        kk, cc = np.unique(win[ok], return_counts=True)
        keys.append(kk)
        raw.append(cc.astype(np.float64))
    del win, ok
    bar.update()
    # the counts each order is estimated from
    cnt: list = [None] * (order + 1)
    cnt[order] = raw[order]
    for k in range(order - 1, 1, -1):
        suf, nsuf = np.unique(keys[k + 1] % N ** k, return_counts=True)
        pos = np.searchsorted(keys[k], suf)
        if not np.all(keys[k][pos] == suf):
            raise RuntimeError(f"internal: {k + 1}-gram suffix missing from the {k}-grams")
        c = np.zeros(len(keys[k]))
        c[pos] = nsuf
        first = keys[k] // N ** (k - 1)
        cnt[k] = np.where(first == bos, raw[k], c)
    uni = np.bincount(keys[2] % N, minlength=N).astype(np.float64)
    uni[bos] = 0.0
    cnt[1] = uni
    # ---- probabilities: unigrams, then each order interpolated with the one below ----
    D1 = _discount(uni[uni > 0])
    total1, nz1 = uni.sum(), np.count_nonzero(uni)
    p: list = [None] * (order + 1)
    p[1] = np.maximum(uni - D1, 0.0) / total1 + (D1 * nz1 / total1) / (V + 2)
    p[1][bos] = 0.0
    discounts = [D1]
    gamma: list = [None] * (order + 1)  # gamma[k]: per (k)-gram, its weight as a history of (k+1)-grams
    hist_idx: list = [None] * (order + 1)  # hist_idx[k]: per k-gram, the index of its history among (k-1)-grams
    suf_idx: list = [None] * (order + 1)  # suf_idx[k]: per k-gram, the index of its suffix among (k-1)-grams
    for k in range(2, order + 1):
        Dk = _discount(cnt[k])
        discounts.append(Dk)
        h = keys[k] // N
        h_uniq, h_inv, h_types = np.unique(h, return_inverse=True, return_counts=True)
        h_sum = np.bincount(h_inv, weights=cnt[k])
        hpos = np.searchsorted(keys[k - 1], h_uniq)
        if not np.all(keys[k - 1][hpos] == h_uniq):
            raise RuntimeError(f"internal: {k}-gram history missing from the {k - 1}-grams")
        g = np.ones(len(keys[k - 1]))
        g[hpos] = Dk * h_types / h_sum
        gamma[k - 1] = g
        hist_idx[k] = hpos[h_inv]
        suf = keys[k] % N ** (k - 1)
        spos = np.searchsorted(keys[k - 1], suf)
        if not np.all(keys[k - 1][spos] == suf):
            raise RuntimeError(f"internal: {k}-gram suffix missing from the {k - 1}-grams")
        suf_idx[k] = spos
        p[k] = (cnt[k] - Dk) / h_sum[h_inv] + g[hist_idx[k]] * p[k - 1][spos]
    bar.update()
    counts_before = [N] + [len(keys[k]) for k in range(2, order + 1)]

    # ---- pruning, highest order first ----
    keep: list = [None, np.ones(N, dtype=bool)] + [np.ones(len(keys[k]), dtype=bool) for k in range(2, order + 1)]
    if prune_threshold > 0:
        pseq = [None, np.where(np.arange(N) == bos, 1.0, p[1])]  # P(k-gram as a sequence); sentence start certain
        for k in range(2, order):
            pseq.append(pseq[k - 1][hist_idx[k]] * p[k])
        for k in range(order, 1, -1):
            hi, si = hist_idx[k], suf_idx[k]
            delta = pseq[k - 1][hi] * p[k] * (np.log(p[k]) - np.log(gamma[k - 1][hi] * p[k - 1][si]))
            keep[k] = delta >= prune_threshold
            if k < order:  # the history and the suffix of every kept (k+1)-gram stay
                keep[k][hist_idx[k + 1][keep[k + 1]]] = True
                keep[k][suf_idx[k + 1][keep[k + 1]]] = True
    bar.update()

    # ---- back-off weights from the kept probabilities ----
    tables: list[NgramTable] = []
    bows: list = [None] * order
    has: list = [None] * order
    for j in range(1, order):
        kept = keep[j + 1]
        hi, si = hist_idx[j + 1][kept], suf_idx[j + 1][kept]
        M = len(keys[j])
        num = 1.0 - _group_sums(hi, p[j + 1][kept], M)
        den = 1.0 - _group_sums(hi, p[j][si], M)
        hj = np.bincount(hi, minlength=M) > 0
        b = np.ones(M)
        b[hj] = num[hj] / den[hj]
        if np.any(b <= 0):
            raise RuntimeError("internal: non-positive back-off weight")
        bows[j], has[j] = b, hj
    with np.errstate(divide="ignore"):
        tables.append(NgramTable(keys[1], np.log(p[1]), np.log(bows[1]), has[1]))
    for k in range(2, order + 1):
        kk = keep[k]
        if k < order:
            tables.append(NgramTable(keys[k][kk], np.log(p[k][kk]), np.log(bows[k][kk]), has[k][kk]))
        else:
            tables.append(NgramTable(keys[k][kk], np.log(p[k][kk]), np.zeros(int(kk.sum())),
                                     np.zeros(int(kk.sum()), bool)))
    bar.update()
    bar.close()
    stats = ArpaStats(
        counts_before_pruning=counts_before,
        counts=[N] + [int(keep[k].sum()) for k in range(2, order + 1)],
        discounts=discounts,
        num_tokens=int(sentence_ids.size),
        num_sentences=int(S),
        seconds={"estimate": time.perf_counter() - t0},
    )
    return tables, stats


def write_arpa(path: str | Path, tables: list[NgramTable], words: Sequence[str], progress: bool = False) -> None:
    """Write the tables as ARPA (log10 probabilities, 6 decimals). `<s>` gets probability -99."""
    from tqdm import tqdm

    V = len(words)
    N = V + 3
    sym = np.array(list(words) + [BOS, EOS, UNK], dtype=object)
    uni = tables[0]
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n\\data\\\n")
        for n, t in enumerate(tables, start=1):
            f.write(f"ngram {n}={len(t.keys)}\n")

        def fmt(x: np.ndarray) -> list[str]:
            return [f"{v:.6f}" for v in (x * _LOG10E).tolist()]

        def section(n: int, names: np.ndarray, t: NgramTable) -> None:
            f.write(f"\n\\{n}-grams:\n")
            chunk = 500_000
            for s in tqdm(range(0, len(names), chunk), desc=f"arpa {n}-grams", disable=not progress, leave=False):
                e = min(s + chunk, len(names))
                lp = fmt(t.logp[s:e])
                hist = t.is_history[s:e].tolist()
                bw = fmt(t.logbow[s:e])
                nm = names[s:e].tolist()
                lines = [
                    f"{p}\t{w}\t{b}\n" if h else f"{p}\t{w}\n" for p, w, b, h in zip(lp, nm, bw, hist)
                ]
                f.write("".join(lines))

        ulp = uni.logp.copy()
        ulp[V] = -99.0 / _LOG10E  # <s>
        section(1, sym[uni.keys], NgramTable(uni.keys, ulp, uni.logbow, uni.is_history))
        for n, t in enumerate(tables[1:], start=2):
            k = t.keys
            names = sym[(k // N ** (n - 1)) % N]
            for i in range(1, n):
                names = names + " " + sym[(k // N ** (n - 1 - i)) % N]
            section(n, names, t)
        f.write("\n\\end\\\n")


# ---------------------------------------------------------------- a small ARPA reader (tests, sanity checks)
class ArpaModel:
    """Plain-Python ARPA reader with standard back-off scoring (log10). Meant for tiny models and tests."""

    def __init__(self, path: str | Path):
        self.order = 0
        self.probs: dict[tuple[str, ...], float] = {}
        self.bows: dict[tuple[str, ...], float] = {}
        self.counts: dict[int, int] = {}
        section = 0
        with open(path, encoding="utf-8") as f:
            for raw in f:
                line = raw.strip()
                if not line:
                    continue
                if line.startswith("ngram ") and section == 0:
                    n, c = line[6:].split("=")
                    self.counts[int(n)] = int(c)
                    continue
                if line.startswith("\\") and line.endswith("-grams:"):
                    section = int(line[1:].split("-")[0])
                    self.order = max(self.order, section)
                    continue
                if line in ("\\data\\", "\\end\\") or section == 0:
                    continue
                parts = line.split("\t")
                if len(parts) == 1:
                    parts = line.split()
                    ng = tuple(parts[1 : 1 + section])
                    rest = parts[1 + section :]
                else:
                    ng = tuple(parts[1].split())
                    rest = parts[2:]
                if len(ng) != section:
                    raise ValueError(f"{path}: malformed {section}-gram line {line!r}")
                self.probs[ng] = float(parts[0])
                if rest:
                    self.bows[ng] = float(rest[0])
        self.vocab = [ng[0] for ng in self.probs if len(ng) == 1]

    def log10_prob(self, word: str, history: Sequence[str]) -> float:
        """log10 p(word | history) with back-off (history truncated to order - 1)."""
        history = tuple(history)[-(self.order - 1) :] if self.order > 1 else ()
        if word not in self.vocab_set:
            word = UNK
        bow = 0.0
        while True:
            ng = history + (word,)
            if ng in self.probs:
                return bow + self.probs[ng]
            if not history:
                raise KeyError(word)
            bow += self.bows.get(history, 0.0)
            history = history[1:]

    @property
    def vocab_set(self) -> set:
        if not hasattr(self, "_vs"):
            self._vs = set(self.vocab)
        return self._vs

    def sentence_log10_prob(self, words: Iterable[str]) -> float:
        hist: list[str] = [BOS]
        total = 0.0
        for w in list(words) + [EOS]:
            total += self.log10_prob(w, hist)
            hist.append(w)
        return total

    def predicted_vocab(self) -> list[str]:
        """Everything p(.|h) sums over: all unigrams except `<s>`."""
        return [w for w in self.vocab if w != BOS]

    def history_mass(self, history: Sequence[str]) -> float:
        """sum_w p(w | history); 1 for a normalised model."""
        return float(sum(10.0 ** self.log10_prob(w, history) for w in self.predicted_vocab()))


def build_arpa(
    sentence_ids: np.ndarray,
    offsets: np.ndarray,
    words: Sequence[str],
    out_path: str | Path,
    prune_threshold: float = 0.0,
    progress: bool = False,
    order: int = 3,
) -> ArpaStats:
    """Estimate + prune + write. Returns statistics (n-gram counts per order before/after pruning). Order 3 is
    `estimate_kneser_ney` (the workloads' bytes), any other order `estimate_kneser_ney_order`."""
    import time

    if int(order) == 3:
        tables, stats = estimate_kneser_ney(sentence_ids, offsets, len(words), prune_threshold, progress)
    else:
        tables, stats = estimate_kneser_ney_order(sentence_ids, offsets, len(words), order, prune_threshold, progress)
    t0 = time.perf_counter()
    write_arpa(out_path, tables, words, progress)
    stats.seconds["write"] = time.perf_counter() - t0
    return stats
