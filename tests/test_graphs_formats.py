"""Lossless round trips for every format (same arcs, bit-identical weights, same word labels)."""
import numpy as np
import pytest
import torch

from decoders.graph import FINAL, WfstGraph
from decoders.openfst import read_openfst
from recipes.graphs.build import build_token_set_graphs
from recipes.graphs.fstutil import fst_to_arrays, read_fst_arrays
from recipes.graphs.toy import TOY_WORDS, toy_tokens, write_toy_arpa


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("fmt")
    build_token_set_graphs(root / "out", toy_tokens("last"), TOY_WORDS, write_toy_arpa(root / "toy.arpa"),
                           topologies=["normal", "compact"])
    return root / "out"


def _same(a: WfstGraph, b: WfstGraph):
    for f in ("num_states", "start_state", "final_state", "num_tokens"):
        assert getattr(a, f) == getattr(b, f), f
    for f in ("row_splits", "dest", "ilabel", "olabel"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert np.array_equal(np.asarray(a.weight, np.float32).view(np.int32), np.asarray(b.weight, np.float32).view(np.int32))
    for x, y in zip(a.aux_csr(), b.aux_csr()):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("topology", ["normal", "compact"])
def test_k2_dict_roundtrip(toy_dir, topology, tmp_path):
    hlg = WfstGraph.load(toy_dir / topology / "HLG.bin")
    d = hlg.to_k2_dict()
    assert d["arcs"].dtype == torch.int32 and d["arcs"].shape == (hlg.num_arcs, 4)
    # score bit-cast in column 3; -1 labels enter the last state
    assert np.array_equal(d["arcs"][:, 3].numpy().view(np.float32), hlg.weight)
    fin = d["arcs"][:, 2] == -1
    assert set(d["arcs"][fin, 1].tolist()) == {hlg.num_states - 1}
    _same(hlg, WfstGraph.from_k2(d, num_tokens=hlg.num_tokens))
    # the file written by the build, read with torch alone
    _same(hlg, WfstGraph.from_k2(toy_dir / topology / "HLG.pt", num_tokens=hlg.num_tokens))
    hlg.save_k2(tmp_path / "x.pt")
    _same(hlg, WfstGraph.from_k2(str(tmp_path / "x.pt"), num_tokens=hlg.num_tokens))


def test_k2_dict_plain_icefall_layout():
    """A hand-made k2 dict (no ragged extension): label l reads column l, -1 enters the final state."""
    score = np.array([-0.5, -1.25, 0.0], dtype=np.float32)
    arcs = np.array([[0, 1, 2, 0], [1, 1, 0, 0], [1, 2, -1, 0]], dtype=np.int32)
    arcs[:, 3] = score.view(np.int32)
    g = WfstGraph.from_k2({"arcs": torch.from_numpy(arcs), "aux_labels": torch.tensor([5, 0, -1], dtype=torch.int32)},
                          num_tokens=3)
    assert g.final_state == 2 and g.start_state == 0 and g.num_final_arcs == 1
    assert g.arc_words(0) == [5] and g.num_words == 6
    d = g.to_k2_dict()
    assert np.array_equal(d["arcs"].numpy(), arcs) and d["aux_labels"].tolist() == [5, 0, -1]
    with pytest.raises(ValueError, match=r"\[num_arcs, 4\]"):
        WfstGraph.from_k2({"arcs": torch.zeros(7, dtype=torch.int32)})


@pytest.mark.parametrize("topology", ["normal", "compact"])
def test_k2_text_roundtrip(toy_dir, topology):
    hlg = WfstGraph.load(toy_dir / topology / "HLG.bin")
    back = WfstGraph.from_k2_text(toy_dir / topology / "HLG.k2.txt", num_tokens=hlg.num_tokens)
    _same(hlg, back)
    assert back.num_multiword_arcs == hlg.num_multiword_arcs


@pytest.mark.parametrize("topology", ["normal", "compact"])
def test_openfst_roundtrip(toy_dir, topology, tmp_path):
    d = toy_dir / topology
    tlg_bin = WfstGraph.load(d / "TLG.bin")
    tlg = WfstGraph.from_openfst(d / "TLG.fst", tokens_path=d / "tokens.txt", words_path=d / "words.txt")
    _same(tlg_bin, tlg)  # the OpenFst file and the image hold the same graph
    assert tlg.words == tlg_bin.words
    tlg.write_openfst(tmp_path / "TLG.fst", tmp_path / "words.txt")
    a, b = read_fst_arrays(d / "TLG.fst"), read_fst_arrays(tmp_path / "TLG.fst")
    for f in ("src", "dest", "ilabel", "olabel"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert np.array_equal(a.cost.view(np.int32), b.cost.view(np.int32))
    assert np.array_equal(a.final.view(np.int32), b.final.view(np.int32))
    assert (tmp_path / "words.txt").read_text() == (d / "words.txt").read_text()
    # the numpy reader of the vector file == kaldifst's view of it (through a const FST)
    import kaldifst

    k = fst_to_arrays(kaldifst.StdVectorFst.read(str(d / "TLG.fst")))
    r = read_openfst(d / "TLG.fst")
    for f in ("src", "dest", "ilabel", "olabel"):
        assert np.array_equal(getattr(r, f), getattr(k, f)), f
    assert r.start == k.start and np.array_equal(r.final.view(np.int32), k.final.view(np.int32))


def test_openfst_import_maps_disambig_to_epsilon(tmp_path):
    """Kaldi numbering: <eps>=0, token = column + 1, ids above the vocabulary (#k) read as EPSILON."""
    import kaldifst

    V = 3
    fst = kaldifst.compile(f"0 1 1 7 0.5\n1 2 {V + 1} 0 0.25\n2 0 0 0 1.0\n2 3 3 0 0.125\n3 2.5\n")
    fst.write(str(tmp_path / "g.fst"))
    g = WfstGraph.from_openfst(tmp_path / "g.fst", num_tokens=V)
    il = {(int(s), int(d)): int(l) for s, d, l in zip(g.src(), g.dest, g.ilabel)}
    assert il[(0, 1)] == 0  # column = label - 1
    assert il[(1, 2)] == -2 and il[(2, 0)] == -2  # #0 and <eps> -> EPSILON
    assert il[(2, 3)] == 2
    fin = np.nonzero(g.ilabel == FINAL)[0]
    assert len(fin) == 1 and g.weight[fin[0]] == np.float32(-2.5)  # cost negated into a score
    with pytest.raises(ValueError, match="num_tokens or tokens_path"):
        WfstGraph.from_openfst(tmp_path / "g.fst")
    const = kaldifst.StdConstFst(fst)
    const.write(str(tmp_path / "c.fst"))
    _g2 = WfstGraph.from_openfst(tmp_path / "c.fst", num_tokens=V)  # const FSTs read too
    assert np.array_equal(_g2.dest, g.dest)


def test_one_openfst_reader():
    """Issue 11: graph formats had two OpenFst parsers (recipes.graphs.fstutil and decoders.graph). recipes now
    use decoders.openfst, the one reader/writer."""
    import decoders.graph
    import decoders.openfst
    import recipes.graphs.fstutil

    assert recipes.graphs.fstutil.FstArrays is decoders.openfst.FstArrays
    assert not hasattr(recipes.graphs.fstutil, "parse_const_fst")
    assert not hasattr(decoders.graph, "read_openfst_arrays")


@pytest.mark.parametrize("cut", [3, 10, 30, 60, 100])
def test_openfst_reader_truncated_file_one_line_error(toy_dir, tmp_path, cut):
    """A truncated OpenFst file gives a one-line ValueError naming the file, never a numpy traceback."""
    raw = (toy_dir / "normal" / "TLG.fst").read_bytes()
    p = tmp_path / "cut.fst"
    p.write_bytes(raw[: len(raw) * cut // 101])
    with pytest.raises(ValueError) as e:
        read_openfst(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_symbol_table_reader(tmp_path):
    """One symbol-table reader: strict "symbol id" lines; gaps only when asked for."""
    from decoders.openfst import read_symbol_table, write_symbol_table

    write_symbol_table(tmp_path / "w.txt", ["<eps>", "a", "b"])
    assert read_symbol_table(tmp_path / "w.txt") == ["<eps>", "a", "b"]
    (tmp_path / "g.txt").write_text("<eps> 0\nb 2\n")
    with pytest.raises(ValueError, match="not dense"):
        read_symbol_table(tmp_path / "g.txt")
    assert read_symbol_table(tmp_path / "g.txt", allow_gaps=True) == ["<eps>", "<unused1>", "b"]
    (tmp_path / "bad.txt").write_text("<eps> 0\nx y z\n")
    with pytest.raises(ValueError, match="bad.txt:2"):
        read_symbol_table(tmp_path / "bad.txt")
