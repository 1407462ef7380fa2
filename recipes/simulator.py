"""CTC posterior simulator: reference text -> (T, V) log-posteriors shaped like a Conformer-CTC's at 40 ms.

What a real CTC model's output looks like, and what we imitate (each point is a knob in `SimulatorConfig`):
- Most frames are blank with P(blank) > 0.98; at 40 ms frames and ~2.5-3 words/s a BPE model emits 3-8
  tokens/s (BPE-1024 on `bench`: ~72 % of frames have P(blank) > 0.98; BPE-128 on `tiny`: ~63 %). Char models
  emit ~16 tokens/s, so far more frames are non-blank (~35 % have P(blank) > 0.98; documented, expected).
- Tokens appear as single-frame spikes (sometimes two frames, which CTC collapses), with a few "shoulder"
  frames around them carrying a little of the token's mass; blank frames keep a small mass ("leak") on the
  neighbouring spikes' tokens and on the tokens similar to them.
- The non-top mass of a spike goes to *similar* tokens (same letters / same sound class) and to blank.
- Errors are per word: with probability `word_error_rate` a word is wrong. Most erroneous words
  (`real_word_share`, when the config knows the vocabulary) are word-level errors of the kind a real model
  makes and a lexicon cannot repair: another vocabulary word of similar spelling (edit distance <= 2, frequent
  words likelier), a swallowed word, an inserted frequent short word. The reference keeps a log-uniform
  "evidence" mass in [evidence_min, evidence_max] next to the confident wrong spikes, so an LM restores it
  only when the acoustics leave room. The rest are token-level errors: a token substituted by a similar token
  (the correct one stays runner-up), deleted (it survives as a sub-blank bump) or followed by an inserted
  similar token -- mostly non-words, which lexicon-constrained search repairs. `ambiguity_rate` adds correct
  spikes with a close competitor (an LM may get these wrong). Because errors are drawn per *word*, the
  greedy WER is close to `word_error_rate` whatever the token set.
- Everything is deterministic from (cfg.seed, utterance key), independent of the order of calls, and
  independent of the blank position: blank-first output is exactly the column permutation of blank-last.

Greedy WER bands produced by the presets (tested on `tiny`; measured on `bench` too):
  clean: word_error_rate 0.04 -> greedy WER ~ 3-6 %;   other: word_error_rate 0.11 -> greedy WER ~ 8-15 %.
LM fusion helps about as much as on real data: Flashlight lexicon beam search (beam 32, lm_weight 0.3,
word_score 1) + the workload's 3-gram cut the BPE greedy WER by ~7-12 % relative (tiny: clean 4.4 -> 4.1 %,
other 12.7 -> 11.3 %; bench, first 100 utterances: clean 3.5 -> 3.2 %, other 10.6 -> 9.7 %), as an n-gram LM does for a strong
Conformer-CTC. (With token-level errors only, lexicon + LM removed ~95 % of the errors: too easy, hence the
word-level confusions.)
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional

import numpy as np

from recipes.tokens import BLANK_SYMBOL, WORD_START, TokenSet

# letters that sound/look alike; a char's confusions come mostly from its group
_CHAR_GROUPS = ["aeiouy", "bp", "dt", "ckgq", "fvw", "sz", "mn", "lr", "jh", "x", "'"]


@dataclass
class SimulatorConfig:
    """Difficulty knobs of the posterior simulator. Presets: `SimulatorConfig.preset("clean"|"other")`."""

    word_error_rate: float = 0.04  # P(a word gets one token-level error)
    substitution_share: float = 0.6  # of the erroneous words: substitution / deletion / insertion shares
    deletion_share: float = 0.2
    insertion_share: float = 0.2
    ambiguity_rate: float = 0.03  # P(a correct spike has a close competitor)
    peak_error_median: float = 0.04  # median of (1 - P(top token)) on a correct spike: peak sharpness
    peak_error_spread: float = 0.8  # log-normal sigma of the above
    blank_leak_median: float = 2e-4  # median non-blank mass on a blank frame (relative to blank)
    shoulder_prob: float = 0.2  # P(a spike has a shoulder frame before/after it)
    double_spike_prob: float = 0.05  # P(a spike spans two frames)
    floor_logp: float = -16.0  # log mass of unrelated tokens, relative to the frame's top
    floor_spread: float = 1.5
    num_competitors: int = 3
    # word-level confusions: with a vocabulary (words.txt, rank-ordered), this share of the erroneous words
    # become another *real* word of similar spelling / a dropped word / an inserted frequent short word,
    # which a lexicon cannot fix and an LM fixes only when the acoustic evidence allows; the rest are
    # token-level (mostly non-words, which lexicon-constrained search repairs)
    words_path: Optional[str] = None
    real_word_share: float = 0.9
    # mass of the reference token on a word-level error frame, relative to the top: log-uniform in
    # [evidence_min, evidence_max]; small = unrecoverable, large = an LM can restore the reference
    evidence_min: float = 1e-5
    evidence_max: float = 0.2
    frame_shift_s: float = 0.04
    seed: int = 0

    def __post_init__(self):
        for name in ("word_error_rate", "substitution_share", "deletion_share", "insertion_share", "ambiguity_rate",
                     "shoulder_prob", "double_spike_prob", "real_word_share"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"SimulatorConfig.{name} must be in [0, 1], got {v}")
        if not 0.0 < self.peak_error_median < 1.0:
            raise ValueError(f"SimulatorConfig.peak_error_median must be in (0, 1), got {self.peak_error_median}")
        if not 0.0 < self.evidence_min <= self.evidence_max < 1.0:
            raise ValueError(
                f"SimulatorConfig needs 0 < evidence_min <= evidence_max < 1, got {self.evidence_min}, {self.evidence_max}"
            )
        if self.frame_shift_s <= 0:
            raise ValueError(f"SimulatorConfig.frame_shift_s must be > 0, got {self.frame_shift_s}")

    @classmethod
    def preset(cls, name: str, seed: int = 0, words_path: Optional[str] = None) -> "SimulatorConfig":
        """"clean" ~ LibriSpeech test-clean for a good Conformer-CTC; "other" noisier and less confident."""
        words_path = None if words_path is None else str(words_path)
        if name == "clean":
            return cls(seed=seed, words_path=words_path)
        if name == "other":
            return cls(
                words_path=words_path,
                word_error_rate=0.11,
                ambiguity_rate=0.08,
                peak_error_median=0.10,
                blank_leak_median=6e-4,
                shoulder_prob=0.3,
                floor_logp=-14.0,
                seed=seed,
            )
        raise ValueError(f"unknown simulator preset {name!r}; valid choices: ['clean', 'other']")

    def with_seed(self, seed: int) -> "SimulatorConfig":
        return replace(self, seed=seed)


def num_frames(duration_s: float, cfg: SimulatorConfig) -> int:
    """Output frames of a CTC model for `duration_s` seconds of audio at `cfg.frame_shift_s` per frame."""
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    return max(1, int(math.ceil(round(duration_s / cfg.frame_shift_s, 6))))


def required_frames(columns: list[int]) -> int:
    """Minimum CTC frames for a label sequence: one per label plus a blank between repeated labels."""
    return len(columns) + sum(1 for a, b in zip(columns, columns[1:]) if a == b)


def _stable_seed(*parts) -> list[int]:
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return [int.from_bytes(h[i : i + 4], "little") for i in range(0, 16, 4)]


# ------------------------------------------------------------------------------------ token similarity
def _char_features(ch: str) -> np.ndarray:
    alphabet = "abcdefghijklmnopqrstuvwxyz'"
    f = np.zeros(len(alphabet) + len(_CHAR_GROUPS))
    if ch in alphabet:
        f[alphabet.index(ch)] = 1.0
        for g, grp in enumerate(_CHAR_GROUPS):
            if ch in grp:
                f[len(alphabet) + g] = 0.8
    return f


@lru_cache(maxsize=16)
def _similarity_cached(tokens_key: tuple, blank_id: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    tokens = list(tokens_key)
    V = len(tokens)
    feats = np.zeros((V, 27 + len(_CHAR_GROUPS)))
    starts = np.zeros(V, dtype=bool)
    lens = np.zeros(V)
    invalid = np.zeros(V, dtype=bool)
    for i, t in enumerate(tokens):
        if i == blank_id or t in (BLANK_SYMBOL, "<unk>", "<s>", "</s>", "<pad>") or (t.startswith("<") and t.endswith(">")):
            invalid[i] = True
            continue
        s = t
        if s.startswith(WORD_START):
            starts[i] = True
            s = s[len(WORD_START):]
        lens[i] = len(s)
        for j, ch in enumerate(s):
            feats[i] += _char_features(ch) * (2.0 if j == 0 else 1.0)
    norm = np.linalg.norm(feats, axis=1)
    norm[norm == 0] = 1.0
    fn = feats / norm[:, None]
    sim = fn @ fn.T  # (V, V) cosine of letter/sound-class bags
    sim -= 0.08 * np.abs(lens[:, None] - lens[None, :])
    sim -= 0.5 * (starts[:, None] != starts[None, :])
    sim[:, invalid] = -np.inf
    np.fill_diagonal(sim, -np.inf)
    kk = min(k, max(1, V - int(invalid.sum()) - 1))
    order = np.argsort(-sim, axis=1, kind="stable")[:, :kk]
    top = np.take_along_axis(sim, order, axis=1)
    w = np.exp((top - top[:, :1]) / 0.15)
    w[~np.isfinite(w)] = 0.0
    w /= np.maximum(w.sum(axis=1, keepdims=True), 1e-12)
    return order.astype(np.int64), w


def similar_tokens(tokens: TokenSet, k: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """For every column, its k most similar columns and sampling weights: ((V, k) int64, (V, k) float).

    Similarity = cosine of letter + sound-class bags (first letter counts double), minus a length penalty,
    minus a penalty when only one of the two starts a word; blank and special tokens are never similar.
    """
    return _similarity_cached(tuple(tokens.tokens), tokens.blank_id, k)


# ------------------------------------------------------------------------------------ simulation
@dataclass
class _Event:
    top: int  # column with the highest posterior (blank for a deletion bump)
    ref: int  # reference column this frame carries evidence for (-1: none, e.g. an insertion)
    kind: str  # "tok" | "sub" | "del" | "ins" | "amb"
    word_end: bool = False
    evidence: float = 0.0  # sub/del: posterior of `ref` relative to the top (sub) or to blank (del)


_MAX_CONFUSION_TARGETS = 30_000


class _Vocabulary:
    """Rank-ordered word list + a symmetric-deletion index: words within edit distance ~2 of a word."""

    def __init__(self, words_path: str):
        with open(words_path, encoding="utf-8") as f:
            self.words = [line.split()[0] for line in f if line.strip()]
        self.rank = {w: i for i, w in enumerate(self.words)}
        # confusion targets: the most frequent words only (a model's wrong guesses are mostly common words;
        # and indexing 200k words would cost seconds at the first simulated utterance)
        self.index: dict[str, list[int]] = {}
        self.by_prefix: dict[str, list[int]] = {}
        for i, w in enumerate(self.words[:_MAX_CONFUSION_TARGETS]):
            for v in {w[:j] + w[j + 1 :] for j in range(len(w))} | {w}:
                self.index.setdefault(v, []).append(i)
            self.by_prefix.setdefault(w[:2], []).append(i)
        self.short_frequent = [w for w in self.words[:200] if len(w) <= 3][:40] or self.words[:10]
        self._cache: dict[str, list[int]] = {}

    def confusable(self, word: str) -> list[int]:
        """Ids of vocabulary words of similar spelling (sharing a one-letter deletion; failing that, the first
        two letters and about the length), rank order."""
        if word not in self._cache:
            ids: set[int] = set()
            for v in {word[:j] + word[j + 1 :] for j in range(len(word))} | {word}:
                ids.update(self.index.get(v, ()))
            own = self.rank.get(word)
            ids.discard(own if own is not None else -1)
            if not ids:  # no close neighbour (small vocabularies): same first two letters, similar length
                ids = {i for i in self.by_prefix.get(word[:2], ()) if abs(len(self.words[i]) - len(word)) <= 2}
                ids.discard(own if own is not None else -1)
            self._cache[word] = sorted(ids)
        return self._cache[word]


@lru_cache(maxsize=4)
def _vocabulary(words_path: str) -> _Vocabulary:
    return _Vocabulary(words_path)


def _word_columns(text: str, tokens: TokenSet) -> list[list[int]]:
    words = text.split()
    if tokens.kind == "bpe":
        return [tokens.encode(w) for w in words]
    space = tokens._index[" "]
    out = []
    for i, w in enumerate(words):
        cols = tokens.encode(w)
        if i + 1 < len(words):
            cols = cols + [space]
        out.append(cols)
    return out


def simulate_utterance(text: str, duration_s: float, tokens: TokenSet, cfg: SimulatorConfig, key: str) -> np.ndarray:
    """Simulated CTC log-posteriors for `text` spoken over `duration_s` seconds.

    Returns a (T, V) float32 array of natural-log posteriors (each row a log-softmax), T = num_frames().
    Deterministic from (cfg.seed, key); `key` is the utterance id. Raises ValueError when the reference
    cannot fit in T frames (T < tokens + blanks between repeated tokens).
    """
    T = num_frames(duration_s, cfg)
    V = tokens.vocab_size
    blank = tokens.blank_id
    rng = np.random.default_rng(_stable_seed("simulate", cfg.seed, key, tokens.kind, V))
    word_cols = _word_columns(text, tokens)
    ref_cols = [c for w in word_cols for c in w]
    need = required_frames(ref_cols)
    if need > T:
        raise ValueError(
            f"utterance {key!r}: duration_s={duration_s} gives {T} frames but the reference needs {need} "
            f"({len(ref_cols)} tokens + repeats); use a longer duration"
        )
    nbr, nbr_w = similar_tokens(tokens)

    def neighbour(c: int, exclude: int = -1) -> int:
        for _ in range(4):
            n = int(nbr[c, rng.choice(nbr.shape[1], p=nbr_w[c])])
            if n != exclude:
                return n
        return int(nbr[c, 0] if nbr[c, 0] != exclude else nbr[c, 1])

    # ---- confusion model: per-word errors --------------------------------------------------------
    shares = np.array([cfg.substitution_share, cfg.deletion_share, cfg.insertion_share], dtype=np.float64)
    shares = shares / shares.sum() if shares.sum() > 0 else np.array([1.0, 0.0, 0.0])
    space = tokens._index.get(" ", -1) if tokens.kind == "char" else -1
    vocab = _vocabulary(cfg.words_path) if cfg.words_path else None
    words = text.split()
    log_ev = (math.log(cfg.evidence_min), math.log(cfg.evidence_max))
    events: list[_Event] = []

    def emit_correct(cols: list[int], word_end_at_last: bool = True) -> None:
        for i, c in enumerate(cols):
            amb = c != space and rng.random() < cfg.ambiguity_rate
            events.append(_Event(c, c, "amb" if amb else "tok", word_end_at_last and i == len(cols) - 1))

    for word, cols in zip(words, word_cols):
        letters = [c for c in cols if c != space]
        tail = cols[len(letters):]  # the char set's trailing space (empty for BPE / the last word)
        if not letters or rng.random() >= cfg.word_error_rate:
            emit_correct(cols)
            continue
        op = ("sub", "del", "ins")[int(rng.choice(3, p=shares))]
        word_level = vocab is not None and rng.random() < cfg.real_word_share
        if word_level and op == "sub":
            cands = vocab.confusable(word)
            if cands:
                weights = 1.0 / np.sqrt(np.asarray(cands, dtype=np.float64) + 10.0)  # frequent words likelier
                other = vocab.words[cands[int(rng.choice(len(cands), p=weights / weights.sum()))]]
                wrong = tokens.encode(other)
                ev = math.exp(rng.uniform(*log_ev))
                for j, c in enumerate(wrong):
                    r = letters[j] if j < len(letters) else -1
                    events.append(_Event(c, c, "tok") if c == r else _Event(c, r, "sub", evidence=ev))
                for r in letters[len(wrong):]:
                    events.append(_Event(blank, r, "del", evidence=ev))
                events[-1].word_end = not tail
                emit_correct(tail)
                continue
        if word_level and op == "del":  # the whole word (and its separator) is swallowed
            ev = math.exp(rng.uniform(*log_ev))
            for r in cols:
                events.append(_Event(blank, r, "del", evidence=ev))
            events[-1].word_end = True
            continue
        if word_level and op == "ins":  # a frequent short word appears after this one
            emit_correct(cols)
            extra = tokens.encode(vocab.short_frequent[int(rng.integers(len(vocab.short_frequent)))])
            if space >= 0:
                extra = ([space] + extra) if not tail else (extra + [space])
            ev = math.exp(rng.uniform(*log_ev))
            for c in extra:  # confident spikes; blank (the reference) keeps `ev` of the top's mass
                events.append(_Event(c, blank, "sub", evidence=ev))
            events[-1].word_end = True
            continue
        # token level: one token substituted by a similar one (the reference stays runner-up), dropped to a
        # sub-blank bump, or followed by a similar token
        pos = int(rng.integers(len(letters)))
        for i, c in enumerate(cols):
            last = i == len(cols) - 1
            if i == pos and op == "sub":
                events.append(_Event(neighbour(c), c, "sub", last, evidence=rng.uniform(0.3, 0.85)))
            elif i == pos and op == "del":
                events.append(_Event(blank, c, "del", last, evidence=rng.uniform(0.5, 0.9)))
            else:
                emit_correct([c], word_end_at_last=last and not (i == pos and op == "ins"))
                if i == pos and op == "ins":
                    events.append(_Event(neighbour(c, exclude=c), -1, "ins", last))

    # ---- frame budget: drop insertions, then deletion bumps, if the utterance is too short ---------
    def min_frames(evs: list[_Event]) -> int:
        tops = [e.top for e in evs]
        return len(evs) + sum(1 for a, b in zip(tops, tops[1:]) if a == b and a != blank)

    for drop in ("ins", "del"):
        if min_frames(events) > T:
            events = [e for e in events if e.kind != drop]
    if min_frames(events) > T:  # substitutions created new repeats; fall back to the reference
        events = [_Event(c, c, "tok") for c in ref_cols]
    n = len(events)
    widths = np.ones(n, dtype=np.int64)
    min_gap = np.zeros(n + 1, dtype=np.int64)  # gap before event i (i = n: trailing)
    for i in range(1, n):
        if events[i].top == events[i - 1].top and events[i].top != blank:
            min_gap[i] = 1
    slack = T - n - int(min_gap.sum())
    for i in range(n):  # two-frame spikes
        if slack > 0 and events[i].kind == "tok" and rng.random() < cfg.double_spike_prob:
            widths[i] = 2
            slack -= 1
    gap_w = np.ones(n + 1)
    gap_w[0] = gap_w[n] = 6.0  # leading / trailing silence
    for i in range(n - 1):
        if events[i].word_end:
            gap_w[i + 1] = 2.0
    gaps = min_gap + (rng.multinomial(slack, gap_w / gap_w.sum()) if n else np.array([slack]))
    # spike i starts after the gaps before it and the widths of the spikes before it
    starts = (np.cumsum(gaps[:n]) + np.concatenate([[0], np.cumsum(widths)[:-1]])).astype(np.int64) if n else np.zeros(0, np.int64)

    # ---- posteriors -------------------------------------------------------------------------------
    # noise drawn in a blank-position-independent order (non-blank columns in order, then blank), so that a
    # blank-first token set yields exactly the column-permuted log-probs of its blank-last twin
    canonical = np.array(tokens.non_blank_ids + [blank], dtype=np.int64)
    # (T, V) float32 throughout, in place. Uniform noise with the std of `floor_spread` (4x cheaper to draw
    # than Gaussian, and the exact shape of the floor does not matter)
    probs = rng.random((T, V), dtype=np.float32)
    if blank != V - 1:
        probs[:, canonical] = probs.copy()
    probs *= np.float32(cfg.floor_spread * math.sqrt(12.0))
    probs += np.float32(cfg.floor_logp - 0.5 * cfg.floor_spread * math.sqrt(12.0))
    np.exp(probs, out=probs)  # unrelated tokens: ~exp(floor_logp), log-normal spread
    probs[:, blank] = 1.0
    is_spike = np.zeros(T, dtype=bool)
    for i, e in enumerate(events):
        is_spike[starts[i] : starts[i] + widths[i]] = True
    # blank frames: a small leak onto the nearest spikes' tokens and their neighbours
    leak = np.exp(np.log(cfg.blank_leak_median) + 1.0 * rng.standard_normal(T))
    centers = starts.astype(np.float64)
    tops = np.array([e.top if e.top != blank else e.ref for e in events], dtype=np.int64)
    if n:
        frames = np.arange(T)
        nearest = np.clip(np.searchsorted(centers, frames), 0, n - 1)
        prev = np.clip(nearest - 1, 0, n - 1)
        for idx in (nearest, prev):
            dist = np.abs(frames - centers[idx])
            m = leak * np.exp(-0.5 * dist) * 0.5
            col = tops[idx]
            probs[frames, col] += np.where(is_spike, 0.0, m)
            nb = nbr[col, 0]
            probs[frames, nb] += np.where(is_spike, 0.0, 0.3 * m)
    for i, e in enumerate(events):
        f0, w = int(starts[i]), int(widths[i])
        comps = [int(c) for c in nbr[e.top if e.top != blank else e.ref, : cfg.num_competitors] if c != e.ref]
        cw = rng.dirichlet(np.ones(len(comps))) if comps else np.zeros(0)
        for f in range(f0, f0 + w):
            row = probs[f]
            if e.kind in ("tok", "amb"):
                # capped so that the top (>= 0.55) always beats blank (<= 0.7 * 0.45) and any competitor
                err = min(0.45, math.exp(math.log(cfg.peak_error_median) + cfg.peak_error_spread * rng.standard_normal()))
                p_top = 1.0 - err
                if e.kind == "amb":
                    p_top = rng.uniform(0.45, 0.7)
                rest = 1.0 - p_top
                beta = rng.uniform(0.2, 0.7)
                row[e.top] = p_top
                row[blank] = beta * rest
                if comps:
                    if e.kind == "amb":
                        row[comps[0]] += (1 - beta) * rest * 0.9
                        row[comps] += cw * (1 - beta) * rest * 0.1
                    else:
                        row[comps] += cw * (1 - beta) * rest
            elif e.kind == "sub":
                p_top = rng.uniform(0.4, 0.7) if e.evidence >= 0.3 else 1.0 - rng.uniform(0.02, 0.3)
                row[e.top] = p_top
                p_ref = min(p_top * e.evidence, 0.95 - p_top) if e.ref >= 0 else 0.0  # runner-up, below the top
                rest = 1.0 - p_top - p_ref
                row[blank] = 0.5 * rest
                if e.ref >= 0:
                    row[e.ref] = p_ref + (0.5 * rest if e.ref == blank else 0.0)
                if comps:
                    others = [c for c in comps if c != e.top]
                    if others:
                        row[others] += 0.5 * rest / len(others)
            elif e.kind == "del":
                p_blank = rng.uniform(0.5, 0.9) if e.evidence >= 0.3 else 1.0 - rng.uniform(0.02, 0.3)
                row[blank] = p_blank
                row[e.ref] = min(p_blank * e.evidence, (1 - p_blank) * 0.9)
                if comps:
                    row[comps] += cw * (1 - p_blank - row[e.ref])
            else:  # ins
                p_top = rng.uniform(0.45, 0.75)
                row[e.top] = p_top
                row[blank] = (1 - p_top) * 0.8
                if comps:
                    others = [c for c in comps if c != e.top]
                    if others:
                        row[others] += (1 - p_top) * 0.2 / len(others)
        # shoulders: the token's mass bleeding into the frames around the spike
        if e.kind in ("tok", "amb") and rng.random() < cfg.shoulder_prob:
            side = f0 - 1 if rng.random() < 0.5 else f0 + w
            if 0 <= side < T and not is_spike[side]:
                # max, not sum: two shoulders on one frame must not outweigh its blank (= 1 before normalising)
                probs[side, e.top] = max(probs[side, e.top], math.exp(rng.uniform(math.log(0.005), math.log(0.5))))
    np.maximum(probs, np.float32(1e-30), out=probs)
    probs /= probs.sum(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
    return np.log(probs, out=probs)


def greedy_columns(log_probs: np.ndarray, blank_id: int) -> list[int]:
    """Best-path CTC decoding: argmax per frame, merge repeats, drop blanks."""
    best = np.asarray(log_probs).argmax(axis=-1)
    out, prev = [], -1
    for c in best.tolist():
        if c != prev and c != blank_id:
            out.append(c)
        prev = c
    return out


def blank_confident_ratio(log_probs: np.ndarray, blank_id: int, threshold: float = 0.98) -> float:
    """Fraction of frames whose P(blank) exceeds `threshold`."""
    lp = np.asarray(log_probs)
    if lp.shape[0] == 0:
        return 0.0
    return float(np.mean(lp[:, blank_id] > math.log(threshold)))
