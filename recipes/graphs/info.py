"""Graph reports: how far left word labels sit, and size tables."""
from __future__ import annotations

import numpy as np

from recipes.lexicon import read_lexicon


def word_label_positions(LG, table, words: list, lexicon_path, num_paths: int = 300, seed: int = 0) -> dict:
    """Sample random paths through LG (token level); for every word output, measure at which token of the
    word's spelling its label was emitted (0 = on its first token: as early as possible; k = k tokens late;
    negative = before the word's first token, i.e. pushed into the previous word).

    Word boundaries on a path are recovered from the emitted word sequence and the lexicon spellings (word i
    spans tokens [sum of earlier spelling lengths, + its own length)); char word separators and #k are skipped.
    Returns mean/max/histogram of the offset (the paper's word-boosting limitation 3 wants offsets near 0)."""
    from recipes.graphs.fstutil import fst_to_arrays

    a = LG if hasattr(LG, "src") else fst_to_arrays(LG)
    lex = read_lexicon(lexicon_path)
    rng = np.random.default_rng(seed)
    order = np.argsort(a.src, kind="stable")
    rs = np.zeros(a.num_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(a.src, minlength=a.num_states), out=rs[1:])
    V = table.vocab_size
    space = table.tokens._index.get(" ")
    space_label = None if space is None else space + 1
    offsets = []
    for _ in range(num_paths):
        s = a.start
        n_tok = 0
        outs = []
        for _step in range(400):
            lo, hi = int(rs[s]), int(rs[s + 1])
            if np.isfinite(a.final[s]) and (hi == lo or rng.random() < 0.1):
                break
            if hi == lo:
                break
            arc = int(order[int(rng.integers(lo, hi))])
            lab = int(a.ilabel[arc])
            if 0 < lab <= V and lab != space_label:
                n_tok += 1
            w = int(a.olabel[arc])
            if 0 < w < len(words):
                outs.append((words[w], n_tok))
            s = int(a.dest[arc])
        start = 0
        for w, pos in outs:
            spell = lex.get(w)
            if not spell:
                break
            offsets.append(pos - 1 - start)  # emitted on the word's first token -> pos == start + 1
            start += len([t for t in spell[0] if t != " "])
    if not offsets:
        return {"num_words": 0}
    off = np.asarray(offsets)
    vals, counts = np.unique(np.clip(off, -5, 10), return_counts=True)
    return {"num_words": int(off.size), "mean_offset_tokens": float(off.mean()), "max_offset_tokens": int(off.max()),
            "fraction_on_first_token_or_earlier": float(np.mean(off <= 0)),
            "histogram": {int(v): int(c) for v, c in zip(vals, counts)}}


def size_table(infos: dict) -> str:
    """Markdown table of graph sizes from {(scale, token dir, topology): graph_info}."""
    rows = ["| scale | tokens | topology | kind | states | arcs | eps arcs | multi-word arcs | build s |",
            "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for (scale, tok, topo), info in sorted(infos.items()):
        for kind in ("TLG", "HLG"):
            k = info[kind]
            if "skipped" in k:
                rows.append(f"| {scale} | {tok} | {topo} | {kind} | - | ~{k.get('estimated_arcs')} (not built) | - | - | - |")
                continue
            rows.append(f"| {scale} | {tok} | {topo} | {kind} | {k['states']} | {k['arcs']} | {k['epsilon_arcs']} | "
                        f"{k['multiword_arcs']} | {k['build_s']:.2f} |")
    return "\n".join(rows)
