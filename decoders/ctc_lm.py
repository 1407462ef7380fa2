"""CTC prefix beam search with shallow fusion: a token-level n-gram LM and phrase boosting (Aho-Corasick).

    lm = NgramLM.from_arpa("token_3gram.arpa", symbols)   # symbols[c]: the ARPA symbol of column c (None: blank)
    boost = PhraseBoost.build([{(5, 9): 2.0}], vocab_size=V, blank_id=blank)   # per row {token tuple: boost}
    result = ctc_lm_beam_search(log_probs, lengths, CtcLmConfig(beam_size=10, lm_weight=0.5), lm=lm, boost=boost)

Score of a prefix y (what the beam ranks, and what the result reports):

    log P_ctc(y | x) + lm_weight * sum_i log p_LM(y_i | y_<i) + insertion_bonus * |y| + boost(y)

- log P_ctc: the CTC posterior of the collapsed prefix, summed over alignments (prefix beam search: each prefix
  keeps log P(ends in blank) and log P(ends in non-blank); repeating the last token needs a blank between).
  Textbook rule: no slot is reserved for the empty prefix (issue 13's finding on TF's beam-2 case).
- p_LM: back-off n-gram (ARPA semantics, natural log), starting in the `<s>` context; tokens outside the LM's
  unigrams score as `<unk>` (an LM with neither raises). At the end `lm_weight * log p(</s> | y)` is added when
  `lm_eos` (NeMo adds it too).
- boost(y): while searching, the completed phrases' boosts plus the partial credit of the phrase being matched
  (per-token share boost / len of the longest phrase through the automaton state); at the end the partial credit
  is withdrawn, so the final score counts completed phrases only (icefall's context graph, NeMo's boosting tree).
  A phrase is a token sequence; occurrences may overlap (every match counts, via the automaton's output links).
- blank skipping (offline): frames with P(blank) > `blank_skip_threshold` are skipped; a run of skipped frames acts
  as one certain blank (every beam collapses into its blank-ending path), as in decoders/ctc.py. The batched path
  compacts each row's kept frames, so the frame loop runs max-over-rows(kept frames) steps.

Streaming: `CtcLmStreamingDecoder` (create_state / decode_chunk / finalize) runs the batched search chunk by chunk;
the state carries the beams' LM and automaton states, and chunked decoding equals offline decoding (tested).

Three implementations with one semantics:
- `reference_prefix_beam_search`: plain Python over prefix tuples, float64, every extension of every beam
  considered; the executable spec (tests check it against a brute-force sum over all alignments).
- the fused kernel (`CtcLmConfig.kernel="fused"`; "auto" picks it on CUDA, see FUSED_VERIFIED_ON_GPU: its gpu
  tests passed on the H200): one launch per decode, one thread block per
  row running the frame loop, blank skipping, each frame's candidate scoring with the LM / automaton lookups
  (per-state sorted arc lists searched along back-off / failure chains), the prefix merge (the hash rule below),
  an exact radix top-k of the beam x vocab candidates, and the final scoring and back-tracking
  (decoders/include/ctc_lm_kernels.cuh; op `beamdec::ctc_lm_decode`). Its CPU op runs the kernel's own code item
  by item (tests compare it with the torch path in both item orders). Covers the token `NgramLM` and
  `PhraseBoost`; the word-level `LexiconWordLM`, a custom `scorer` and streaming keep the torch path.
- `ctc_lm_beam_search` with kernel="torch" (the CPU default): batched, vectorized torch (B, beam, V) on the
  log-probs' device; the LM and the automaton are device tables searched with `torch.searchsorted` along
  back-off / failure chains, so there is no host round trip until the final copy of the results. Prefixes are
  identified by 64-bit hashes (+ length and last token) for the one merge a prefix beam search needs (beam i
  extended by c equals beam j). On a GPU the per-frame step (~70 kernels) is captured once as a CUDA graph and
  replayed per kept frame (`cuda_graphs`, default on; eager launches otherwise).
- ties: candidates with exactly equal scores may be ranked differently by the torch path (torch.topk's order
  among equal values is unspecified); the reference and the fused kernel rank stays before extensions, lower beam
  and lower token first.

Word-level LM (ARPA over words + lexicon, torchaudio/Flashlight convention): `LexiconWordLM`, passed as `lm=`
(it carries its own lm_weight and word_score, so the search applies it with weight 1; see its docstring).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from decoders.types import Hypothesis, check_prefix_search_options

NEG_INF = float("-inf")
BOS, EOS, UNK = "<s>", "</s>", "<unk>"
_LN10 = math.log(10.0)


# ------------------------------------------------------------------------------------------------- ARPA reading
@dataclass
class ArpaNgrams:
    """An ARPA file's n-grams: order -> {tuple of symbols: (log10 prob, log10 bow)}."""

    order: int
    ngrams: dict


