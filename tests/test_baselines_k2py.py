"""k2py (HLG) and kaldi-decoder (TLG) baselines on the toy graphs: the right words, the same best-path
score, utterances that start and end with LM back-off arcs, and the harness protocol."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from decoders.graph import WfstGraph
from eval.adapters.base import DecodingContext, build_decoder
from recipes.graphs.build import build_token_set_graphs
from recipes.graphs.paths import forced_best_path
from recipes.graphs.toy import TOY_WORDS, toy_tokens, write_toy_arpa
from recipes.graphs.topologies import TOPOLOGIES

pytest.importorskip("k2py")
pytest.importorskip("kaldi_decoder")


@pytest.fixture(scope="module", params=["first", "last"])
def toy(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"bl_{request.param}")
    tokens = toy_tokens(request.param)
    build_token_set_graphs(root / "out", tokens, TOY_WORDS, write_toy_arpa(root / "toy.arpa"))
    return root / "out", tokens


def _peaked(tokens, words, p=0.999, pad=2):
    """(T, V) log-probs: each token for one frame, blank between (valid for every topology, minimal too)."""
    cols = []
    for i, w in enumerate(words):
        if i and " " in tokens.tokens:
            cols.append(tokens.tokens.index(" "))
        cols += tokens.encode(w)
    frames = [tokens.blank_id] * pad
    for c in cols:
        frames += [c, tokens.blank_id]
    frames += [tokens.blank_id] * pad
    V = tokens.vocab_size
    lp = np.full((len(frames), V), np.log((1 - p) / (V - 1)), dtype=np.float32)
    lp[np.arange(len(frames)), frames] = np.log(p)
    return lp


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("words", [["nab", "a", "nab"], ["a", "ab"], ["ba", "bab", "a"]])
def test_k2py_and_kaldi_agree(toy, topology, words):
    out, tokens = toy
    ctx = DecodingContext(tokens=tokens, graph_dir=out / topology)
    # acoustic_scale 1: the scores are compared with an unscaled forced pass (the harness's YAML uses 3)
    k2py_dec = build_decoder("k2py", {"acoustic_scale": 1.0}, ctx)
    kaldi_dec = build_decoder("kaldi", {"acoustic_scale": 1.0}, ctx)
    lp = _peaked(tokens, words)
    lps, lens = torch.from_numpy(lp)[None], torch.tensor([lp.shape[0]])
    (hk2,) = k2py_dec.decode(lps, lens)
    (hkd,) = kaldi_dec.decode(lps, lens)
    assert list(hk2.words) == words, (topology, hk2)
    assert list(hkd.words) == words, (topology, hkd)
    assert hk2.score == pytest.approx(hkd.score, abs=1e-3)
    # the reported score is the total (graph + acoustic) of a path that reaches the final state
    hlg = WfstGraph.load(out / topology / "HLG.bin")
    best = forced_best_path(hlg, lp.argmax(1).tolist(), lp)
    assert best.reached_final and best.score == pytest.approx(hk2.score, abs=1e-3)
    assert k2py_dec.pop_stats()["partial_count"] == 0 and kaldi_dec.pop_stats()["partial_count"] == 0


def test_k2py_batch_lengths_and_errors(toy):
    out, tokens = toy
    dec = build_decoder("k2py", {"search_beam": 15.0}, DecodingContext(tokens=tokens, graph_dir=out / "compact"))
    a, b = _peaked(tokens, ["nab"]), _peaked(tokens, ["a", "ab"])
    T = max(len(a), len(b))
    lps = torch.full((2, T, tokens.vocab_size), -30.0)
    lps[0, : len(a)], lps[1, : len(b)] = torch.from_numpy(a), torch.from_numpy(b)
    hyps = dec.decode(lps, torch.tensor([len(a), len(b)]))
    assert [list(h.words) for h in hyps] == [["nab"], ["a", "ab"]]
    with pytest.raises(NotImplementedError):
        dec.decode(lps, torch.tensor([len(a), len(b)]), boosts=[{"a": 1.0}, {}])
    with pytest.raises(ValueError, match="search_beam"):
        build_decoder("k2py", {"search_beam": 0.0}, DecodingContext(tokens=tokens, graph_dir=out / "compact"))


@pytest.mark.slow
def test_k2py_through_harness_on_tiny(tmp_path):
    """End to end through eval.run on the embedded tiny workload (builds the tiny graphs if missing)."""
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "eval.run", "decoder=k2py", "graph=compact", "model=simulator_bpe"]
    res = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=3000)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = root / res.stdout.strip().splitlines()[-1].split("run directory:")[-1].strip()
    rows = [json.loads(l) for l in open(run_dir / "results.jsonl")]
    sets = {r.get("dataset") for r in rows if r.get("decoder") == "k2py"}
    assert {"clean", "other"} <= sets


def test_k2py_partial_result_is_counted(toy):
    """Online k2py with allow_partial returns the best partial path when pruning removed the final state
    (offline intersect_dense_pruned would return nothing); the adapter counts it."""
    out, tokens = toy
    ctx = DecodingContext(tokens=tokens, graph_dir=out / "compact")
    n = tokens.encode("n")[0]
    frames = [tokens.blank_id, n, tokens.blank_id, n, tokens.blank_id]
    V = tokens.vocab_size
    lp = np.full((len(frames), V), np.log(0.001 / (V - 1)), np.float32)
    lp[np.arange(len(frames)), frames] = np.log(0.999)
    x, lens = torch.from_numpy(lp)[None], torch.tensor([len(frames)])
    wide = build_decoder("k2py", {}, ctx)
    wide.decode(x, lens)
    assert wide.pop_stats()["partial_count"] == 0  # a complete (all-blank) path survives a wide beam
    narrow = build_decoder("k2py", {"search_beam": 0.5, "min_active_states": 0, "max_active_states": 1}, ctx)
    (h,) = narrow.decode(x, lens)
    assert narrow.pop_stats()["partial_count"] == 1 and list(h.words) == ["nab"]
    with pytest.raises(ValueError, match="max_active"):
        build_decoder("kaldi", {"max_active": 1, "min_active": 0}, ctx)
