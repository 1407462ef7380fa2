"""The CUDA kernels' graph layout (decoders/wfst.py device_graph_arrays, wfst::DeviceGraph): int16 ilabel and the
word-arc index in place of the per-arc word CSR must describe exactly the graph the CPU reference reads. Checked here
by decoding the index the way the kernels do (wfst::arc_word_range: block bit mask, count before the block, popcount);
tests/test_wfst_gpu.py runs the kernels on it."""
from __future__ import annotations

import numpy as np
import pytest

from decoders.wfst import _graph_arrays, _MAX_DEVICE_TOKENS, device_graph_arrays
from wfst_testlib import random_graph, with_multiword_arcs


def _arc_words(dev: dict, a: int) -> list[int]:
    """wfst::arc_word_range, restated: the words of arc `a` from the device layout."""
    index = dev["aux_splits"]
    blocks = (dev["dest"].shape[0] + 31) // 32
    bits, before = int(index[2 * (a >> 5)]) & 0xFFFFFFFF, int(index[2 * (a >> 5) + 1])
    bit = 1 << (a & 31)
    if not bits & bit:
        return []
    r = before + bin(bits & (bit - 1)).count("1")
    splits = index[2 * blocks:]
    return [int(w) for w in dev["aux_words"][splits[r]: splits[r + 1]]]


@pytest.mark.parametrize("seed", range(8))
def test_word_index_gives_every_arc_its_words(seed):
    rng = np.random.default_rng(seed)
    g = random_graph(rng, epsilon=bool(seed % 2), num_states=int(rng.integers(2, 200)),
                     num_tokens=int(rng.choice([2, 29, 500])))
    if seed % 4 >= 2:
        g = with_multiword_arcs(rng, g)
    host = _graph_arrays(g)
    dev = device_graph_arrays(host, g.num_tokens)
    A = g.num_arcs
    assert dev["ilabel"].dtype == np.int16 and np.array_equal(dev["ilabel"].astype(np.int32), host["ilabel"])
    for k in ("row_splits", "eps_begin", "final_begin", "dest", "weight", "aux_words"):
        assert np.array_equal(dev[k], host[k]), k
    blocks = (A + 31) // 32
    word_arcs = int(np.count_nonzero(np.diff(host["aux_splits"])))
    assert dev["aux_splits"].shape == (2 * blocks + word_arcs + 1,)
    for a in range(A):
        assert _arc_words(dev, a) == g.arc_words(a), a


def test_word_index_on_block_edges():
    """Arcs 0, 31, 32, 63, 64 of a graph whose arcs all output words, one with none, and a graph without words."""
    rng = np.random.default_rng(5)
    for n_arcs in (1, 31, 32, 33, 64, 65):
        src = np.zeros(n_arcs, np.int64)
        words = [[int(w) for w in rng.integers(1, 9, size=int(rng.integers(0, 3)))] for _ in range(n_arcs)]
        from decoders.graph import WfstGraph
        g = WfstGraph.from_arcs(src, np.ones(n_arcs, np.int32), np.arange(n_arcs) % 3, np.zeros(n_arcs, np.int32),
                                np.zeros(n_arcs, np.float32), num_states=2, start_state=0, final_state=1,
                                num_tokens=3, words=[f"w{i}" for i in range(9)], aux=words)
        dev = device_graph_arrays(_graph_arrays(g), g.num_tokens)
        for a in range(n_arcs):
            assert _arc_words(dev, a) == g.arc_words(a), (n_arcs, a)
        bare = WfstGraph.from_arcs(src, np.ones(n_arcs, np.int32), np.arange(n_arcs) % 3, np.zeros(n_arcs, np.int32),
                                   np.zeros(n_arcs, np.float32), num_states=2, start_state=0, final_state=1,
                                   num_tokens=3)
        dev = device_graph_arrays(_graph_arrays(bare), bare.num_tokens)
        assert all(_arc_words(dev, a) == [] for a in range(n_arcs))


def test_device_layout_is_smaller_and_refuses_vocabularies_past_int16():
    rng = np.random.default_rng(9)
    g = random_graph(rng, num_states=150, num_tokens=29)
    host = _graph_arrays(g)
    dev = device_graph_arrays(host, g.num_tokens)
    assert sum(v.nbytes for v in dev.values()) < sum(v.nbytes for v in host.values())
    with pytest.raises(ValueError, match="16 bits"):
        device_graph_arrays(host, _MAX_DEVICE_TOKENS + 1)
    device_graph_arrays(host, _MAX_DEVICE_TOKENS)  # the largest vocabulary that fits