def read_arpa(path: str | Path, vocab: Optional[Sequence[str]] = None) -> ArpaNgrams:
    """Parse an ARPA file strictly. One-line ValueError for: a missing/empty file, no `\\data\\` header, counts that
    do not match the sections, malformed lines, non-finite values, n-grams whose lower-order prefix is missing, and
    (given `vocab`) unigram symbols outside `vocab` + {<s>, </s>, <unk>} (an LM for another vocabulary)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ARPA file {path} not found")
    counts: dict[int, int] = {}
    ngrams: dict[int, dict] = {}
    section = -1  # -1 before \data\, 0 in the header
    with open(path, encoding="utf-8", newline="\n") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            if line == "\\data\\":
                section = 0
                continue
            if section == -1:
                raise ValueError(f"{path}:{lineno}: malformed ARPA: expected '\\data\\' before {line[:40]!r}")
            if line == "\\end\\":
                break
            if section == 0 and line.startswith("ngram "):
                try:
                    n, c = line[6:].split("=")
                    counts[int(n)] = int(c)
                except ValueError:
                    raise ValueError(f"{path}:{lineno}: malformed ARPA count line {line!r}") from None
                continue
            if line.startswith("\\") and line.endswith("-grams:"):
                try:
                    section = int(line[1:-7])
                except ValueError:
                    raise ValueError(f"{path}:{lineno}: malformed ARPA section {line!r}") from None
                if section not in counts:
                    raise ValueError(f"{path}:{lineno}: section {section}-grams not declared in the header")
                ngrams[section] = {}
                continue
            if section <= 0:
                raise ValueError(f"{path}:{lineno}: malformed ARPA: unexpected line {line[:40]!r}")
            parts = line.split("\t")
            if len(parts) == 1:  # space-separated ARPA (SRILM writes tabs, some tools spaces)
                toks = line.split(" ")
                parts = [toks[0], " ".join(toks[1 : 1 + section])] + toks[1 + section :]
            if len(parts) not in (2, 3):
                raise ValueError(f"{path}:{lineno}: malformed {section}-gram line {line[:60]!r}")
            words = tuple(parts[1].split(" "))
            if len(words) != section or any(not w for w in words):
                raise ValueError(f"{path}:{lineno}: a {section}-gram line has {len(words)} symbols: {line[:60]!r}")
            try:
                lp = float(parts[0])
                bow = float(parts[2]) if len(parts) == 3 else 0.0
            except ValueError:
                raise ValueError(f"{path}:{lineno}: malformed number in {line[:60]!r}") from None
            if math.isnan(lp) or lp == math.inf or not math.isfinite(bow):
                raise ValueError(f"{path}:{lineno}: non-finite log-probability in {line[:60]!r}")
            ngrams[section][words] = (lp, bow)
    if not counts:
        raise ValueError(f"{path}: empty or malformed ARPA (no '\\data\\' header with 'ngram N=' counts)")
    for n, c in counts.items():
        got = len(ngrams.get(n, {}))
        if got != c:
            raise ValueError(f"{path}: header declares {c} {n}-grams, the file has {got}")
    order = max(counts)
    if sorted(counts) != list(range(1, order + 1)):
        raise ValueError(f"{path}: ARPA orders {sorted(counts)} are not 1..{order}")
    for n in range(2, order + 1):
        for words in ngrams[n]:
            if words[:-1] not in ngrams[n - 1]:
                raise ValueError(f"{path}: {n}-gram {' '.join(words)!r} has no {n - 1}-gram prefix (malformed ARPA)")
    if vocab is not None:
        known = set(vocab) | {BOS, EOS, UNK}
        extra = [w[0] for w in ngrams[1] if w[0] not in known]
        if extra:
            raise ValueError(f"{path}: the LM vocabulary does not match the tokens: {len(extra)} unigram(s) are not "
                             f"tokens, e.g. {extra[:5]} (an LM for another tokenizer or encoding?)")
    return ArpaNgrams(order=order, ngrams=ngrams)


# ------------------------------------------------------------------------------------- chained sorted-key tables
class _ChainTable:
    """Arcs (state, label) -> (weight, dest) as sorted int64 keys state * L + label, plus per-state fallback
    (back-off / failure) state and weight: the device-searchable form shared by the LM and the boosting automaton.
    Looking up (s, x): the arc (s, x) if present, else fallback_weight[s] + lookup(fallback[s], x); state 0 (the
    root) must have an arc for every label that is ever looked up, or `miss_weight`/`miss_dest` apply there."""

    def __init__(self, keys, weights, dests, fallback, fallback_w, num_labels, max_chain, miss_weight, miss_dest):
        order = np.argsort(keys, kind="stable")
        self.keys = torch.from_numpy(np.asarray(keys, dtype=np.int64)[order])
        self.weights = torch.from_numpy(np.asarray(weights, dtype=np.float32)[order])
        self.weights64 = torch.from_numpy(np.asarray(weights, dtype=np.float64)[order])
        self.dests = torch.from_numpy(np.asarray(dests, dtype=np.int64)[order])
        self.fallback = torch.from_numpy(np.asarray(fallback, dtype=np.int64))
        self.fallback_w = torch.from_numpy(np.asarray(fallback_w, dtype=np.float32))
        self.fallback_w64 = torch.from_numpy(np.asarray(fallback_w, dtype=np.float64))
        self.num_labels = int(num_labels)
        self.max_chain = int(max_chain)
        self.miss_weight = float(miss_weight)
        self.miss_dest = int(miss_dest)
        # host dict for the reference
        self._dict = {int(k): (float(w), int(d)) for k, w, d in zip(keys, weights, dests)}
        self._fb = [int(x) for x in fallback]
        self._fbw = [float(x) for x in fallback_w]

    def to(self, device) -> "_ChainTable":
        for k in ("keys", "weights", "dests", "fallback", "fallback_w"):
            setattr(self, k, getattr(self, k).to(device))
        return self

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, k).numel() * getattr(self, k).element_size()
                   for k in ("keys", "weights", "dests", "fallback", "fallback_w"))

    def lookup(self, states: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """states (N,) int64, labels (N, M) int64 -> (weights (N, M) float32, dests (N, M) int64)."""
        s = states[:, None].expand_as(labels).clone()
        acc = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
        out_w = torch.full(labels.shape, self.miss_weight, dtype=torch.float32, device=labels.device)
        out_d = torch.full(labels.shape, self.miss_dest, dtype=torch.int64, device=labels.device)
        found = torch.zeros(labels.shape, dtype=torch.bool, device=labels.device)
        nk = self.keys.numel()
        for _ in range(self.max_chain + 1):
            q = s * self.num_labels + labels
            pos = torch.searchsorted(self.keys, q).clamp_(max=nk - 1)
            hit = (self.keys[pos] == q) & ~found
            out_w = torch.where(hit, acc + self.weights[pos], out_w)
            out_d = torch.where(hit, self.dests[pos], out_d)
            found |= hit
            acc = acc + torch.where(found, torch.zeros_like(acc), self.fallback_w[s])
            s = self.fallback[s]
        # never found at the root: miss_weight (+ nothing accumulated at the root) / miss_dest
        return out_w, out_d

    def lookup_one(self, state: int, label: int) -> tuple[float, int]:
        """Reference (host, float64) lookup."""
        acc = 0.0
        s = state
        for _ in range(self.max_chain + 1):
            hit = self._dict.get(s * self.num_labels + label)
            if hit is not None:
                return acc + hit[0], hit[1]
            if s == 0:
                break
            acc += self._fbw[s]
            s = self._fb[s]
        return self.miss_weight, self.miss_dest


# --------------------------------------------------------------------------------------------- the n-gram LM
class NgramLM:
    """A back-off n-gram LM over log-prob columns, as device tables (`_ChainTable`): states are the ARPA's n-grams of
    order < N (their histories), arcs the explicit n-grams (weight = natural-log prob, dest = the longest suffix of
    history + token that is a state), fallbacks the back-off (weight = bow, dest = the history without its first
    symbol). Columns are mapped to LM labels once (`symbols[c]`; None = blank, scored 0 and never advanced).
    `advance(states)` gives every column's score and next state; `final(states)` log p(</s> | state)."""

    def __init__(self, arpa: ArpaNgrams, symbols: Sequence[Optional[str]]):
        vocab = [s for s in symbols if s is not None]
        if len(set(vocab)) != len(vocab):
            raise ValueError("symbols: two columns share one LM symbol")
        uni = arpa.ngrams[1]
        labels = sorted({w[0] for w in uni} | {EOS})
        self.label_of = {w: i for i, w in enumerate(labels)}
        missing = [s for s in vocab if (s,) not in uni]
        has_unk = (UNK,) in uni
        if missing and not has_unk:
            raise ValueError(f"the LM vocabulary does not match the tokens: {len(missing)} token(s) have no unigram "
                             f"and the LM has no <unk>, e.g. {missing[:5]}")
        self.symbols = list(symbols)
        self.vocab_size = len(symbols)
        self.order = arpa.order
        self.unk_tokens = missing
        col_label = [-1 if s is None else self.label_of[s if (s,) in uni else UNK] for s in symbols]
        self.col_label = torch.tensor(col_label, dtype=torch.int64)
        # states: root (empty history) = 0, then n-grams of order 1..N-1 (except </s>, which ends a sentence)
        state_of: dict = {(): 0}
        for n in range(1, arpa.order):
            for words in arpa.ngrams[n]:
                if words[-1] != EOS:
                    state_of[words] = len(state_of)
        self.num_states = len(state_of)
        if (BOS,) not in state_of:
            raise ValueError("the LM has no <s> unigram (malformed ARPA: every sentence starts in <s>)")
        self.bos_state = state_of[(BOS,)]

        def longest_state(words: tuple) -> int:
            words = words[-(arpa.order - 1):] if arpa.order > 1 else ()
            while words not in state_of:
                words = words[1:]
            return state_of[words]

        fallback = np.zeros(self.num_states, dtype=np.int64)
        fallback_w = np.zeros(self.num_states, dtype=np.float64)
        for words, s in state_of.items():
            if not words:
                continue
            fallback[s] = longest_state(words[1:])
            fallback_w[s] = arpa.ngrams[len(words)][words][1] * _LN10
        keys, weights, dests = [], [], []
        L = len(labels)
        for n in range(1, arpa.order + 1):
            for words, (lp, _) in arpa.ngrams[n].items():
                if words[-1] == BOS:
                    continue  # nothing predicts <s>
                hist = words[:-1]
                if hist not in state_of:
                    continue  # a history ending in </s>: unreachable
                keys.append(state_of[hist] * L + self.label_of[words[-1]])
                weights.append(lp * _LN10)
                dests.append(longest_state(words) if words[-1] != EOS else 0)
        self.table = _ChainTable(keys, weights, dests, fallback, fallback_w, L, arpa.order,
                                 miss_weight=NEG_INF, miss_dest=0)
        self.eos_label = self.label_of[EOS]
        self._states_of = state_of

    @classmethod
    def from_arpa(cls, path: str | Path, symbols: Sequence[Optional[str]]) -> "NgramLM":
        return cls(read_arpa(path, [s for s in symbols if s is not None]), symbols)

    def to(self, device) -> "NgramLM":
        self.table.to(device)
        self.col_label = self.col_label.to(device)
        return self

    @property
    def nbytes(self) -> int:
        return self.table.nbytes

    def initial_states(self, batch: int, device) -> torch.Tensor:
        return torch.full((batch,), self.bos_state, dtype=torch.int64, device=device)

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """states (N,) -> scores (N, V) natural log (0 for the blank), next states (N, V)."""
        lab = self.col_label.to(states.device)
        blank = lab < 0
        w, d = self.table.lookup(states, lab.clamp(min=0)[None, :].expand(states.shape[0], -1))
        w = torch.where(blank[None, :], torch.zeros_like(w), w)
        d = torch.where(blank[None, :], states[:, None].expand_as(d), d)
        return w, d

    def final(self, states: torch.Tensor) -> torch.Tensor:
        w, _ = self.table.lookup(states, torch.full((states.shape[0], 1), self.eos_label, dtype=torch.int64,
                                                    device=states.device))
        return w[:, 0]

    # reference (host, float64)
    def score_one(self, state: int, column: int) -> tuple[float, int]:
        lab = int(self.col_label[column])
        if lab < 0:
            return 0.0, state
        return self.table.lookup_one(state, lab)

    def final_one(self, state: int) -> float:
        return self.table.lookup_one(state, self.eos_label)[0]


