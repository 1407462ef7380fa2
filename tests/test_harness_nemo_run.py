"""A NeMo user's run (issue 13): `model_path=<.nemo> dataset_manifest=<JSONL> data.arpa_path=<ARPA>` as NeMo's
speech_to_text_eval.py spells it builds the graphs for the model's own tokens (content-addressed under graph.root,
reused by the next run) and writes NeMo-style output manifests (audio_filepath, duration, text, pred_text) in
manifest order with per-utterance WER/CER; `model=/abs/x.nemo` works; without an ARPA the graph decoders say which
option to set."""
import json
from pathlib import Path

import numpy as np
import pytest

from eval.config import compose_config, expand_shorthands

pytest.importorskip("nemo.collections.asr")
sf = pytest.importorskip("soundfile")

SR = 16000
SECONDS = (1.3, 2.9, 0.7, 2.1)  # not sorted: the NeMo source decodes longest first, the outputs keep this order


def test_expand_shorthands():
    assert expand_shorthands(["model=/m/x.nemo", "decoder=wfst"]) == ["model=nemo_file", "model.nemo_model=/m/x.nemo",
                                                                      "decoder=wfst"]
    assert expand_shorthands(["pretrained_name=stt_en_conformer_ctc_small"]) == [
        "model=nemo_file", "model.nemo_model=stt_en_conformer_ctc_small"]
    got = expand_shorthands(["model_path=rel/x.nemo", "dataset_manifest=/d/test-clean.json"])
    assert got[0] == "model=nemo_file" and Path(got[1].split("=", 1)[1]).is_absolute()
    assert got[2] == "+data.manifests.test-clean=/d/test-clean.json"
    assert expand_shorthands(["model=simulator_char"]) == ["model=simulator_char"]  # config names pass through
    with pytest.raises(ValueError, match="dataset_manifest= needs"):
        expand_shorthands(["dataset_manifest="])


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    from _eval_fakes import write_arpa
    from eval.bench.nemo_e2e import TINY_TEXT, make_tiny_nemo_model, synth_speechlike

    d = tmp_path_factory.mktemp("nemo_user")
    model = make_tiny_nemo_model(d / "m.nemo", kind="bpe", vocab_size=32)
    rng = np.random.default_rng(0)
    lines = []
    for i, sec in enumerate(SECONDS):
        wav = d / "audio" / f"u{i}.wav"
        wav.parent.mkdir(exist_ok=True)
        sf.write(wav, synth_speechlike(sec, rng)[: int(sec * SR)], SR)
        lines.append({"audio_filepath": f"audio/u{i}.wav", "duration": sec, "text": TINY_TEXT[i]})
    manifest = d / "test.json"
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    arpa = d / "lm.arpa"
    write_arpa(arpa, sorted({w for t in TINY_TEXT for w in t.split()}))
    return {"dir": d, "model": model, "manifest": manifest, "arpa": arpa, "lines": lines}


def _run(user, tmp_path, *extra, run="r"):
    from eval.runner import run_experiment

    cfg = compose_config([f"model_path={user['model']}", f"dataset_manifest={user['manifest']}",
                          "model.params.device=cpu", f"graph.root={user['dir'] / 'graphs'}",
                          f"experiment.output_dir={tmp_path}", f"experiment.run={run}", "experiment.progress=false",
                          "experiment.batch_size=3", *extra])
    return run_experiment(cfg)


def test_nemo_style_run_builds_graphs_and_writes_output_manifests(user, tmp_path):
    """Regression: `model=/x.nemo` was `Could not find 'model//x.nemo'`, a user's manifests + ARPA aborted with
    "graphs in data/graphs/tiny/... are stale" (the demo's graphs) and no build command, and hyps.jsonl had no
    pred_text/audio_filepath and came sorted by length, with no CER and no per-utterance WER."""
    out = _run(user, tmp_path, f"data.arpa_path={user['arpa']}", "experiment.decoders=[greedy,kaldi]",
               "experiment.skip_unavailable=true")
    if "kaldi" in out.unavailable and "graph" not in out.unavailable["kaldi"]:
        pytest.skip(f"kaldi decoder unavailable here: {out.unavailable['kaldi']}")
    assert not out.unavailable, out.unavailable
    [info] = list((user["dir"] / "graphs" / "user").glob("bpe_blanklast-*/compact/graph_info.json"))
    built_at = info.stat().st_mtime_ns
    rows = {r.decoder: r for r in out.rows if r.dataset == "test"}
    assert set(rows) == {"greedy", "kaldi"}
    for r in rows.values():
        assert r.utterances == len(SECONDS) and r.char_errors is not None and r.cer is not None
    want_ids = [f"u{i}" for i in range(len(SECONDS))]
    for dec in ("greedy", "kaldi"):
        lines = [json.loads(x) for x in open(out.run_dir / "manifests" / "test" / f"{dec}.jsonl")]
        assert [x["id"] for x in lines] == want_ids  # manifest order, not the source's longest-first order
        for x, src in zip(lines, user["lines"]):
            assert Path(x["audio_filepath"]).resolve() == (user["dir"] / src["audio_filepath"]).resolve()
            assert x["text"] == src["text"] and x["duration"] == src["duration"]
            assert set(x) >= {"pred_text", "wer", "cer", "score"} and 0 <= x["cer"]
        # the dataset's CER parts are the sums of the utterances'
        hyps = [json.loads(x) for x in open(out.run_dir / "hyps.jsonl") if json.loads(x)["decoder"] == dec]
        assert sum(h["char_errors"] for h in hyps) == rows[dec].char_errors
        assert sum(h["errors"] for h in hyps) == rows[dec].substitutions + rows[dec].deletions + rows[dec].insertions
    # the next run with the same model and LM finds the graphs instead of rebuilding them
    _run(user, tmp_path, f"data.arpa_path={user['arpa']}", "experiment.decoders=[kaldi]", run="again")
    assert info.stat().st_mtime_ns == built_at


def test_without_an_arpa_graph_decoders_name_the_option(user, tmp_path):
    out = _run(user, tmp_path, "experiment.decoders=[greedy,kaldi]", "experiment.skip_unavailable=true",
               f"model={user['model']}")  # model=<path> spelled the Hydra way works too
    assert "data.arpa_path=" in out.unavailable["kaldi"]
    assert [r.decoder for r in out.rows if r.ok and r.dataset == "test"] == ["greedy"]
