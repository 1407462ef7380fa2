"""WFST CPU reference vs the field's decoders on the embedded tiny workload (slow: graph build + k2py/Kaldi).

- HLG (epsilon-free): our reference vs k2py (offline `AlignSegments` = k2 intersect_dense_pruned, and the
  harness adapter's online `OnlineDenseIntersecter`): identical words on >= 99 % of the clean and other sets,
  scores within 1e-3 where the words agree.
- TLG (epsilon arcs, which k2 lacks): our reference vs kaldi-decoder's FasterDecoder on the same TLG.fst,
  WER within 0.1 absolute (percentage points); TLG vs the HLG built from the same inputs: same words >= 99 %.

Measured (char tokens, minimal topology, search_beam 20, 200 utterances per set; workload of commit 9602819):
100 % identical words in every comparison, score gaps <= 2.6e-4 (k2py) / 2.7e-4 (Kaldi) / 3e-5 (TLG vs HLG),
same WER for all four (clean 4.77 %, other 13.38 %). ~90 s on 2 cores once the graphs exist.
At tight beams k2py differs for reasons that are k2py's (tests/test_wfst_cpu.py::test_k2py_tight_beam_gap_is_explained).

Graphs: BEAMDEC_TEST_GRAPH_ROOT (default data/graphs), (re)built with recipes.build_graphs when missing or stale.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow

KIND, TOPOLOGY, BEAM = "char", "minimal", 20.0


@pytest.fixture(scope="module")
def setup():
    from recipes.build_graphs import build_graphs
    from recipes.workload import prepare_workload

    wl = prepare_workload("tiny")
    root = Path(os.environ.get("BEAMDEC_TEST_GRAPH_ROOT", "data/graphs"))
    gdir = root / "tiny" / f"{KIND}_blanklast" / TOPOLOGY
    # staged: rebuilds only stages whose inputs (workload LM, token set) changed, else returns at once
    build_graphs(workload=wl, token_kind=KIND, blank="last", topologies=[TOPOLOGY], out_root=root)
    return wl, gdir


_cache: dict = {}


def _decode_set(setup, set_name: str) -> dict:
    """Every decoder's words/scores on one set (computed once per module run)."""
    if set_name in _cache:
        return _cache[set_name]
    import k2py

    from decoders.graph import WfstGraph
    from decoders.wfst import WfstDecoder, WfstDecoderConfig
    from eval.acoustic.base import Utterance
    from eval.acoustic.simulator import SimulatorSource
    from eval.adapters.base import DecodingContext
    from eval.adapters.k2py_adapter import K2pyConfig, K2pyDecoder
    from eval.adapters.kaldi_decoder_adapter import KaldiDecoder, KaldiDecoderConfig
    from recipes.graphs.paths import ArcIndex, forced_best_path

    wl, gdir = setup
    tokens = wl.token_set(KIND, "last")
    utts = [Utterance(id=u["id"], text=u["text"], duration=float(u["duration"])) for u in wl.utterances(set_name)]
    batch = next(iter(SimulatorSource(tokens, wl.simulator_config(set_name)).batches(utts, len(utts))))
    lp, lengths = batch.log_probs, batch.lengths
    hlg = _cache.setdefault("hlg", WfstGraph.load(gdir / "HLG.bin"))
    tlg = _cache.setdefault("tlg", WfstGraph.load(gdir / "TLG.bin"))
    cfg = WfstDecoderConfig(search_beam=BEAM)
    ours_h = WfstDecoder(hlg, cfg).decode(lp, lengths)
    ours_t = WfstDecoder(tlg, cfg).decode(lp, lengths)

    if "k2g" not in _cache:
        _cache["k2g"] = k2py.CreateFsaVecFromStr((gdir / "HLG.k2.txt").read_text(encoding="utf-8"), -1, False)
        _cache["index"] = ArcIndex(hlg)
    offline = []  # (word ids, score) of k2's offline intersect_dense_pruned best path
    for b in range(len(utts)):
        L = int(lengths[b])
        x = np.ascontiguousarray(lp[b, :L].numpy())
        labels = [int(v) for v in k2py._k2.AlignSegments(_cache["k2g"], x, BEAM, 8.0, 30, 10000, True, True)["labels"]]
        if len(labels) != L:
            offline.append(([], float("-inf")))
            continue
        p = forced_best_path(hlg, labels, x, index=_cache["index"])
        offline.append((list(p.words), float(p.score)))
    ctx = DecodingContext(tokens=tokens, graph_dir=gdir)
    online = K2pyDecoder(K2pyConfig(search_beam=BEAM), ctx).decode(lp, lengths)
    kaldi = KaldiDecoder(KaldiDecoderConfig(beam=BEAM), ctx).decode(lp, lengths)
    out = dict(refs=[u.text for u in utts], ours_h=ours_h, ours_t=ours_t, offline=offline, online=online, kaldi=kaldi)
    _cache[set_name] = out
    return out