# ------------------------------------------------------------------------------------ phrase boosting (AC)
class PhraseBoost:
    """Aho-Corasick automata over token sequences, one per row, in one `_ChainTable` (root of row b: roots[b]).

    Per state s: credit(s) = depth(s) * max over phrases P with s a proper prefix of P of boost(P) / len(P) (the
    partial credit; 0 where no longer phrase continues), out(s) = the boosts of every phrase that is a suffix of
    s's path (dictionary links). The arc weight of s --x--> s' is credit(s') - credit(s) + out(s'): along a path,
    the running total is (completed phrases) + credit(current state); `final_credit(s)` = -credit(s) withdraws the
    partial credit at the end. Fallback = the failure link (weight 0); a label with no arc at the root stays there.
    """

    def __init__(self, phrases_per_row: Sequence[dict], vocab_size: int, blank_id: int):
        self.vocab_size = int(vocab_size)
        self.blank_id = int(blank_id)
        children: list[dict] = []
        credit: list[float] = []
        own: list[float] = []
        depth: list[int] = []
        roots = []
        touched: set = set()
        for row, phrases in enumerate(phrases_per_row):
            root = len(children)
            roots.append(root)
            children.append({})
            credit.append(0.0)
            own.append(0.0)
            depth.append(0)
            for phrase, boost in (phrases or {}).items():
                phrase = tuple(int(t) for t in phrase)
                b = float(boost)
                if not math.isfinite(b):
                    raise ValueError(f"boost for phrase {phrase} must be finite, got {boost}")
                if not phrase:
                    raise ValueError(f"row {row}: empty phrase")
                if any(t < 0 or t >= vocab_size or t == blank_id for t in phrase):
                    raise ValueError(f"row {row}: phrase {phrase} has a token outside [0, {vocab_size}) or the blank")
                s = root
                for i, t in enumerate(phrase):
                    nxt = children[s].get(t)
                    if nxt is None:
                        nxt = len(children)
                        children[s][t] = nxt
                        children.append({})
                        credit.append(0.0)
                        own.append(0.0)
                        depth.append(depth[s] + 1)
                    s = nxt
                    if i + 1 < len(phrase):  # a proper prefix of this phrase: partial credit
                        share = (i + 1) * b / len(phrase)
                        credit[s] = share if s not in touched else max(credit[s], share)
                        touched.add(s)
                own[s] += b
        S = len(children)
        fail = [0] * S
        out = list(own)
        for root in roots:  # BFS per row: failure links and dictionary outputs
            fail[root] = root
            queue = []
            for t, c in children[root].items():
                fail[c] = root
                queue.append(c)
            qi = 0
            while qi < len(queue):
                s = queue[qi]
                qi += 1
                out[s] = own[s] + out[fail[s]] if fail[s] != root else own[s]
                for t, c in children[s].items():
                    f = fail[s]
                    while f != root and t not in children[f]:
                        f = fail[f]
                    fail[c] = children[f][t] if t in children[f] and children[f][t] != c else root
                    queue.append(c)
        keys, weights, dests = [], [], []
        V = self.vocab_size
        # explicit arcs: trie children; failure transitions are followed at lookup time (chain)
        for s in range(S):
            for t, c in children[s].items():
                keys.append(s * V + t)
                weights.append(0.0)
                dests.append(c)
        self.roots = torch.tensor(roots, dtype=torch.int64)
        self.credit = torch.tensor(credit, dtype=torch.float32)
        self.out = torch.tensor(out, dtype=torch.float32)
        self._credit = credit
        self._out = out
        self.num_states = S
        max_depth = max(depth) if depth else 0
        # the root of row b falls back to itself; "miss" means: stayed at the chain's end (a root)
        self._roots_set = set(roots)
        fb = np.asarray(fail, dtype=np.int64)
        self.table = _ChainTable(keys or [0], weights or [0.0], dests or [0], fb, np.zeros(S), V, max_depth + 1,
                                 miss_weight=0.0, miss_dest=-1)
        if not keys:
            self.table.keys = torch.full((1,), -1, dtype=torch.int64)  # nothing matches
            self.table._dict = {}

    @classmethod
    def build(cls, phrases_per_row: Sequence[dict], vocab_size: int, blank_id: int) -> "PhraseBoost":
        return cls(phrases_per_row, vocab_size, blank_id)

    def to(self, device) -> "PhraseBoost":
        self.table.to(device)
        for k in ("roots", "credit", "out"):
            setattr(self, k, getattr(self, k).to(device))
        return self

    def initial_states(self, batch: int, device) -> torch.Tensor:
        if batch != self.roots.numel():
            raise ValueError(f"boosts: {self.roots.numel()} rows of phrases for a batch of {batch}")
        return self.roots.to(device)

    def _goto(self, states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        # chain lookup; a miss ends at a row's root (fallback of a root is itself), so dest = that root
        _, d = self.table.lookup(states, labels)
        s = states[:, None].expand_as(labels)
        # find the root of each state's row: follow fallbacks max_chain times (roots are fixed points)
        r = s.clone()
        for _ in range(self.table.max_chain + 1):
            r = self.table.fallback[r]
        return torch.where(d < 0, r, d)

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cols = torch.arange(self.vocab_size, device=states.device)[None, :].expand(states.shape[0], -1)
        d = self._goto(states, cols)
        w = self.credit[d] - self.credit[states][:, None] + self.out[d]
        blank = cols == self.blank_id
        w = torch.where(blank, torch.zeros_like(w), w)
        d = torch.where(blank, states[:, None].expand_as(d), d)
        return w, d

    def final(self, states: torch.Tensor) -> torch.Tensor:
        return -self.credit[states]

    # reference (host, float64)
    def _goto_one(self, s: int, t: int) -> int:
        while True:
            hit = self.table._dict.get(s * self.vocab_size + t)
            if hit is not None:
                return hit[1]
            if s in self._roots_set:
                return s
            s = self.table._fb[s]

    def score_one(self, state: int, column: int) -> tuple[float, int]:
        if column == self.blank_id:
            return 0.0, state
        d = self._goto_one(state, column)
        return self._credit[d] - self._credit[state] + self._out[d], d

    def final_one(self, state: int) -> float:
        return -self._credit[state]


class LexiconWordLM:
    """Word-level shallow fusion: a word ARPA + a lexicon (word -> token spellings), the convention of torchaudio's
    and Flashlight's lexicon decoders: token sequences must spell lexicon words; the word LM scores a word when it
    is complete (weight `lm_weight`, plus `word_score` per word), `</s>` at the end.

    Word boundaries: `mode="bpe"`: a column whose piece starts with "\u2581" starts a word (the previous word,
    if any, completes there); `mode="char"`: the separator column (" ") completes the word (repeated separators
    and a leading one are free). A prefix that leaves the lexicon (no trie child), or completes at a trie node with
    no word, scores -inf. Look-ahead while a word is incomplete: Flashlight's MAX smearing with the unigram LM
    (credit(node) = lm_weight * max log p_unigram over the words below the trie node), withdrawn when the word
    completes or the utterance ends -- it only steers pruning, final scores are exact.
    State (int64): trie_node * num_lm_states + lm_state. Homophones: the first-listed word of a spelling wins.
    """

    def __init__(self, arpa: ArpaNgrams, lexicon: dict, tokens: Sequence[str], blank_id: int, mode: str,
                 lm_weight: float, word_score: float = 0.0, separator: str = " "):
        if mode not in ("bpe", "char"):
            raise ValueError(f"mode must be 'bpe' or 'char', got {mode!r}")
        for k, v in (("lm_weight", lm_weight), ("word_score", word_score)):
            if not math.isfinite(float(v)):
                raise ValueError(f"{k} must be finite, got {v}")
        if not lexicon:
            raise ValueError("lexicon is empty")
        V = len(tokens)
        self.vocab_size = V
        self.blank_id = int(blank_id)
        self.mode = mode
        self.lm_weight = float(lm_weight)
        self.word_score = float(word_score)
        words = list(lexicon)
        self.words = words
        self.lm = NgramLM(arpa, words)  # word index -> LM label (<unk> for words without a unigram)
        if len(self.lm.unk_tokens) == len(words):
            raise ValueError(f"the LM vocabulary does not match the lexicon: none of its {len(words)} words has a "
                             f"unigram, e.g. {words[:5]} (an LM for another vocabulary?)")
        self.num_lm = self.lm.num_states
        if mode == "char":
            if separator not in tokens:
                raise ValueError(f"char mode needs the separator {separator!r} among the tokens")
            self.sep = list(tokens).index(separator)
            self.word_start = torch.zeros(V, dtype=torch.bool)
        else:
            self.sep = -1
            self.word_start = torch.tensor([str(t).startswith("\u2581") for t in tokens], dtype=torch.bool)
        children: list[dict] = [{}]
        word_at = [-1]
        for wi, w in enumerate(words):
            spellings = lexicon[w]
            for sp in spellings:
                sp = [int(c) for c in sp]
                if not sp or any(c < 0 or c >= V or c == blank_id or c == self.sep for c in sp):
                    raise ValueError(f"lexicon: spelling {sp} of {w!r} is empty or has the blank/separator or a "
                                     f"column outside [0, {V})")
                if mode == "bpe" and not bool(self.word_start[sp[0]]):
                    raise ValueError(f"lexicon: spelling of {w!r} does not start with a word-start piece")
                if mode == "bpe" and any(bool(self.word_start[c]) for c in sp[1:]):
                    raise ValueError(f"lexicon: spelling of {w!r} has a word-start piece inside the word")
                n = 0
                for c in sp:
                    if c not in children[n]:
                        children[n][c] = len(children)
                        children.append({})
                        word_at.append(-1)
                    n = children[n][c]
                if word_at[n] < 0:
                    word_at[n] = wi
        self.num_nodes = len(children)
        if self.num_nodes * self.num_lm >= 2 ** 62:
            raise ValueError("lexicon x LM too large for the 64-bit state encoding")
        # unigram log p of each word (for smearing), credit per node = lm_weight * max over its subtree
        uni = [self.lm.score_one(0, wi)[0] for wi in range(len(words))]
        best = [NEG_INF] * self.num_nodes
        order = []  # BFS order
        q = [0]
        while q:
            n = q.pop()
            order.append(n)
            q.extend(children[n].values())
        for n in reversed(order):
            b = uni[word_at[n]] if word_at[n] >= 0 else NEG_INF
            for c in children[n].values():
                b = max(b, best[c])
            best[n] = b
        credit = [0.0 if n == 0 or best[n] == NEG_INF else self.lm_weight * best[n] for n in range(self.num_nodes)]
        keys = [n * V + c for n in range(self.num_nodes) for c in children[n]]
        dests = [children[n][c] for n in range(self.num_nodes) for c in children[n]]
        order_k = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable") if keys else np.zeros(0, dtype=np.int64)
        self.keys = torch.tensor(np.asarray(keys, dtype=np.int64)[order_k], dtype=torch.int64)
        self.dests = torch.tensor(np.asarray(dests, dtype=np.int64)[order_k], dtype=torch.int64)
        self.word_at = torch.tensor(word_at, dtype=torch.int64)
        self.credit = torch.tensor(credit, dtype=torch.float32)
        self._children = children
        self._word_at = word_at
        self._credit = credit

    @classmethod
    def from_files(cls, arpa_path, lexicon: dict, tokens, blank_id, mode, lm_weight, word_score=0.0):
        """ARPA words outside the lexicon are legal (unreachable); lexicon words outside the ARPA score as <unk>."""
        if not lexicon:
            raise ValueError("lexicon is empty")
        return cls(read_arpa(arpa_path), lexicon, tokens, blank_id, mode, lm_weight, word_score)

    def to(self, device) -> "LexiconWordLM":
        self.lm.to(device)
        for k in ("keys", "dests", "word_at", "credit", "word_start"):
            setattr(self, k, getattr(self, k).to(device))
        return self

    def initial_states(self, batch: int, device) -> torch.Tensor:
        return torch.full((batch,), self.lm.bos_state, dtype=torch.int64, device=device)  # node 0

    def _child(self, nodes: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        if self.keys.numel() == 0:
            return torch.full_like(nodes, -1)
        q = nodes * self.vocab_size + cols
        pos = torch.searchsorted(self.keys, q).clamp_(max=self.keys.numel() - 1)
        return torch.where(self.keys[pos] == q, self.dests[pos], torch.full_like(q, -1))

    def _complete(self, nodes: torch.Tensor, lm_states: torch.Tensor):
        """(realized score, next LM state) of completing the word at `nodes` (-inf where no word)."""
        w = self.word_at[nodes]
        lab = self.lm.col_label[w.clamp(min=0)]
        sc, nxt = self.lm.table.lookup(lm_states.reshape(-1), lab.reshape(-1, 1))
        sc = sc.view(nodes.shape) * self.lm_weight + self.word_score
        sc = torch.where(w >= 0, sc, torch.full_like(sc, NEG_INF))
        return sc, nxt.view(nodes.shape)

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        N, V = states.shape[0], self.vocab_size
        node = states // self.num_lm
        lms = states % self.num_lm
        cols = torch.arange(V, device=states.device)[None, :].expand(N, V)
        nodeV = node[:, None].expand(N, V)
        lmV = lms[:, None].expand(N, V)
        at_root = nodeV == 0
        done_sc, done_lm = self._complete(node, lms)  # (N,)
        done_sc, done_lm = done_sc[:, None].expand(N, V), done_lm[:, None].expand(N, V)
        zero = torch.zeros((N, V), dtype=torch.float32, device=states.device)
        if self.mode == "bpe":
            starts = self.word_start[None, :].expand(N, V)
            from_node = torch.where(starts, torch.zeros_like(nodeV), nodeV)
            new_node = self._child(from_node, cols)
            realized = torch.where(starts & ~at_root, done_sc, zero)
            new_lm = torch.where(starts & ~at_root, done_lm, lmV)
        else:
            is_sep = cols == self.sep
            new_node = torch.where(is_sep, torch.zeros_like(nodeV), self._child(nodeV, cols))
            realized = torch.where(is_sep & ~at_root, done_sc, zero)
            new_lm = torch.where(is_sep & ~at_root, done_lm, lmV)
        ok = new_node >= 0
        nn = new_node.clamp(min=0)
        w = realized + self.credit[nn] - self.credit[nodeV]
        w = torch.where(ok, w, torch.full_like(w, NEG_INF))
        d = torch.where(ok, nn * self.num_lm + new_lm, states[:, None].expand(N, V))
        blank = cols == self.blank_id
        return torch.where(blank, zero, w), torch.where(blank, states[:, None].expand(N, V), d)

    def final(self, states: torch.Tensor) -> torch.Tensor:
        node = states // self.num_lm
        lms = states % self.num_lm
        done_sc, done_lm = self._complete(node, lms)
        at_root = node == 0
        lm_end = torch.where(at_root, lms, done_lm)
        eos = self.lm.final(lm_end) * self.lm_weight
        return torch.where(at_root, eos, done_sc + eos - self.credit[node])

    # reference (host, float64)
    def _complete_one(self, node: int, lm_state: int):
        w = self._word_at[node]
        if w < 0:
            return NEG_INF, lm_state
        sc, nxt = self.lm.score_one(lm_state, w)
        return self.lm_weight * sc + self.word_score, nxt

    def score_one(self, state: int, column: int) -> tuple[float, int]:
        if column == self.blank_id:
            return 0.0, state
        node, lms = divmod(state, self.num_lm)
        realized, new_lm = 0.0, lms
        if self.mode == "bpe":
            if bool(self.word_start[column]):
                if node != 0:
                    realized, new_lm = self._complete_one(node, lms)
                new_node = self._children[0].get(column, -1)
            else:
                new_node = self._children[node].get(column, -1)
        elif column == self.sep:
            if node != 0:
                realized, new_lm = self._complete_one(node, lms)
            new_node = 0
        else:
            new_node = self._children[node].get(column, -1)
        if new_node < 0 or realized == NEG_INF:
            return NEG_INF, state
        return realized + self._credit[new_node] - self._credit[node], new_node * self.num_lm + new_lm

    def final_one(self, state: int) -> float:
        node, lms = divmod(state, self.num_lm)
        if node == 0:
            return self.lm_weight * self.lm.final_one(lms)
        realized, new_lm = self._complete_one(node, lms)
        if realized == NEG_INF:
            return NEG_INF
        return realized + self.lm_weight * self.lm.final_one(new_lm) - self._credit[node]


class ComposedScorer:
    """An explicit product of weighted scorers (e.g. lm_weight * LM and 1 * boosting), enumerated over the states
    reachable within `max_tokens` tokens from the initial states: a dense (S, V) table of weights and next states.
    For tests: the search with this one scorer must equal the search with the separate scorers."""

    def __init__(self, scorers: Sequence[tuple[float, object]], initial: Sequence[Sequence[int]], vocab_size: int,
                 max_tokens: int):
        index: dict = {}
        frontier = []
        for init in initial:
            key = tuple(int(x) for x in init)
            if key not in index:
                index[key] = len(index)
                frontier.append(key)
        rows_w, rows_d = {}, {}
        for _ in range(max_tokens + 1):
            nxt = []
            for key in frontier:
                ws, ds = [], []
                for c in range(vocab_size):
                    total = 0.0
                    dest = []
                    for (weight, sc), st in zip(scorers, key):
                        w, d = sc.score_one(st, c)
                        total += weight * w
                        dest.append(d)
                    dest = tuple(dest)
                    if dest not in index:
                        index[dest] = len(index)
                        nxt.append(dest)
                    ws.append(total)
                    ds.append(index[dest])
                rows_w[index[key]] = ws
                rows_d[index[key]] = ds
            frontier = nxt
        S = len(index)
        W = np.zeros((S, vocab_size))
        D = np.tile(np.arange(S)[:, None], (1, vocab_size))  # states past max_tokens: self-loops, weight 0
        F = np.zeros(S)
        for key, i in index.items():
            if i in rows_w:
                W[i] = rows_w[i]
                D[i] = rows_d[i]
            F[i] = sum(weight * sc.final_one(st) for (weight, sc), st in zip(scorers, key))
        self.weights = torch.tensor(W, dtype=torch.float32)
        self.dests = torch.tensor(D, dtype=torch.int64)
        self.finals = torch.tensor(F, dtype=torch.float32)
        self._W, self._D, self._F = W, D, F
        self._initial = [index[tuple(int(x) for x in init)] for init in initial]
        self.num_states = S

    def to(self, device) -> "ComposedScorer":
        self.weights, self.dests, self.finals = (x.to(device) for x in (self.weights, self.dests, self.finals))
        return self

    def initial_states(self, batch: int, device) -> torch.Tensor:
        return torch.tensor(self._initial, dtype=torch.int64, device=device)

    def advance(self, states):
        return self.weights[states], self.dests[states]

    def final(self, states):
        return self.finals[states]

    def score_one(self, state: int, column: int):
        return float(self._W[state, column]), int(self._D[state, column])

    def final_one(self, state: int) -> float:
        return float(self._F[state])


# ------------------------------------------------------------------------------------------------- config
KERNELS = ("auto", "fused", "torch")


@dataclass
class CtcLmConfig:
    """CTC prefix beam search with shallow fusion.

    beam_size: prefixes kept per frame, 1..128.
    lm_weight: weight of the LM's natural-log probabilities (finite, >= 0).
    insertion_bonus: added per emitted token (NeMo's beam_beta), finite.
    lm_eos: add lm_weight * log p(</s> | prefix) to the final scores.
    blank_id: blank column.
    blank_skip_threshold: frames with P(blank) above it are skipped (>= 1.0 disables).
    nbest: hypotheses returned per row, 1..beam_size.
    cuda_graphs: on a GPU, run the frame loop as a captured CUDA graph replayed per frame (same kernels, same
        results; falls back to eager launches with a warning if capture fails). Ignored on the CPU and by the
        fused kernel.
    kernel: "auto": the fused kernel (one launch per decode, decoders/include/ctc_lm_kernels.cuh) on CUDA (verified
        there: FUSED_VERIFIED_ON_GPU) when it covers the scorers (a token `NgramLM` and/or `PhraseBoost`, or none),
        else the torch path (the CPU, the
        word-level `LexiconWordLM`, a custom `scorer`); "fused": the fused kernel on any device (on the CPU the
        kernel's own code, run item by item: for tests), an error for what it does not cover; "torch": the
        vectorized torch path. Streaming (`CtcLmStreamingDecoder`) always runs the torch path.
    """

    beam_size: int = 10
    lm_weight: float = 0.5
    insertion_bonus: float = 1.0
    lm_eos: bool = True
    blank_id: int = 0
    blank_skip_threshold: float = 0.98
    nbest: int = 1
    cuda_graphs: bool = True
    kernel: str = "auto"

    def __post_init__(self):
        if not isinstance(self.beam_size, int) or not 1 <= self.beam_size <= 128:
            raise ValueError(f"beam_size must be an int in [1, 128], got {self.beam_size!r}")
        for k in ("lm_weight", "insertion_bonus"):
            v = getattr(self, k)
            if not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                raise ValueError(f"{k} must be a finite number, got {v!r}")
        if self.lm_weight < 0:
            raise ValueError(f"lm_weight must be >= 0, got {self.lm_weight}")
        check_prefix_search_options(self.blank_id, self.nbest, self.beam_size, self.blank_skip_threshold)
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {list(KERNELS)}, got {self.kernel!r}")


@dataclass
class CtcLmResult:
    """tokens[b][n]: column ids; scores (B, nbest) float32 (fused, final; -inf where no hypothesis)."""

    tokens: list
    scores: torch.Tensor

    def hypotheses(self, row: int, tokens=None) -> list[Hypothesis]:
        """The row's N-best; with `tokens` (decoders.ctc.detokenize) each carries its words."""
        from decoders.ctc import detokenize

        return [Hypothesis(tokens=t, words=detokenize(t, tokens).split() if tokens is not None else [], score=float(s))
                for t, s in zip(self.tokens[row], self.scores[row].tolist())]

    def texts(self, tokens, n: int = 0) -> list[str]:
        from decoders.ctc import detokenize

        return [detokenize(row[n], tokens) for row in self.tokens]


def _check(log_probs: torch.Tensor, lengths: torch.Tensor, config: CtcLmConfig) -> None:
    if not isinstance(log_probs, torch.Tensor) or log_probs.dim() != 3:
        raise ValueError(f"log_probs must be a (B, T, V) tensor, got {getattr(log_probs, 'shape', type(log_probs))}")
    if not log_probs.dtype.is_floating_point:
        raise ValueError(f"log_probs must be floating point, got {log_probs.dtype}")
    B, T, V = log_probs.shape
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1 or lengths.shape[0] != B:
        raise ValueError(f"lengths must be a 1-D tensor of B={B} ints, got {getattr(lengths, 'shape', lengths)}")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be an integer tensor, got {lengths.dtype}")
    if not 0 <= config.blank_id < V:
        raise ValueError(f"blank_id={config.blank_id} is outside the vocabulary [0, V={V})")
    if bool(((lengths < 0) | (lengths > T)).any()):
        raise ValueError(f"lengths must be in [0, T={T}], got {lengths.tolist()}")
    from decoders.ctc import check_log_prob_values

    check_log_prob_values(log_probs, lengths, config.blank_id)


def _check_scorer_vocab(lm, boost, V: int) -> None:
    if lm is not None and lm.vocab_size != V:
        raise ValueError(f"the LM maps {lm.vocab_size} columns, log_probs have V={V} (LM built for another vocabulary)")
    if boost is not None and boost.vocab_size != V:
        raise ValueError(f"the boosting automaton has V={boost.vocab_size}, log_probs have V={V}")


# ------------------------------------------------------------------------------------------ reference search
def _lse(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


def reference_prefix_beam_search(
    log_probs: torch.Tensor, lengths: torch.Tensor, config: CtcLmConfig, lm: Optional[NgramLM] = None,
    boost: Optional[PhraseBoost] = None, scorer=None,
) -> CtcLmResult:
    """The executable spec (plain Python, float64). `scorer`: any object with initial_states / score_one /
    final_one (weight 1), used instead of lm + boost (the composed-graph tests)."""
    _check(log_probs, lengths, config)
    B, T, V = log_probs.shape
    _check_scorer_vocab(lm, boost, V)
    lp_all = log_probs.detach().double().cpu()
    blank = config.blank_id
    K = config.beam_size
    parts = []  # (weight, scorer, initial states (B,))
    if scorer is not None:
        parts.append((1.0, scorer, scorer.initial_states(B, "cpu").tolist()))
    else:
        if isinstance(lm, LexiconWordLM):  # weights inside; its final score (word completion) is never skipped
            parts.append((1.0, lm, lm.initial_states(B, "cpu").tolist()))
        elif lm is not None and config.lm_weight != 0:
            parts.append((float(config.lm_weight), lm, [lm.bos_state] * B))
        if boost is not None:
            parts.append((1.0, boost, boost.initial_states(B, "cpu").tolist()))
    thr = float(config.blank_skip_threshold)
    log_thr = math.log(thr) if 0 < thr < 1 else (NEG_INF if thr <= 0 else None)
    all_tokens, all_scores = [], []
    for b in range(B):
        # prefix -> [pb, pnb, fusion, states tuple]
        init_states = tuple(p[2][b] for p in parts)
        beams = {(): [0.0, NEG_INF, 0.0, init_states]}
        fusion_cache: dict = {}

        def extend(prefix, c, fusion, states):
            key = prefix + (c,)
            if key not in fusion_cache:
                f = fusion + config.insertion_bonus
                new_states = []
                for (w, sc, _), st in zip(parts, states):
                    s, d = sc.score_one(st, c)
                    f += w * s
                    new_states.append(d)
                fusion_cache[key] = (f, tuple(new_states))
            return fusion_cache[key]

        for t in range(int(lengths[b])):
            lp = lp_all[b, t].tolist()
            if log_thr is not None and lp[blank] > log_thr:  # skipped frame: one certain blank
                for v in beams.values():
                    v[0], v[1] = _lse(v[0], v[1]), NEG_INF
                continue
            nxt: dict = {}
            order = []  # candidate order for ties: stays (by beam), then extensions (by beam, token)

            def add(prefix, pb, pnb, fusion, states, rank):
                e = nxt.get(prefix)
                if e is None:
                    nxt[prefix] = [pb, pnb, fusion, states]
                    order.append((rank, prefix))
                else:
                    e[0], e[1] = _lse(e[0], pb), _lse(e[1], pnb)

            for i, (prefix, (pb, pnb, fusion, states)) in enumerate(beams.items()):
                tot = _lse(pb, pnb)
                last = prefix[-1] if prefix else None
                add(prefix, tot + lp[blank], pnb + lp[last] if last is not None else NEG_INF, fusion, states, (0, i, 0))
            for i, (prefix, (pb, pnb, fusion, states)) in enumerate(beams.items()):
                tot = _lse(pb, pnb)
                last = prefix[-1] if prefix else None
                for c in range(V):
                    if c == blank:
                        continue
                    src = pb if c == last else tot
                    if src == NEG_INF or lp[c] == NEG_INF:
                        continue
                    f, st = extend(prefix, c, fusion, states)
                    add(prefix + (c,), NEG_INF, src + lp[c], f, st, (1, i, c))
            ranked = sorted(order, key=lambda rp: (-(_lse(nxt[rp[1]][0], nxt[rp[1]][1]) + nxt[rp[1]][2]), rp[0]))
            beams = {}
            for _, prefix in ranked[:K]:
                e = nxt[prefix]
                if _lse(e[0], e[1]) + e[2] == NEG_INF:
                    continue
                beams[prefix] = e
        final = []
        for prefix, (pb, pnb, fusion, states) in beams.items():
            s = _lse(pb, pnb) + fusion
            for (w, sc, _), st in zip(parts, states):
                if sc is lm and not config.lm_eos and not isinstance(lm, LexiconWordLM):
                    continue
                s += w * sc.final_one(st)
            final.append((s, prefix))
        final = [fp for fp in final if fp[0] > NEG_INF]
        final.sort(key=lambda x: -x[0])
        toks = [list(p) for _, p in final[: config.nbest]]
        sc = [s for s, _ in final[: config.nbest]]
        while len(toks) < config.nbest:
            toks.append([])
            sc.append(NEG_INF)
        all_tokens.append(toks)
        all_scores.append(sc)
    return CtcLmResult(tokens=all_tokens, scores=torch.tensor(all_scores, dtype=torch.float32))


def brute_force_best(
    log_probs: torch.Tensor, length: int, blank_id: int, fusion_final: Callable[[tuple], float]
) -> dict:
    """Every label sequence's exact log P_ctc (sum over all V^T alignments; tiny cases only), plus
    fusion_final(y): {y: total}. The oracle for the reference search with a beam that holds every prefix."""
    lp = log_probs.detach().double().cpu()
    V = lp.shape[-1]
    T = int(length)
    probs: dict = {}
    import itertools

    for path in itertools.product(range(V), repeat=T):
        s = sum(float(lp[t, path[t]]) for t in range(T))
        y = []
        prev = None
        for p in path:
            if p != blank_id and p != prev:
                y.append(p)
            prev = p
        y = tuple(y)
        probs[y] = _lse(probs.get(y, NEG_INF), s)
    return {y: p + fusion_final(y) for y, p in probs.items()}


# -------------------------------------------------------------------------------------------- batched search
_M1 = 0x7FB5D329728EA185
_M2 = 0x1B873593


def _mix(h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """64-bit prefix hash of (prefix hash h, token c); int64 arithmetic wraps the same on CPU and CUDA."""
    x = h * 1000003 + (c + 1) * _M2
    x = x ^ (x >> 29)
    x = x * _M1
    return x ^ (x >> 32)


def _compact_frames(log_probs: torch.Tensor, lengths: torch.Tensor, blank: int, thr: float):
    """Per row, the kept frames moved to the front, and whether a skipped run precedes each: (lp (B, T', V),
    collapse (B, T') bool, kept (B,) int64). T' = max kept frames over rows."""
    B, T, V = log_probs.shape
    dev = log_probs.device
    valid = torch.arange(T, device=dev)[None, :] < lengths.to(dev)[:, None]
    if 0 < thr < 1:
        skip = log_probs[:, :, blank].float() > math.log(thr)
    elif thr <= 0:
        skip = torch.ones((B, T), dtype=torch.bool, device=dev)
    else:
        skip = torch.zeros((B, T), dtype=torch.bool, device=dev)
    keep = valid & ~skip
    kept = keep.sum(1)
    pos = torch.cumsum(keep.to(torch.int64), 1) - 1
    # skipped frames seen before each kept frame (cumulative); a kept frame collapses when the count grew
    skipped_before = torch.cumsum((valid & skip).to(torch.int64), 1)
    Tk = int(kept.max()) if B else 0
    dst = torch.where(keep, pos, torch.full_like(pos, Tk))  # dropped frames go to a spill column
    idx = torch.full((B, Tk + 1), T - 1 if T else 0, dtype=torch.int64, device=dev)
    idx.scatter_(1, dst, torch.arange(T, device=dev)[None, :].expand(B, T).contiguous())
    idx = idx[:, :Tk]
    lp = torch.gather(log_probs, 1, idx[:, :, None].expand(B, Tk, V)) if Tk else log_probs[:, :0]
    sk = torch.zeros((B, Tk + 1), dtype=torch.int64, device=dev)
    sk.scatter_(1, dst, skipped_before)
    sk = sk[:, :Tk]
    prev = torch.cat([torch.zeros((B, 1), dtype=torch.int64, device=dev), sk[:, :-1]], 1)
    collapse = sk > prev
    return lp, collapse, kept


def ctc_lm_beam_search(
    log_probs: torch.Tensor,
    lengths: torch.Tensor,
    config: Optional[CtcLmConfig] = None,
    lm=None,
    boost: Optional[PhraseBoost] = None,
    scorer=None,
) -> CtcLmResult:
    """Batched prefix beam search with fusion on the log-probs' device (see the module docstring)."""
    config = config or CtcLmConfig()
    _check(log_probs, lengths, config)
    B, T, V = log_probs.shape
    if _use_fused(config, lm, scorer, log_probs.device):
        return _fused_search(log_probs, lengths, config, lm, boost)
    search = _search_for(config, V, lm, boost, scorer, log_probs.device)
    state = search.init_state(B)
    search.advance(state, log_probs, lengths.to(log_probs.device))
    return search.finalize(state)


# ------------------------------------------------------------------------------------------- fused kernel
def _fused_unsupported(lm, scorer) -> Optional[str]:
    """What the fused kernel does not cover (None: it covers this call)."""
    if scorer is not None:
        return "a custom scorer"
    if lm is not None and not isinstance(lm, NgramLM):
        return f"{type(lm).__name__} (the word-level LM runs on the torch path)"
    return None


# The fused kernel's gpu tests (tests/test_ctc_lm_fused.py -m gpu: equal to its CPU op, the torch path and the
# reference; block sizes; long, wide, tied and empty inputs; compute-sanitizer memcheck and racecheck) passed on the
# H200 (reports/measurements/h200_2026-12-01/gpu_check_s4/), so "auto" picks it on CUDA. Set False to make "auto"
# the torch path again (kernel="fused" still opts in).
FUSED_VERIFIED_ON_GPU = True


def _use_fused(config: CtcLmConfig, lm, scorer, device) -> bool:
    if config.kernel == "torch":
        return False
    why = _fused_unsupported(lm, scorer)
    if config.kernel == "fused":
        if why is not None:
            raise ValueError(f"kernel='fused' does not cover {why}; use kernel='auto' or 'torch'")
        return True
    return FUSED_VERIFIED_ON_GPU and why is None and torch.device(device).type == "cuda"


def _chain_csr(table: "_ChainTable", num_states: int, device) -> list[torch.Tensor]:
    """A `_ChainTable` as the kernel's per-state arc lists: row_ptr (S+1), label, weight, dest, fallback,
    fallback_w (int32 / float32; the same float32 weights the torch path reads)."""
    keys = table.keys.cpu().numpy()
    keep = keys >= 0  # PhraseBoost without phrases stores one key -1 that matches nothing
    keys = keys[keep]
    L = table.num_labels
    states = keys // L
    row_ptr = np.searchsorted(states, np.arange(num_states + 1), side="left")
    out = [row_ptr, keys - states * L, table.weights.cpu().numpy()[keep], table.dests.cpu().numpy()[keep],
           table.fallback.cpu().numpy(), table.fallback_w.cpu().numpy()]
    if num_states >= 2 ** 31 - 1 or len(keys) >= 2 ** 31:
        raise ValueError("the LM / automaton is too large for the fused kernel's 32-bit tables")
    dtypes = (torch.int32, torch.int32, torch.float32, torch.int32, torch.int32, torch.float32)
    return [torch.from_numpy(np.ascontiguousarray(a)).to(dtype=d).to(device) for a, d in zip(out, dtypes)]


def _fused_lm_tables(lm: NgramLM, device) -> list[torch.Tensor]:
    """The LM's kernel tables on `device`, built once per LM and device (the LM is immutable once built)."""
    cache = lm.__dict__.setdefault("_fused_tables", {})
    key = str(torch.device(device))
    if key not in cache:
        csr = _chain_csr(lm.table, lm.num_states, device)
        cache[key] = csr + [lm.col_label.cpu().to(torch.int32).to(device)]
    return cache[key]


def _fused_search(log_probs: torch.Tensor, lengths: torch.Tensor, config: CtcLmConfig, lm: Optional[NgramLM],
                  boost: Optional[PhraseBoost]) -> CtcLmResult:
    """`ctc_lm_beam_search` as one fused kernel launch (ctc_lm_decode): the same semantics as the torch path."""
    from decoders._ext import ops

    B, T, V = log_probs.shape
    dev = log_probs.device
    _check_scorer_vocab(lm, boost, V)
    lp = log_probs.float().contiguous()
    if bool((torch.isnan(lp) | (lp == math.inf)).any()):
        raise ValueError("log_probs contains NaN or +inf; log-probs must be finite or -inf")
    i32, f32 = torch.int32, torch.float32
    empty_i, empty_f = torch.zeros(0, dtype=i32, device=dev), torch.zeros(0, dtype=f32, device=dev)
    use_lm = lm is not None and config.lm_weight != 0
    if use_lm:
        lm_t = _fused_lm_tables(lm, dev)
        bos, eos = lm.bos_state, lm.eos_label
    else:
        lm_t = [empty_i, empty_i, empty_f, empty_i, empty_i, empty_f, empty_i]
        bos, eos = 0, 0
    if boost is not None:
        if boost.roots.numel() != B:
            raise ValueError(f"boosts: {boost.roots.numel()} rows of phrases for a batch of {B}")
        row_ptr, label, _, dest, fallback, _ = _chain_csr(boost.table, boost.num_states, dev)
        boost_t = [row_ptr, label, dest, fallback, boost.credit.to(dev, f32).contiguous(),
                   boost.out.to(dev, f32).contiguous(), boost.roots.to(dev, i32).contiguous()]
    else:
        boost_t = [empty_i, empty_i, empty_i, empty_i, empty_f, empty_f, empty_i]
    thr = float(config.blank_skip_threshold)
    skip_mode, log_thr = (1, math.log(thr)) if 0 < thr < 1 else ((2, 0.0) if thr <= 0 else (0, 0.0))
    tokens, lens, scores = ops().ctc_lm_decode(
        lp, lengths.to(dev, torch.int64).contiguous(), *lm_t, *boost_t, config.beam_size, config.blank_id,
        skip_mode, log_thr, float(config.insertion_bonus), float(config.lm_weight), bool(config.lm_eos), bos, eos,
        config.nbest, _FUSED_BLOCK_THREADS, _FUSED_REVERSE_ITEMS)
    lens_c = lens.cpu().numpy()
    toks_c = tokens.cpu().numpy()
    scores_c = scores.cpu()
    toks = [[toks_c[b, n, : lens_c[b, n]].tolist() for n in range(config.nbest)] for b in range(B)]
    return CtcLmResult(tokens=toks, scores=scores_c)


# tests: the CPU op's item order (True: last to first) and the CUDA threads per block (0: the kernel's default)
_FUSED_REVERSE_ITEMS = False
_FUSED_BLOCK_THREADS = 0


_SEARCH_CACHE: dict = {}
_SEARCH_CACHE_SIZE = 8


def _search_for(config: CtcLmConfig, V: int, lm, boost, scorer, dev) -> "_BatchedSearch":
    """A `_BatchedSearch` reused across calls with the same config, vocabulary, device and LM object (so its
    captured CUDA graphs are too); calls with boosting or a scorer (per-call tables) get a fresh one."""
    if boost is not None or scorer is not None:
        return _BatchedSearch(config, V, lm, boost, scorer, dev)
    key = (tuple(sorted(config.__dict__.items())), V, str(dev), id(lm))
    hit = _SEARCH_CACHE.get(key)
    if hit is not None and hit.lm is lm:
        return hit
    search = _BatchedSearch(config, V, lm, None, None, dev)
    if len(_SEARCH_CACHE) >= _SEARCH_CACHE_SIZE:
        _SEARCH_CACHE.pop(next(iter(_SEARCH_CACHE)))
    _SEARCH_CACHE[key] = search
    return search


@dataclass
class CtcLmStreamState:
    """A caller-owned streaming state of `CtcLmStreamingDecoder`: the beams (B, beam) with their CTC and fusion
    scores, prefix hashes, and the LM / automaton states they carry, plus the back-pointers of every decoded frame
    (the token history, read back by `finalize`)."""

    pb: torch.Tensor
    pnb: torch.Tensor
    fusion: torch.Tensor
    last: torch.Tensor
    length: torch.Tensor
    h: torch.Tensor
    ph: torch.Tensor
    states: list
    bp_src: list
    bp_tok: list
    vocab_size: int

    @property
    def batch(self) -> int:
        return int(self.pb.shape[0])


class CtcLmStreamingDecoder:
    """Streaming CTC prefix beam search with the LM and boosting: the state carries the beams' LM and automaton
    states, so decoding chunk by chunk equals decoding the whole utterance at once (tested).

        dec = CtcLmStreamingDecoder(CtcLmConfig(beam_size=10, blank_id=V - 1), lm=lm, boost=boost)
        state = dec.create_state(batch=B, vocab_size=V, device="cuda")
        for chunk in chunks:                 # (B, chunk_T, V), optional per-row valid frames
            dec.decode_chunk(state, chunk)
        result = dec.finalize(state)         # the state stays valid; more chunks may follow

    Blank skipping (`blank_skip_threshold`) applies per frame as offline; a skipped run crossing a chunk boundary
    acts as one certain blank, as offline.
    """

    def __init__(self, config: Optional[CtcLmConfig] = None, lm=None, boost: Optional[PhraseBoost] = None,
                 scorer=None):
        self.config = config or CtcLmConfig()
        self.lm, self.boost, self.scorer = lm, boost, scorer
        self._search: dict = {}

    def _s(self, vocab_size: int, device) -> "_BatchedSearch":
        key = (vocab_size, str(device))
        if key not in self._search:
            self._search[key] = _BatchedSearch(self.config, vocab_size, self.lm, self.boost, self.scorer,
                                               torch.device(device))
        return self._search[key]

    def create_state(self, batch: int, vocab_size: int, device="cpu") -> CtcLmStreamState:
        if not isinstance(batch, int) or batch < 0:
            raise ValueError(f"batch must be a non-negative int, got {batch!r}")
        if not 0 <= self.config.blank_id < vocab_size:
            raise ValueError(f"blank_id={self.config.blank_id} is outside the vocabulary [0, V={vocab_size})")
        return self._s(vocab_size, device).init_state(batch)

    def decode_chunk(self, state: CtcLmStreamState, log_probs: torch.Tensor,
                     lengths: Optional[torch.Tensor] = None) -> None:
        if not isinstance(log_probs, torch.Tensor) or log_probs.dim() != 3:
            raise ValueError(f"log_probs must be a (B, T, V) chunk, got {getattr(log_probs, 'shape', log_probs)}")
        B, T, V = log_probs.shape
        if B != state.batch or V != state.vocab_size:
            raise ValueError(f"chunk (B={B}, V={V}) does not match the state (B={state.batch}, V={state.vocab_size})")
        if lengths is None:
            lengths = torch.full((B,), T, dtype=torch.int64, device=log_probs.device)
        _check(log_probs, lengths, self.config)
        self._s(V, log_probs.device).advance(state, log_probs, lengths.to(log_probs.device))

    def finalize(self, state: CtcLmStreamState) -> CtcLmResult:
        return self._s(state.vocab_size, state.pb.device).finalize(state)


class _BatchedSearch:
    """The batched search's fixed parts (config, scorers on the device) and its three steps."""

    def __init__(self, config: CtcLmConfig, V: int, lm, boost, scorer, dev):
        _check_scorer_vocab(lm, boost, V)
        self.config, self.V, self.dev, self.lm = config, V, dev, lm
        parts = []  # (weight, scorer, skip its final score)
        if scorer is not None:
            parts.append((1.0, scorer.to(dev), False))
        else:
            if isinstance(lm, LexiconWordLM):
                parts.append((1.0, lm.to(dev), False))
            elif lm is not None and config.lm_weight != 0:
                parts.append((float(config.lm_weight), lm.to(dev), not config.lm_eos))
            if boost is not None:
                parts.append((1.0, boost.to(dev), False))
        self.parts = parts
        self._graphs: dict = {}
        self._graphs_failed = False
        self._fp: tuple = ()

    def init_state(self, B: int) -> CtcLmStreamState:
        K, dev = self.config.beam_size, self.dev
        f32 = torch.float32
        pb = torch.full((B, K), NEG_INF, dtype=f32, device=dev)
        pb[:, 0] = 0.0
        return CtcLmStreamState(
            pb=pb, pnb=torch.full((B, K), NEG_INF, dtype=f32, device=dev),
            fusion=torch.zeros((B, K), dtype=f32, device=dev),
            last=torch.full((B, K), -1, dtype=torch.int64, device=dev),
            length=torch.zeros((B, K), dtype=torch.int64, device=dev),
            h=torch.zeros((B, K), dtype=torch.int64, device=dev),
            ph=torch.full((B, K), -1, dtype=torch.int64, device=dev),  # parent hash (unused for the empty prefix)
            states=[sc.initial_states(B, dev)[:, None].expand(B, K).contiguous() for _, sc, _ in self.parts],
            bp_src=[], bp_tok=[], vocab_size=self.V)

    def _fingerprint(self) -> tuple:
        """Addresses of every scorer table: a captured graph reads them, so a scorer moved (shared LM objects move
        to the device of the search using them) invalidates the graphs."""
        ptrs = []
        for _, sc, _ in self.parts:
            for obj in (sc, getattr(sc, "table", None), getattr(sc, "lm", None), getattr(getattr(sc, "lm", None),
                                                                                         "table", None)):
                if obj is None:
                    continue
                ptrs += [v.data_ptr() for v in vars(obj).values() if isinstance(v, torch.Tensor)]
        return tuple(ptrs)

    def advance(self, st: CtcLmStreamState, log_probs: torch.Tensor, lengths: torch.Tensor) -> None:
        config = self.config
        for _, sc, _ in self.parts:  # a shared scorer may have been moved by another search
            sc.to(self.dev)
        fp = self._fingerprint()
        if fp != self._fp:
            self._graphs.clear()
            self._fp = fp
        B, T, V = log_probs.shape
        dev = self.dev
        K = config.beam_size
        blank = config.blank_id
        lp_all = log_probs.float()
        if bool(torch.isnan(lp_all).any()) or bool((lp_all == math.inf).any()):
            raise ValueError("log_probs contains NaN or +inf; log-probs must be finite or -inf")
        lp, collapse, kept = _compact_frames(lp_all, lengths, blank, float(config.blank_skip_threshold))
        Tk = lp.shape[1]
        ninf = torch.tensor(NEG_INF, dtype=torch.float32, device=dev)
        pb, pnb, fusion, last, length, h, ph, states = (st.pb, st.pnb, st.fusion, st.last, st.length, st.h, st.ph,
                                                        st.states)
        bp_src = torch.zeros((B, Tk, K), dtype=torch.int64, device=dev)
        bp_tok = torch.full((B, Tk, K), -1, dtype=torch.int64, device=dev)
        beams = (pb, pnb, fusion, last, length, h, ph, *states)
        graphed = False
        if self._graph_mode(dev) and Tk > 0 and B > 0:
            try:
                beams = self._run_graphed(beams, lp, collapse, kept, bp_src, bp_tok, capture=dev.type == "cuda")
                graphed = True
            except RuntimeError as err:  # capture failed before any replay: the inputs are untouched
                import warnings

                self._graphs_failed = True
                warnings.warn(f"ctc_lm: CUDA graph capture failed ({str(err).splitlines()[0][:200]}); "
                              "decoding with eager launches", stacklevel=2)
        if not graphed:
            for t in range(Tk):
                beams, src, tok = self._step(beams, lp[:, t], collapse[:, t], t < kept)
                bp_src[:, t] = src
                bp_tok[:, t] = tok
        pb, pnb, fusion, last, length, h, ph, *states = beams
        # skipped frames after a row's last kept frame: the certain blank (matters when more chunks follow)
        valid = torch.arange(T, device=dev)[None, :] < lengths[:, None]
        frame = torch.arange(T, device=dev)[None, :].expand(B, T)
        idx_last = torch.where(valid, frame, torch.full_like(frame, -1))
        last_valid = idx_last.max(1).values if T else torch.full((B,), -1, dtype=torch.int64, device=dev)
        if T:
            thr = float(config.blank_skip_threshold)
            skip_t = (lp_all[:, :, blank] > math.log(thr)) if 0 < thr < 1 else torch.full(
                (B, T), thr <= 0, dtype=torch.bool, device=dev)
            tail = (last_valid >= 0) & torch.gather(skip_t, 1, last_valid.clamp(min=0)[:, None])[:, 0]
            pb = torch.where(tail[:, None], torch.logaddexp(pb, pnb), pb)
            pnb = torch.where(tail[:, None], ninf, pnb)
        st.pb, st.pnb, st.fusion, st.last, st.length, st.h, st.ph, st.states = (pb, pnb, fusion, last, length, h, ph,
                                                                                states)
        if Tk:
            st.bp_src.append(bp_src)
            st.bp_tok.append(bp_tok)

    def _step(self, beams: tuple, x: torch.Tensor, col: torch.Tensor, active: torch.Tensor):
        """One kept frame: beams -> beams, back-pointers (src, tok). x (B, V) log-probs, col (B,) collapse first
        (a skipped run precedes), active (B,) the row has this frame. No host synchronisation (CUDA-graph safe)."""
        config = self.config
        pb, pnb, fusion, last, length, h, ph, *states = beams
        B, V = x.shape
        K = config.beam_size
        dev = x.device
        blank = config.blank_id
        f32 = torch.float32
        ninf = torch.full((), NEG_INF, dtype=f32, device=dev)
        cols = torch.arange(V, device=dev)
        not_blank = cols != blank
        ar_k = torch.arange(K, device=dev)
        bonus = float(config.insertion_bonus)
        active = active[:, None]
        col = col[:, None]
        pb = torch.where(col, torch.logaddexp(pb, pnb), pb)
        pnb = torch.where(col, ninf, pnb)
        tot = torch.logaddexp(pb, pnb)  # (B, K)
        s_pb = tot + x[:, blank][:, None]
        x_last = torch.gather(x, 1, last.clamp(min=0))
        s_pnb = torch.where(last >= 0, pnb + x_last, ninf)
        # extensions (B, K, V)
        is_last = cols[None, None, :] == last[:, :, None]
        e_pnb = torch.where(is_last, pb[:, :, None], tot[:, :, None]) + x[:, None, :]
        e_pnb = torch.where(not_blank[None, None, :], e_pnb, ninf)
        delta = torch.full((B, K, V), bonus, dtype=f32, device=dev)
        nexts = []
        for (w, sc, _), s_ in zip(self.parts, states):
            sw, sd = sc.advance(s_.reshape(-1))
            delta = delta + w * sw.view(B, K, V)
            nexts.append(sd.view(B, K, V))
        # merge: extension (i, c) == beam j  when ph[j] == h[i], last[j] == c, length[j] == length[i] + 1
        alive = tot > NEG_INF
        match = ((ph[:, None, :] == h[:, :, None]) & (length[:, None, :] == length[:, :, None] + 1)
                 & alive[:, :, None] & alive[:, None, :] & (last[:, None, :] >= 0))  # (B, Ki, Kj)
        lastj = last.clamp(min=0)[:, None, :].expand(B, K, K)
        contrib = torch.gather(e_pnb, 2, lastj)  # (B, Ki, Kj): e_pnb[i, last_j]
        contrib = torch.where(match, contrib, ninf)
        s_pnb = torch.logaddexp(s_pnb, torch.logsumexp(contrib, dim=1))
        # the merged extensions leave the candidate list
        merged = torch.zeros((B, K, V), dtype=torch.int64, device=dev).scatter_add_(
            2, lastj, match.to(torch.int64)) > 0
        e_pnb = torch.where(merged, ninf, e_pnb)
        stay_score = torch.logaddexp(s_pb, s_pnb) + fusion
        ext_score = e_pnb + fusion[:, :, None] + delta
        cand = torch.cat([stay_score, ext_score.reshape(B, K * V)], 1)
        top, idx = torch.topk(cand, K, dim=1)
        is_ext = idx >= K
        src = torch.where(is_ext, (idx - K) // V, idx)
        tok = torch.where(is_ext, (idx - K) % V, torch.full_like(idx, -1))
        g = lambda a: torch.gather(a, 1, src)  # noqa: E731
        tokc = tok.clamp(min=0)
        flat = src * V + tokc
        n_pb = torch.where(is_ext, ninf, g(s_pb))
        n_pnb = torch.where(is_ext, torch.gather(e_pnb.reshape(B, K * V), 1, flat), g(s_pnb))
        n_fusion = torch.where(is_ext, g(fusion) + torch.gather(delta.reshape(B, K * V), 1, flat), g(fusion))
        n_last = torch.where(is_ext, tok, g(last))
        n_len = g(length) + is_ext.to(torch.int64)
        n_h = torch.where(is_ext, _mix(g(h), tokc), g(h))
        n_ph = torch.where(is_ext, g(h), g(ph))
        n_states = [torch.where(is_ext, torch.gather(nx.reshape(B, K * V), 1, flat), g(s_))
                    for nx, s_ in zip(nexts, states)]
        dead = top == NEG_INF  # no candidate, or one the lexicon forbids
        n_pb = torch.where(dead, ninf, n_pb)
        n_pnb = torch.where(dead, ninf, n_pnb)
        # rows past their kept frames keep their beams
        new = tuple(torch.where(active, n, o) for n, o in zip(
            (n_pb, n_pnb, n_fusion, n_last, n_len, n_h, n_ph, *n_states),
            (pb, pnb, fusion, last, length, h, ph, *states)))
        out_src = torch.where(active, src, ar_k[None, :])
        out_tok = torch.where(active & ~dead, tok, torch.full_like(tok, -1))
        return new, out_src, out_tok

    def _graph_mode(self, dev) -> bool:
        return bool(self.config.cuda_graphs) and dev.type == "cuda" and not self._graphs_failed

    def _run_graphed(self, beams: tuple, lp, collapse, kept, bp_src, bp_tok, capture: bool = True) -> tuple:
        """The frame loop as one captured CUDA graph of `_step`, replayed once per kept frame (the frame index
        lives on the device and the graph advances it), so a frame costs one graph launch instead of ~70 kernel
        launches from Python. Graphs are cached per (B, capacity); inputs are copied into static buffers."""
        B, Tk, V = lp.shape
        K = self.config.beam_size
        cap = 1 << max(Tk - 1, 0).bit_length()  # capacity: next power of two, so few captures
        key = (B, cap)
        if key not in self._graphs:
            dev = lp.device
            static = {
                "lp": torch.zeros((B, cap, V), dtype=torch.float32, device=dev),
                "collapse": torch.zeros((B, cap), dtype=torch.bool, device=dev),
                "kept": torch.zeros((B,), dtype=torch.int64, device=dev),
                "t": torch.zeros((), dtype=torch.int64, device=dev),
                "beams": tuple(b.clone() for b in beams),
                "bp_src": torch.zeros((B, cap, K), dtype=torch.int64, device=dev),
                "bp_tok": torch.zeros((B, cap, K), dtype=torch.int64, device=dev),
            }

            def body():
                t = static["t"]
                x = static["lp"].index_select(1, t.view(1))[:, 0]
                col = static["collapse"].index_select(1, t.view(1))[:, 0]
                new, src, tok = self._step(static["beams"], x, col, t < static["kept"])
                for dst, v in zip(static["beams"], new):
                    dst.copy_(v)
                static["bp_src"].index_copy_(1, t.view(1), src[:, None])
                static["bp_tok"].index_copy_(1, t.view(1), tok[:, None])
                t.add_(1)

            if capture:
                saved = tuple(b.clone() for b in static["beams"])
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):  # warm-up outside capture (allocator, library handles)
                    body()
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    body()
                for dst, v in zip(static["beams"], saved):
                    dst.copy_(v)
                replay = graph.replay
            else:  # the same static-buffer program run eagerly (tests it on the CPU)
                replay = body
            self._graphs[key] = (replay, static)
        replay, static = self._graphs[key]
        static["lp"][:, :Tk].copy_(lp)
        static["collapse"][:, :Tk].copy_(collapse)
        static["kept"].copy_(kept)
        static["t"].zero_()
        for dst, v in zip(static["beams"], beams):
            dst.copy_(v)
        for _ in range(Tk):
            replay()
        bp_src.copy_(static["bp_src"][:, :Tk])
        bp_tok.copy_(static["bp_tok"][:, :Tk])
        return tuple(b.clone() for b in static["beams"])

    def finalize(self, st: CtcLmStreamState) -> CtcLmResult:
        B, K = st.pb.shape
        dev = self.dev
        ninf = torch.tensor(NEG_INF, dtype=torch.float32, device=dev)
        tot = torch.logaddexp(st.pb, st.pnb)
        final = tot + st.fusion
        for (w, sc, skip_final), s_ in zip(self.parts, st.states):
            if not skip_final:
                final = final + w * sc.final(s_.reshape(-1)).view(B, K)
        final = torch.where(tot > NEG_INF, final, ninf)
        nb = self.config.nbest
        scores, slot = torch.topk(final, nb, dim=1)
        bp_src = torch.cat(st.bp_src, 1) if st.bp_src else torch.zeros((B, 0, K), dtype=torch.int64, device=dev)
        bp_tok = torch.cat(st.bp_tok, 1) if st.bp_tok else torch.zeros((B, 0, K), dtype=torch.int64, device=dev)
        Tk = bp_src.shape[1]
        out = torch.full((B, nb, max(Tk, 1)), -1, dtype=torch.int64, device=dev)
        cur = slot
        for t in range(Tk - 1, -1, -1):
            out[:, :, t] = torch.gather(bp_tok[:, t], 1, cur)
            cur = torch.gather(bp_src[:, t], 1, cur)
        out_c = out.cpu().tolist()
        scores_c = scores.float().cpu()
        toks = [[[c for c in out_c[b][n] if c >= 0] if scores_c[b, n] > NEG_INF else [] for n in range(nb)]
                for b in range(B)]
        return CtcLmResult(tokens=toks, scores=scores_c)
