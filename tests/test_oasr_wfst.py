"""The OASR column of the WFST benchmark (eval/bench/oasr_wfst.py): our graphs written in OASR's graph image
read back equal (our parser of the documented format, and OASR's own numpy reader and assembler when its source
is unpacked in .anchors/oasr), bad images refused, the benchmark's unavailable rows, and on a GPU OASR's
decoder against our CPU reference on the same graphs and log-probs."""
from __future__ import annotations

import importlib.util
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from decoders.graph import EPSILON, FINAL, WfstGraph
from eval.bench.oasr_wfst import (
    OASR_EPSILON_LABEL, OasrUnavailable, OasrWfstConfig, epsilon_depth, graph_from_oasr_image, oasr_image,
    read_oasr_image, write_oasr_image,
)
from tests.wfst_testlib import random_graph, random_log_probs

ROOT = Path(__file__).resolve().parents[1]
OASR_ROOT = Path(os.environ.get("OASR_ROOT") or ROOT / ".anchors" / "oasr")


def _same_graph(a: WfstGraph, b: WfstGraph) -> None:
    assert (a.num_states, a.start_state, a.final_state, a.num_tokens) == (b.num_states, b.start_state,
                                                                         b.final_state, b.num_tokens)
    for f in ("row_splits", "dest", "ilabel", "olabel"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    # weights bit for bit, not approximately
    np.testing.assert_array_equal(a.weight.view(np.int32), b.weight.view(np.int32))
    for x, y in zip(a.aux_csr(), b.aux_csr()):
        np.testing.assert_array_equal(x, y)


def _multiword_graph(rng) -> WfstGraph:
    """A random epsilon graph whose arcs carry 0, 1 or 3 words (an epsilon-free HLG's folded word arcs)."""
    g = random_graph(rng, epsilon=True, num_states=31, num_tokens=5)
    aux = [[] if w == 0 else ([w, 1 + w % 3, 2] if a % 4 == 0 else [w]) for a, w in enumerate(g.olabel.tolist())]
    return WfstGraph.from_arcs(g.src(), g.dest, g.ilabel, g.olabel, g.weight, num_states=g.num_states,
                               start_state=g.start_state, final_state=g.final_state, num_tokens=g.num_tokens,
                               words=g.words, aux=aux)


GRAPHS = {
    "epsilon": lambda rng: random_graph(rng, epsilon=True, num_states=57, num_tokens=11),
    "epsilon_free": lambda rng: random_graph(rng, epsilon=False, num_states=3, num_tokens=29),
    "no_finals": lambda rng: random_graph(rng, epsilon=True, finals="none", num_states=17, num_tokens=4),
    "all_finals": lambda rng: random_graph(rng, finals="all", num_states=40, num_tokens=2),
    "multiword": _multiword_graph,
}


@pytest.mark.parametrize("kind", sorted(GRAPHS))
def test_image_round_trips(kind, tmp_path):
    """ours -> OASR image -> ours: same states, arcs (order kept), labels, bit-identical weights, words."""
    g = GRAPHS[kind](np.random.default_rng(len(kind)))
    stats = write_oasr_image(g, tmp_path / "g.img")
    assert (stats["states"], stats["arcs"], stats["vocab_size"]) == (g.num_states, g.num_arcs, g.num_tokens)
    assert stats["has_eps"] == bool(g.num_epsilon_arcs) and stats["bytes"] == (tmp_path / "g.img").stat().st_size
    img = read_oasr_image(tmp_path / "g.img")
    # OASR's view: labels are columns, FINAL is -1, epsilons are told by the per-state count
    assert img.finals_at_end and not img.eps_first and img.has_eps == bool(g.num_epsilon_arcs)
    src = g.src()
    np.testing.assert_array_equal(img.final_count, np.bincount(src[g.ilabel == FINAL], minlength=g.num_states))
    np.testing.assert_array_equal(img.eps_count, np.bincount(src[g.ilabel == EPSILON], minlength=g.num_states))
    np.testing.assert_array_equal(img.ilabel, np.where(g.ilabel == EPSILON, OASR_EPSILON_LABEL, g.ilabel))
    back = graph_from_oasr_image(img, final_state=g.final_state, words=g.words)
    _same_graph(g, back.validate())


def test_toy_tlg_and_hlg_round_trip(tmp_path):
    """The recipe's own graphs (toy LM): TLG (epsilons, back-off chains) and HLG (multi-word arcs)."""
    from recipes.graphs.build import build_token_set_graphs
    from recipes.graphs.toy import TOY_WORDS, toy_tokens, write_toy_arpa

    arpa = write_toy_arpa(tmp_path / "toy.arpa")
    build_token_set_graphs(tmp_path / "g", toy_tokens("last"), TOY_WORDS, arpa, topologies=["compact"])
    for kind in ("TLG", "HLG"):
        g = WfstGraph.load(tmp_path / "g" / "compact" / f"{kind}.bin")
        write_oasr_image(g, tmp_path / f"{kind}.img")
        _same_graph(g, graph_from_oasr_image(read_oasr_image(tmp_path / f"{kind}.img"), final_state=g.final_state,
                                             words=g.words))
        assert (epsilon_depth(g) > 0) == (kind == "TLG")


def _oasr_graph_image_module():
    """OASR's own image reader/assembler (pure numpy), loaded from its file: its package's __init__ needs tvm_ffi."""
    path = OASR_ROOT / "oasr" / "decoder" / "wfst" / "graph_image.py"
    if not path.is_file():
        pytest.skip(f"OASR source not unpacked at {OASR_ROOT} (../shared/anchors/README.md)")
    spec = importlib.util.spec_from_file_location("_oasr_graph_image", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["epsilon", "epsilon_free", "multiword", "no_finals"])
def test_oasr_reads_our_image_and_would_write_the_same(kind, tmp_path):
    """OASR's reader sees our arrays; OASR's assembler (what its k2 exporter calls), given the same arcs with the
    epsilons under a label of their own, lays them out exactly as we wrote them (final/epsilon ranges, flags)."""
    oasr = _oasr_graph_image_module()
    g = GRAPHS[kind](np.random.default_rng(7 + len(kind)))
    write_oasr_image(g, tmp_path / "g.img")
    theirs = oasr.read_image(tmp_path / "g.img")
    ours = read_oasr_image(tmp_path / "g.img")
    for f in ("row_splits", "final_count", "arc_dest_ilabel", "aux_row_splits", "aux_pool"):
        np.testing.assert_array_equal(getattr(theirs, f), getattr(ours, f), err_msg=f)
    np.testing.assert_array_equal(theirs.arc_weight.view(np.int32), g.weight.view(np.int32))
    assert (theirs.vocab_size, theirs.start_state, theirs.finals_at_end, theirs.eps_first) == (
        g.num_tokens, g.start_state, True, False)
    np.testing.assert_array_equal(theirs.eps_count, ours.eps_count)
    eps_id = g.num_tokens  # a label no emitting arc has
    splits, words = g.aux_csr()
    built = oasr.build_image(g.row_splits, g.dest, np.where(g.ilabel == EPSILON, eps_id, g.ilabel), g.weight,
                             splits, words, vocab_size=g.num_tokens + 1, epsilon_id=eps_id if g.num_epsilon_arcs else None)
    np.testing.assert_array_equal(built.final_count, ours.final_count)
    if g.num_epsilon_arcs:
        np.testing.assert_array_equal(built.eps_count, ours.eps_count)
        assert built.eps_first is False
    assert built.finals_at_end or not g.num_final_arcs


def test_bad_images_and_graphs_are_refused(tmp_path):
    g = random_graph(np.random.default_rng(3), epsilon=True, num_states=20, num_tokens=6)
    write_oasr_image(g, tmp_path / "g.img")
    raw = (tmp_path / "g.img").read_bytes()
    (tmp_path / "magic.img").write_bytes(b"NOTANIMG" + raw[8:])
    with pytest.raises(ValueError, match="bad magic"):
        read_oasr_image(tmp_path / "magic.img")
    (tmp_path / "short.img").write_bytes(raw[: len(raw) - 64])
    with pytest.raises(ValueError, match="outside the file"):
        read_oasr_image(tmp_path / "short.img")
    (tmp_path / "ver.img").write_bytes(raw[:8] + struct.pack("<I", 7) + raw[12:])
    with pytest.raises(ValueError, match="unsupported version 7"):
        read_oasr_image(tmp_path / "ver.img")
    big = WfstGraph.from_arcs([0, 0], [0, 1], [70000, FINAL], [0, 0], [0.0, 0.0], num_states=2, start_state=0,
                              final_state=1, num_tokens=70001)
    with pytest.raises(ValueError, match="u16"):
        oasr_image(big)


def test_epsilon_depth():
    """Longest epsilon chain: 0 without epsilons, the chain length on a DAG, the cap on a cycle."""
    def chain(n, cycle=False):
        src = list(range(n)) + [0]
        dst = [i + 1 for i in range(n)] + [n + 1]
        il = [EPSILON] * n + [FINAL]
        if cycle:
            src.append(n), dst.append(0), il.append(EPSILON)
        return WfstGraph.from_arcs(src, dst, il, [0] * len(src), [-1.0] * len(src), num_states=n + 2, start_state=0,
                                   final_state=n + 1, num_tokens=1)

    assert epsilon_depth(random_graph(np.random.default_rng(0), epsilon=False)) == 0
    assert epsilon_depth(chain(1)) == 1 and epsilon_depth(chain(5)) == 5
    assert epsilon_depth(chain(5, cycle=True), cap=8) == 8


def test_config_and_unavailable(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="graph must be"):
        OasrWfstConfig(graph="XLG")
    with pytest.raises(ValueError, match="max_lanes"):
        OasrWfstConfig(max_lanes=0)
    from eval.bench.oasr_wfst import oasr_root

    monkeypatch.delenv("OASR_ROOT", raising=False)
    with pytest.raises(OasrUnavailable, match="OASR source not found"):
        oasr_root(tmp_path / "nowhere")


def test_wfst_bench_oasr_column_without_a_gpu(tmp_path):
    """Without CUDA (or without OASR) the OASR column is a row per (graph, batch) marked unavailable with the
    reason, beside ours; ours and OASR name each other in a second run directory (wfst_vs_oasr)."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU host OASR may run: covered by the gpu test")
    from eval.bench.common import LogProbSet
    from eval.bench.wfst_bench import main
    from reports.schema import load_rows

    rng = np.random.default_rng(5)
    g = random_graph(rng, epsilon=True, num_states=40, num_tokens=5)
    gdir = tmp_path / "compact"
    gdir.mkdir()
    g.save(gdir / "TLG.bin")
    g.save(gdir / "HLG.bin")
    LogProbSet(log_probs=random_log_probs(rng, 3, 9, 5), lengths=torch.tensor([9, 4, 1]), refs=["w1", "", "w2"],
               durations=[0.4, 0.2, 0.1], ids=["a", "b", "c"], tokens=[f"t{i}" for i in range(5)],
               blank_id=4).save(tmp_path / "lp.pt")
    rc = main(["--lp-file", str(tmp_path / "lp.pt"), "--graph-dir", f"compact={gdir}", "--batches", "1", "2",
               "--device", "cpu", "--decoders", "wfst", "oasr", "--output-dir", str(tmp_path / "runs"), "--run", "t"])
    assert rc == 0
    rows = load_rows(tmp_path / "runs" / "wfst_vs_oasr" / "t")
    oasr = [r for r in rows if r.decoder_name == "oasr"]
    ours = [r for r in rows if r.decoder_name == "wfst"]
    assert len(oasr) == 4 and all(not r.ok and r.reason for r in oasr)  # TLG + HLG x 2 batch sizes
    assert len(ours) == 4 and all(r.ok for r in ours)
    assert {r.run_mate for r in ours} == {r.decoder for r in oasr}
    # the main run directory keeps ours beside its other mates; OASR's rows are in its own pairing directory
    main_rows = load_rows(tmp_path / "runs" / "wfst_vs_riva" / "t")
    assert {r.decoder for r in main_rows if r.decoder_name == "wfst"} == {r.decoder for r in ours}


def _cpu_reference(graph, lp, lengths, cfg: OasrWfstConfig):
    from decoders.wfst import WfstDecoder, WfstDecoderConfig

    dec = WfstDecoder(graph, WfstDecoderConfig(search_beam=cfg.search_beam, output_beam=cfg.output_beam,
                                               min_active=cfg.min_active, max_active=cfg.max_active,
                                               eps_iterations=cfg.max_eps_iterations), "cpu")
    return dec.decode(lp, lengths)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["epsilon_free", "toy_tlg", "toy_hlg"])
def test_oasr_decodes_like_our_cpu_reference(kind, tmp_path):
    """OASR's GPU decoder on our exported graph finds our CPU reference's best path (words and score) on random
    log-probs: the exporter's labels, weights, finals and epsilons mean to OASR what they mean to us. Odd batch
    (3 and 7 utterances), lengths 0, 1 and full."""
    pytest.importorskip("tvm_ffi")
    if not (OASR_ROOT / "oasr").is_dir():
        pytest.skip(f"OASR source not unpacked at {OASR_ROOT}")
    from eval.adapters.base import DecodingContext
    from eval.bench.oasr_wfst import OasrWfstDecoder
    from recipes.tokens import TokenSet

    rng = np.random.default_rng(11)
    if kind == "epsilon_free":
        g = random_graph(rng, epsilon=False, num_states=37, num_tokens=7, finals="all")
    else:
        from recipes.graphs.build import build_token_set_graphs
        from recipes.graphs.toy import TOY_WORDS, toy_tokens, write_toy_arpa

        arpa = write_toy_arpa(tmp_path / "toy.arpa")
        build_token_set_graphs(tmp_path / "g", toy_tokens("last"), TOY_WORDS, arpa, topologies=["compact"])
        g = WfstGraph.load(tmp_path / "g" / "compact" / f"{kind[4:].upper()}.bin")
    gdir = tmp_path / "gd"
    gdir.mkdir()
    g.save(gdir / "TLG.bin")
    V = g.num_tokens
    tokens = TokenSet(tokens=[f"t{i}" for i in range(V)], blank_id=V - 1, kind="char")
    for B, T in ((3, 1), (7, 23)):
        lp = random_log_probs(rng, B, T, V)
        lengths = torch.tensor([T] + [int(x) for x in rng.integers(0, T + 1, size=B - 1)])
        cfg = OasrWfstConfig(graph="TLG", max_lanes=B, search_beam=20.0)
        dec = OasrWfstDecoder(cfg, DecodingContext(tokens=tokens, device="cuda", graph_dir=gdir))
        hyps = dec.decode(lp.cuda(), lengths)
        stats = dec.pop_stats()
        dec.close()
        ref = _cpu_reference(g, lp, lengths, cfg)
        assert stats["overflow_count"] == 0 and stats["failed_count"] == 0
        for b in range(B):
            if ref.has_path[b]:
                assert hyps[b].words == list(ref.word_strings[b]), (kind, B, b)
                assert hyps[b].score == pytest.approx(float(ref.scores[b]), abs=2e-3)
