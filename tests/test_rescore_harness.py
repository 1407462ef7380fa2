"""Issue 14's rescoring table through the harness: decoder labels with their own parameters
("wfst[output=lattice_rescore]", eval/config.py label_overrides), the wfst adapter's rescoring LM (the workload's
order-4 ARPA, Workload.arpa_of_order; refused when only a lower-order LM is there), and one run directory with
the 1-best and both rescored outputs, paired CIs against the 1-best (conf/experiment/rescore.yaml)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from _eval_fakes import SENTENCES, WORDS, FakeWorkload, fake_source_factory
from eval.config import compose_config, label_overrides, resolve_decoder_config, split_decoder_label, validate_config
from recipes.lm import build_arpa


def test_label_parameters():
    assert split_decoder_label("wfst[output=mbr]@cuda") == ("wfst", "cuda")
    assert split_decoder_label("wfst@cuda[output=mbr]") == ("wfst", "cuda")
    assert split_decoder_label("greedy") == ("greedy", None)
    assert label_overrides("wfst[output=lattice_rescore, rescore_lm_scale=0.5,rescore_order=4]") == \
        {"output": "lattice_rescore", "rescore_lm_scale": 0.5, "rescore_order": 4}
    assert label_overrides("wfst@cuda") == {}
    cfg = validate_config(compose_config(["experiment=rescore", "+experiment.decoder_overrides.wfst.search_beam=9"]))
    a, b = resolve_decoder_config("wfst", cfg), resolve_decoder_config("wfst[output=nbest_rescore,nbest_size=3]", cfg)
    assert a.output.value == "best" and b.output.value == "nbest_rescore" and b.nbest_size == 3
    assert a.search_beam == b.search_beam == 9.0  # the label's parameters come on top of decoder_overrides
    for bad, msg in (("wfst[output]", "key=value"), ("wfst[output=mbr", "unbalanced"), ("wfst[beem=3]", "beem")):
        with pytest.raises(ValueError, match=msg):
            validate_config(compose_config([f"experiment.decoders=[\"{bad}\"]"]))


class Order4Workload(FakeWorkload):
    """The fake workload plus Workload.arpa_of_order: an order-4 KN LM of its sentences (recipes.lm)."""

    def __post_init__(self):
        super().__post_init__()
        self.calls = []

    def words(self):
        return list(WORDS)

    def arpa_of_order(self, order, prune_threshold=0.0):
        self.calls.append(order)
        sents = [s.split() for v in SENTENCES.values() for s in v] * 3
        ids = np.array([WORDS.index(w) for s in sents for w in s], dtype=np.int64)
        off = np.cumsum([0] + [len(s) for s in sents])
        path = self.root / f"lm_{order}gram.arpa"
        if not path.is_file():
            build_arpa(ids, off, WORDS, path, 0.0, order=order)
        return path


def _wfst_ctx(tmp_path, arpa, workload=None):
    from test_wfst_lattice import acyclic_eps_graph

    from eval.adapters.base import DecodingContext

    g = acyclic_eps_graph(np.random.default_rng(3), num_states=6, finals="all")
    g.save(tmp_path / "TLG.bin")
    return DecodingContext(tokens=SimpleNamespace(blank_id=0, vocab_size=g.num_tokens), graph_dir=tmp_path,
                           arpa_path=arpa, extra={"workload": workload} if workload else {})


def test_adapter_picks_the_order4_lm_and_refuses_a_lower_one(tmp_path):
    from _eval_fakes import write_arpa

    from eval.adapters.wfst import WfstAdapter

    wl = Order4Workload(tmp_path / "wl")
    base = {"graph": "TLG", "acoustic_scale": 1.0, "output": "lattice_rescore"}
    a = WfstAdapter(base, _wfst_ctx(tmp_path, wl.arpa_path, wl))
    assert wl.calls == [4] and a.lm.order == 4 and a.rescore_arpa.endswith("lm_4gram.arpa")
    # no workload (a user's model and LM): data.arpa_path, refused below rescore_order
    write_arpa(tmp_path / "bigram.arpa", WORDS)
    with pytest.raises(ValueError, match="order-2 LM, below rescore_order=4"):
        WfstAdapter(base, _wfst_ctx(tmp_path, tmp_path / "bigram.arpa"))
    assert WfstAdapter({**base, "rescore_order": 0}, _wfst_ctx(tmp_path, tmp_path / "bigram.arpa")).lm.order == 2
    explicit = WfstAdapter({**base, "rescore_arpa": str(wl.arpa_of_order(4))}, _wfst_ctx(tmp_path, wl.arpa_path))
    assert explicit.lm.order == 4
    with pytest.raises(ValueError, match="rescore_order"):
        WfstAdapter({**base, "rescore_order": -1}, _wfst_ctx(tmp_path, wl.arpa_path, wl))
    # output=best never reads a rescoring LM
    WfstAdapter({"graph": "TLG"}, _wfst_ctx(tmp_path, tmp_path / "missing.arpa"))


def test_rescore_experiment_one_run_directory(tmp_path):
    from eval.runner import run_experiment
    from reports.schema import load_rows

    wl = Order4Workload(tmp_path / "wl")
    cfg = compose_config(["experiment=rescore", f"experiment.output_dir={tmp_path / 'runs'}",
                          f"graph.root={tmp_path / 'graphs'}", "experiment.run=r", "experiment.batch_size=2",
                          "experiment.progress=false", "model.token_kind=char", "model.blank=first",
                          "graph.topology=normal", "experiment.ci_resamples=200"])
    out = run_experiment(cfg, workload=wl, source_factory=fake_source_factory)
    labels = ["wfst", "wfst[output=nbest_rescore]", "wfst[output=lattice_rescore]",
              "wfst[output=lattice_rescore,rescore_order=0]"]
    rows = {(r.decoder, r.dataset): r for r in load_rows(out.run_dir)}
    assert {d for d, _ in rows} == set(labels) and wl.calls == [4, 4]
    for lb, output in zip(labels, ["best", "nbest_rescore", "lattice_rescore", "lattice_rescore"]):
        r = rows[(lb, "other")]
        assert r.ok and r.decoder_name == "wfst" and r.decoder_config["output"] == output
        assert r.wer_ci["low"] <= r.wer <= r.wer_ci["high"] and r.utterances == 5
        if lb != "wfst":  # paired against the 1-best (ci_reference: wfst)
            assert r.wer_ci["reference"] == "wfst" and r.wer_ci["delta_low"] <= r.wer_ci["delta_high"]
    text = (out.run_dir / "config.yaml").read_text()
    assert "wfst[output=lattice_rescore]" in text and "lattice_rescore" in text
    hyps = [json.loads(x) for x in open(out.run_dir / "hyps.jsonl")]
    assert {h["decoder"] for h in hyps} == set(labels)
    # the control (lattice rescoring with the first pass's own LM) gives the 1-best back
    by = {lb: [h["hyp"] for h in hyps if h["decoder"] == lb] for lb in labels}
    assert by[labels[3]] == by["wfst"]