def _wer_percent(refs, hyps) -> float:
    import jiwer

    return 100.0 * jiwer.wer([r or "<empty>" for r in refs], [h or "<empty>" for h in hyps])


@pytest.mark.parametrize("set_name", ["clean", "other"])
def test_hlg_reference_matches_k2py(setup, set_name):
    d = _decode_set(setup, set_name)
    ours = d["ours_h"]
    n = len(d["refs"])
    same_off = [ours.words[b] == d["offline"][b][0] for b in range(n)]
    same_on = [ours.word_strings[b] == list(d["online"][b].words) for b in range(n)]
    assert sum(same_off) >= 0.99 * n, [b for b in range(n) if not same_off[b]][:10]
    assert sum(same_on) >= 0.99 * n, [b for b in range(n) if not same_on[b]][:10]
    gaps = [abs(float(ours.scores[b]) - d["offline"][b][1]) for b in range(n) if same_off[b] and ours.has_path[b]]
    gaps += [abs(float(ours.scores[b]) - d["online"][b].score) for b in range(n) if same_on[b] and ours.has_path[b]]
    assert max(gaps) <= 1e-3


@pytest.mark.parametrize("set_name", ["clean", "other"])
def test_tlg_reference_matches_kaldi_decoder(setup, set_name):
    d = _decode_set(setup, set_name)
    ours = [" ".join(w) for w in d["ours_t"].word_strings]
    kaldi = [" ".join(h.words) for h in d["kaldi"]]
    assert abs(_wer_percent(d["refs"], ours) - _wer_percent(d["refs"], kaldi)) <= 0.1
    same = [a == b for a, b in zip(ours, kaldi)]
    gaps = [abs(float(d["ours_t"].scores[b]) - d["kaldi"][b].score) for b in range(len(ours)) if same[b]]
    assert max(gaps) <= 1e-3  # where the words agree the best paths' scores do too


@pytest.mark.parametrize("set_name", ["clean", "other"])
def test_tlg_and_hlg_give_the_same_words(setup, set_name):
    d = _decode_set(setup, set_name)
    t, h = d["ours_t"], d["ours_h"]
    same = sum(a == b for a, b in zip(t.words, h.words))
    assert same >= 0.99 * len(t.words)
    assert torch.allclose(t.scores[torch.tensor([a == b for a, b in zip(t.words, h.words)])],
                          h.scores[torch.tensor([a == b for a, b in zip(t.words, h.words)])], atol=1e-3)


def test_hlg_tight_beam_differences_are_k2pys_final_column(setup):
    """At tight beams (search_beam 4, max_active 50) our reference and k2py disagree on some utterances of the
    real HLG (measured: 54/60 identical). Decoding instead the graph on which our decoder scores FINAL arcs
    the way k2py does (wfst_testlib.k2py_final_column_emulation) removes every difference (60/60): the gap
    is k2py's FINAL-arc scoring on real frames, nothing else."""
    import k2py

    from decoders.graph import WfstGraph
    from decoders.wfst import WfstDecoder, WfstDecoderConfig
    from eval.acoustic.base import Utterance
    from eval.acoustic.simulator import SimulatorSource
    from recipes.graphs.paths import ArcIndex, forced_best_path
    from wfst_testlib import k2py_final_column_emulation

    wl, gdir = setup
    tokens = wl.token_set(KIND, "last")
    utts = [Utterance(id=u["id"], text=u["text"], duration=float(u["duration"])) for u in wl.utterances("other")[:60]]
    batch = next(iter(SimulatorSource(tokens, wl.simulator_config("other")).batches(utts, len(utts))))
    lp, lengths = batch.log_probs, batch.lengths
    hlg = _cache.setdefault("hlg", WfstGraph.load(gdir / "HLG.bin"))
    if "k2g" not in _cache:
        _cache["k2g"] = k2py.CreateFsaVecFromStr((gdir / "HLG.k2.txt").read_text(encoding="utf-8"), -1, False)
        _cache["index"] = ArcIndex(hlg)
    cfg = WfstDecoderConfig(search_beam=4.0, min_active=30, max_active=50)
    plain = WfstDecoder(hlg, cfg).decode(lp, lengths)
    padded = torch.cat([lp, torch.zeros(lp.shape[0], lp.shape[1], 1)], dim=2).contiguous()
    emulated = WfstDecoder(k2py_final_column_emulation(hlg), cfg).decode(padded, lengths)
    same_plain = same_emul = 0
    for b in range(len(utts)):
        L = int(lengths[b])
        x = np.ascontiguousarray(lp[b, :L].numpy())
        labels = [int(v) for v in k2py._k2.AlignSegments(_cache["k2g"], x, 4.0, 8.0, 30, 50, True, True)["labels"]]
        words = forced_best_path(hlg, labels, x, index=_cache["index"]).words if len(labels) == L else None
        same_plain += words == plain.words[b]
        same_emul += words == emulated.words[b]
    assert same_emul >= 0.99 * len(utts)
    assert same_emul >= same_plain
