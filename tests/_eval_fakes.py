"""A tiny fake workload + acoustic source for the harness tests (no dependency on recipes' generator).

Characters, blank first; every token is one confident spike frame followed by a blank frame. In the
"other" set, the first letter of every third word is corrupted (the spike prefers a wrong letter, the
right one is second best), so greedy makes word errors that a lexicon + LM decoder can repair.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eval.acoustic.base import AcousticBatch
from eval.acoustic.simulator import pad_log_probs
from recipes.tokens import TokenSet

WORDS = ["cat", "dog", "sat", "on", "the", "mat", "a", "big", "red", "hat", "ran", "far"]
SENTENCES = {
    "clean": ["the cat sat on the mat", "a big dog ran far", "the red hat", "a cat", "dog sat on a mat"],
    "other": ["the dog sat on a red mat", "a big cat ran", "the hat", "far ran the dog", "a red cat sat"],
}
FRAME_SHIFT_S = 0.04


def write_arpa(path: Path, words: list[str]) -> None:
    """A valid bigram ARPA: uniform unigrams, uniform <s> -> word bigrams."""
    vocab = words + ["</s>", "<unk>"]
    p_uni = math.log10(1.0 / len(vocab))
    p_bi = math.log10(1.0 / len(words))
    lines = ["\\data\\", f"ngram 1={len(vocab) + 1}", f"ngram 2={len(words)}", "", "\\1-grams:"]
    lines.append(f"-99\t<s>\t{math.log10(0.5):.6f}")
    lines += [f"{p_uni:.6f}\t{w}\t0" for w in vocab]
    lines += ["", "\\2-grams:"] + [f"{p_bi:.6f}\t<s> {w}" for w in words] + ["", "\\end\\", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


@dataclass
class FakeWorkload:
    root: Path
    scale: str = "tiny"
    sets: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)

    def __post_init__(self):
        self.root.mkdir(parents=True, exist_ok=True)
        self.words_path = self.root / "words.txt"
        self.words_path.write_text("".join(f"{w} {100 - i}\n" for i, w in enumerate(WORDS)), encoding="utf-8")
        self.arpa_path = self.root / "lm.arpa"
        write_arpa(self.arpa_path, WORDS)
        self.corpus_path = None
        self.bpe_model_path = None
        tokens = self.token_set("char", "first")
        for name, sents in SENTENCES.items():
            path = self.root / f"{name}.jsonl"
            with open(path, "w", encoding="utf-8") as f:
                for i, s in enumerate(sents):
                    frames = 2 * len(tokens.encode(s)) + 2
                    f.write(json.dumps({"id": f"{name}-{i}", "text": s, "duration": frames * FRAME_SHIFT_S,
                                        "audio_filepath": f"{name}-{i}.wav"}) + "\n")
            self.sets[name] = path

    def token_set(self, kind="char", blank="first") -> TokenSet:
        return TokenSet.from_chars([" "] + [chr(c) for c in range(97, 123)] + ["'"], blank=blank)

    def simulator_config(self, set_name):
        return {"corrupt": set_name == "other"}


def fake_log_probs(text: str, tokens: TokenSet, corrupt: bool) -> np.ndarray:
    """(T, V) log-probs: spike + blank per token, blank padding frame at both ends."""
    cols = tokens.encode(text)
    vocab = tokens.vocab_size
    frames = 2 * len(cols) + 2
    probs = np.full((frames, vocab), 1e-4, dtype=np.float64)
    probs[:, tokens.blank_id] = 1.0
    word_idx, at_word_start = 0, True
    for i, c in enumerate(cols):
        t = 1 + 2 * i
        probs[t, tokens.blank_id] = 1e-3
        if tokens.tokens[c] == " ":
            word_idx += 1
            at_word_start = True
            probs[t, c] = 1.0
            continue
        if corrupt and at_word_start and word_idx % 3 == 0:
            wrong = tokens.tokens.index("q") if tokens.tokens[c] != "q" else tokens.tokens.index("z")
            probs[t, wrong], probs[t, c] = 0.55, 0.4
        else:
            probs[t, c] = 1.0
        at_word_start = False
    probs /= probs.sum(axis=1, keepdims=True)
    return np.log(probs).astype(np.float32)


class FakeSource:
    frame_shift_s = FRAME_SHIFT_S

    def __init__(self, tokens: TokenSet, corrupt: bool):
        self.tokens, self.corrupt = tokens, corrupt

    def batches(self, utterances, batch_size):
        for i in range(0, len(utterances), batch_size):
            chunk = utterances[i : i + batch_size]
            t0 = time.perf_counter()
            arrays = [fake_log_probs(u.text, self.tokens, self.corrupt) for u in chunk]
            lp, lengths = pad_log_probs(arrays, self.tokens.blank_id)
            yield AcousticBatch(list(chunk), lp, lengths, acoustic_seconds=time.perf_counter() - t0)


def fake_source_factory(cfg, *, dataset, workload, tokens):
    return FakeSource(tokens, corrupt=workload.simulator_config(dataset)["corrupt"])
