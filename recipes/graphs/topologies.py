"""CTC token topologies (the T / H of TLG / HLG) as kaldifst transducers.

Input labels are network frame labels, output labels are emitted tokens, both in the Kaldi numbering of
`recipes.graphs.symbols` (column + 1; `<eps>` = 0). Three topologies:

- `normal` (the standard CTC topology; "default"/"vanilla"/"ctc" elsewhere): one state for blank (start)
  and one per token; a token state absorbs repeats of its token and leaves on blank or on a different token.
  Output = the CTC collapse of the frame labels (merge repeats, drop blanks). O(V^2) arcs.
- `compact` (Riva / NeMo "compact", paper §compact vs normal): blank state 0 plus one state per token with
  a self-loop and an epsilon back to state 0. O(V) arcs. It accepts a SUPERSET of CTC: a run of n frames of
  token t may emit t between 1 and n times (repeats without a blank in between, k2's "modified" CTC).
- `minimal`: one state; blank:eps and t:t self-loops. A token occupies EXACTLY ONE frame (every non-blank
  frame emits); compare it only on inputs that never hold a token for several frames.

Disambiguation pass-through (TLG only, `num_disambig > 0`): `eps:#k` self-loops so that the `#k` input
labels of LG are consumed without reading a frame. They sit on EVERY state where a token boundary can be
(all states for `normal`, the blank state for `compact`/`minimal`, whose token states return to it by
epsilon). Riva's own `ctc` topology omits them on its start state, so an utterance cannot begin with an LM
back-off arc there; ours has them (tested: utterances that start and end with back-off arcs decode).

Final states: `normal` every state; `compact`/`minimal` the blank state (token states reach it by epsilon).
With `final_label` set (HLG construction), finality is instead an explicit arc `final_label:final_label`
into one extra final state, so that LG's explicit final arcs (which may carry words) compose through.
"""
from __future__ import annotations

from typing import Literal, Optional

import kaldifst
import numpy as np

from recipes.graphs.fstutil import FstArrays, arrays_to_fst
from recipes.graphs.symbols import TokenTable

Topology = Literal["normal", "compact", "minimal"]
TOPOLOGIES: tuple[str, ...] = ("normal", "compact", "minimal")


def topology_arrays(
    topology: str,
    table: TokenTable,
    *,
    with_disambig: bool,
    final_label: Optional[int] = None,
) -> FstArrays:
    """The topology as arrays (see module docstring). State 0 is the start (blank) state."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology must be one of {TOPOLOGIES}, got {topology!r}")
    blank = table.blank_label
    toks = table.non_blank_labels
    arcs: list[tuple[int, int, int, int]] = []  # (src, dest, ilabel, olabel)
    if topology == "normal":
        num_states = 1 + len(toks)
        state_of = {t: i + 1 for i, t in enumerate(toks)}
        arcs.append((0, 0, blank, 0))
        for t in toks:
            arcs.append((0, state_of[t], t, t))
        for t in toks:
            s = state_of[t]
            arcs.append((s, s, t, 0))
            arcs.append((s, 0, blank, 0))
            for u in toks:
                if u != t:
                    arcs.append((s, state_of[u], u, u))
        finals = list(range(num_states))
        boundary_states = list(range(num_states))
    elif topology == "compact":
        num_states = 1 + len(toks)
        arcs.append((0, 0, blank, 0))
        for i, t in enumerate(toks):
            s = i + 1
            arcs.append((0, s, t, t))
            arcs.append((s, s, t, 0))
            arcs.append((s, 0, 0, 0))
        finals = [0]
        boundary_states = [0]
    else:  # minimal
        num_states = 1
        arcs.append((0, 0, blank, 0))
        for t in toks:
            arcs.append((0, 0, t, t))
        finals = [0]
        boundary_states = [0]
    if with_disambig:
        for s in boundary_states:
            for d in table.disambig_labels:
                arcs.append((s, s, 0, d))
    final = np.full(num_states, np.inf, dtype=np.float32)
    if final_label is not None:
        fstate = num_states
        num_states += 1
        for s in finals:
            arcs.append((s, fstate, final_label, final_label))
        final = np.full(num_states, np.inf, dtype=np.float32)
        final[fstate] = 0.0
    else:
        final[finals] = 0.0
    a = np.asarray(arcs, dtype=np.int32).reshape(-1, 4)
    return FstArrays(
        start=0,
        num_states=num_states,
        src=a[:, 0].copy(),
        dest=a[:, 1].copy(),
        ilabel=a[:, 2].copy(),
        olabel=a[:, 3].copy(),
        cost=np.zeros(a.shape[0], dtype=np.float32),
        final=final,
    )


def build_topology(
    topology: str,
    table: TokenTable,
    *,
    with_disambig: bool = True,
    final_label: Optional[int] = None,
) -> "kaldifst.StdVectorFst":
    """The topology FST, output-label sorted (ready to be the left operand of a composition)."""
    fst = arrays_to_fst(topology_arrays(topology, table, with_disambig=with_disambig, final_label=final_label))
    kaldifst.arcsort(fst, sort_type="olabel")
    return fst


def ctc_collapse(frames, blank: int) -> tuple:
    """The CTC rule: merge repeated labels, then drop blanks (the `normal` topology's function)."""
    out = []
    prev = None
    for f in frames:
        if f != prev and f != blank:
            out.append(f)
        prev = f
    return tuple(out)


def topology_outputs(topology: str, frames, blank: int) -> set:
    """Reference semantics: every output token sequence the topology relates to the frame sequence
    (written from the definitions above, independently of the FST, for tests)."""
    frames = list(frames)
    if topology == "normal":
        return {ctc_collapse(frames, blank)}
    if topology == "minimal":
        return {tuple(f for f in frames if f != blank)}
    if topology == "compact":
        # split into runs of equal labels; a token run of length n may emit 1..n copies
        runs = []
        for f in frames:
            if runs and runs[-1][0] == f:
                runs[-1][1] += 1
            else:
                runs.append([f, 1])
        outs = {()}
        for lab, n in runs:
            if lab == blank:
                continue
            outs = {o + (lab,) * k for o in outs for k in range(1, n + 1)}
        return outs
    raise ValueError(f"topology must be one of {TOPOLOGIES}, got {topology!r}")
