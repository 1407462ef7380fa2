"""The CTC topologies accept exactly what their definitions say (3-token vocabulary, all frame strings up
to length 5), and the one column <-> label mapping is what every consumer reads."""
import itertools

import numpy as np
import pytest

from recipes.graphs.fstutil import fst_to_arrays
from recipes.graphs.symbols import TokenTable, column_of_kaldi_token, kaldi_token_id
from recipes.graphs.topologies import TOPOLOGIES, build_topology, ctc_collapse, topology_outputs
from recipes.tokens import TokenSet


def _outputs(arr, frames):
    """All output label sequences of paths reading `frames` (epsilon arcs allowed), ending final."""
    by_src = {}
    for a in range(arr.num_arcs):
        by_src.setdefault(int(arr.src[a]), []).append(a)
    results = set()
    stack = [(arr.start, 0, ())]
    seen = set()
    while stack:
        s, t, out = stack.pop()
        if (s, t, out) in seen:
            continue
        seen.add((s, t, out))
        if t == len(frames) and np.isfinite(arr.final[s]):
            results.add(out)
        for a in by_src.get(s, []):
            il, ol, d = int(arr.ilabel[a]), int(arr.olabel[a]), int(arr.dest[a])
            nout = out + ((ol,) if ol else ())
            if il == 0:
                stack.append((d, t, nout))
            elif t < len(frames) and il == frames[t]:
                stack.append((d, t + 1, nout))
    return results


@pytest.mark.parametrize("blank", ["first", "last"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_topology_matches_definition(topology, blank):
    # 3 non-blank tokens + blank; no space token for this check
    tokens = TokenSet(tokens=["<blk>", "a", "b", "c"] if blank == "first" else ["a", "b", "c", "<blk>"],
                      blank_id=0 if blank == "first" else 3, kind="char")
    table = TokenTable(tokens, num_disambig=0)
    arr = fst_to_arrays(build_topology(topology, table, with_disambig=False))
    labels = [kaldi_token_id(c) for c in range(4)]
    blank_label = table.blank_label
    checked = 0
    for n in range(0, 6):
        for frames in itertools.product(labels, repeat=n):
            got = _outputs(arr, frames)
            want = topology_outputs(topology, frames, blank_label)
            assert got == want, (topology, frames, got, want)
            checked += 1
    assert checked == sum(4 ** n for n in range(6))


def test_reference_semantics_differ_where_documented():
    a, blk = 1, 0
    frames = (a, a, blk, a)
    assert topology_outputs("normal", frames, blk) == {(a, a)}
    assert topology_outputs("compact", frames, blk) == {(a, a), (a, a, a)}  # repeats without blank
    assert topology_outputs("minimal", frames, blk) == {(a, a, a)}  # one frame per token
    assert ctc_collapse([a, a, blk, blk, a, 2, 2], blk) == (a, a, 2)


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_disambig_loops_on_every_boundary_state(topology):
    """Regression (Riva's ctc topology lacks #k loops on its start state, so an utterance cannot start
    with an LM back-off): every state where a token boundary can be carries eps:#k for every k."""
    tokens = TokenSet.from_chars(["a", "b"], blank="last")
    table = TokenTable(tokens, num_disambig=3)
    arr = fst_to_arrays(build_topology(topology, table, with_disambig=True))
    loops = {(int(s), int(o)) for s, d, i, o in zip(arr.src, arr.dest, arr.ilabel, arr.olabel) if i == 0 and s == d and o}
    boundary = range(arr.num_states) if topology == "normal" else [0]
    for s in boundary:
        for lab in table.disambig_labels:
            assert (s, lab) in loops
    assert arr.start == 0 and (0, table.disambig_label(0)) in loops


def test_one_mapping_column_label():
    tokens = TokenSet.from_chars(["a", "b"], blank="last")  # [" ", a, b, <blk>]
    table = TokenTable(tokens, num_disambig=2)
    for c in range(tokens.vocab_size):
        assert column_of_kaldi_token(kaldi_token_id(c)) == c
        assert table.symbols()[kaldi_token_id(c)] in (tokens.tokens[c], "<space>")
    assert table.blank_label == tokens.vocab_size  # blank last -> last token id, before #0
    assert table.symbols()[table.disambig_label(0)] == "#0"
    assert table.first_disambig_label == tokens.vocab_size + 1
    with pytest.raises(ValueError, match="epsilon"):
        column_of_kaldi_token(0)
