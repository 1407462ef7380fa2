"""`WfstGraph`: the decoding graph as the WFST decoder sees it (in memory and as a binary image).

Conventions (fixed; every importer/exporter maps into them):
- Scores are log-domain, higher is better (k2's convention). OpenFst tropical costs are negated on import.
- `ilabel[a]` is the log-prob COLUMN the arc reads (0 <= ilabel < num_tokens), or
  `EPSILON` (-2) for an arc that consumes no frame (TLG epsilons), or `FINAL` (-1) for an arc into the
  single final state (k2: "label -1 enters the final state"; it carries the state's final weight).
- `olabel[a]` is the word id output by the arc, 0 meaning no word (epsilon). `words[i]` is its string.
- Arcs are stored CSR by source state in a canonical order: per state, emitting arcs (sorted by ilabel,
  then dest), then epsilon arcs, then final arcs. `row_splits` has num_states + 1 entries.
- `final_state` has no out-arcs; it is the only state FINAL arcs enter, and only FINAL arcs enter it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

FINAL = -1
EPSILON = -2


@dataclass
class WfstGraph:
    num_states: int
    start_state: int
    final_state: int
    num_tokens: int  # V: number of log-prob columns the graph reads
    row_splits: np.ndarray  # int32 (num_states + 1,)
    dest: np.ndarray  # int32 (num_arcs,)
    ilabel: np.ndarray  # int32 (num_arcs,): column, EPSILON or FINAL
    olabel: np.ndarray  # int32 (num_arcs,): word id, 0 = none
    weight: np.ndarray  # float32 (num_arcs,): log-domain score
    words: Optional[list[str]] = None  # word id -> string (id 0 = "<eps>")
    info: dict = field(default_factory=dict)  # provenance (topology, kind, build info)

    @property
    def num_arcs(self) -> int:
        return int(self.dest.shape[0])

    @property
    def num_epsilon_arcs(self) -> int:
        return int(np.count_nonzero(self.ilabel == EPSILON))

    @classmethod
    def from_arcs(
        cls,
        src,
        dest,
        ilabel,
        olabel,
        weight,
        *,
        num_states: int,
        start_state: int,
        final_state: int,
        num_tokens: int,
        words: Optional[list[str]] = None,
        info: Optional[dict] = None,
    ) -> "WfstGraph":
        """Build from an unordered arc list, putting arcs into the canonical CSR order."""
        src = np.asarray(src, dtype=np.int64)
        dest = np.asarray(dest, dtype=np.int32)
        ilabel = np.asarray(ilabel, dtype=np.int32)
        olabel = np.asarray(olabel, dtype=np.int32)
        weight = np.asarray(weight, dtype=np.float32)
        n = src.shape[0]
        if not (dest.shape[0] == ilabel.shape[0] == olabel.shape[0] == weight.shape[0] == n):
            raise ValueError("from_arcs: src, dest, ilabel, olabel and weight must have the same length")
        if n and (src.min() < 0 or src.max() >= num_states):
            raise ValueError(f"from_arcs: source state out of range [0, {num_states})")
        # group: 0 emitting, 1 epsilon, 2 final
        group = np.where(ilabel >= 0, 0, np.where(ilabel == EPSILON, 1, 2))
        order = np.lexsort((dest, ilabel, group, src))
        counts = np.bincount(src, minlength=num_states)
        row_splits = np.zeros(num_states + 1, dtype=np.int64)
        np.cumsum(counts, out=row_splits[1:])
        graph = cls(
            num_states=int(num_states),
            start_state=int(start_state),
            final_state=int(final_state),
            num_tokens=int(num_tokens),
            row_splits=row_splits.astype(np.int32),
            dest=dest[order],
            ilabel=ilabel[order],
            olabel=olabel[order],
            weight=weight[order],
            words=words,
            info=dict(info or {}),
        )
        return graph
