"""The runner end to end on a tiny fake workload: run dir layout, results schema, WER recomputable from
hyps.jsonl, unavailable decoders listed with a reason, word boosts reaching the decoder."""
import json

import pytest
import torch

from _eval_fakes import FakeWorkload, fake_log_probs, fake_source_factory
from eval.adapters.base import ADAPTER_MODULES, DecodingContext, build_decoder
from eval.config import compose_config
from eval.metrics import word_error_stats
from eval.runner import run_experiment


def _run(tmp_path, *overrides, workload=None):
    wl = workload or FakeWorkload(tmp_path / "wl")
    cfg = compose_config(
        [f"experiment.output_dir={tmp_path / 'runs'}", f"graph.root={tmp_path / 'graphs'}", "experiment.run=r1", "experiment.batch_size=2",
         "experiment.progress=false", *overrides]
    )
    return run_experiment(cfg, workload=wl, source_factory=fake_source_factory)


def test_greedy_end_to_end_writes_a_self_describing_run_dir(tmp_path):
    out = _run(tmp_path, "decoder=greedy")
    assert out.run_dir == tmp_path / "runs" / "default" / "r1"
    for name in ("config.yaml", "hyps.jsonl", "results.jsonl"):
        assert (out.run_dir / name).is_file()
    rows = [json.loads(line) for line in open(out.run_dir / "results.jsonl")]
    assert [(r["decoder"], r["dataset"]) for r in rows] == [("greedy", "clean"), ("greedy", "other"), ("greedy", "all")]
    for r in rows:
        for key in ("utterances", "audio_seconds", "wer", "substitutions", "deletions", "insertions",
                    "rtfx_decoder", "rtfx_end_to_end", "peak_rss_bytes", "cuda_peak_bytes", "overflow_count",
                    "environment", "hardware_key"):
            assert key in r
        assert r["rtfx_decoder"] > 0 and r["rtfx_end_to_end"] <= r["rtfx_decoder"]
        assert {"gpu_name", "torch_version", "cuda_version", "git_commit"} <= set(r["environment"])
    clean, other, total = rows
    assert clean["wer"] == 0.0 and clean["utterances"] == 5
    assert other["wer"] > 0.0 and other["substitutions"] > 0
    assert total["utterances"] == 10
    assert total["ref_words"] == clean["ref_words"] + other["ref_words"]
    # per-utterance hypotheses: the results' WER is recomputable from them
    hyps = [json.loads(line) for line in open(out.run_dir / "hyps.jsonl")]
    assert len(hyps) == 10 and set(hyps[0]) >= {"id", "ref", "hyp", "score", "tokens", "decoder", "dataset"}
    other_h = [h for h in hyps if h["dataset"] == "other"]
    assert word_error_stats([h["ref"] for h in other_h], [h["hyp"] for h in other_h]).wer == pytest.approx(other["wer"])
    assert "config:" in (out.run_dir / "config.yaml").read_text()


def test_unavailable_decoder_is_listed_with_reason(tmp_path, monkeypatch):
    monkeypatch.setitem(ADAPTER_MODULES, "ghost", "eval.adapters.ghost_not_written")
    out = _run(tmp_path, "experiment.decoders=[greedy,ghost]", "experiment.skip_unavailable=true")
    assert "ghost" in out.unavailable and "not in this tree yet" in out.unavailable["ghost"]
    rows = [json.loads(line) for line in open(out.run_dir / "results.jsonl")]
    assert any(r["decoder"] == "ghost" and r["status"] == "unavailable" for r in rows)
    assert any(r["decoder"] == "greedy" and r["status"] == "ok" for r in rows)


def test_unavailable_decoder_raises_without_skip(tmp_path, monkeypatch):
    monkeypatch.setitem(ADAPTER_MODULES, "ghost", "eval.adapters.ghost_not_written")
    with pytest.raises(ModuleNotFoundError):
        _run(tmp_path, "experiment.decoders=[greedy,ghost]")


def test_missing_set_lists_valid_sets(tmp_path):
    with pytest.raises(ValueError, match=r"not in the workload.*clean"):
        _run(tmp_path, "data.sets=[test_clean]")


def test_boost_sweep_labels_and_greedy_refuses_boosts(tmp_path):
    out = _run(tmp_path, "experiment.decoders=[greedy,flashlight]", "experiment.skip_unavailable=true",
               "boost.mode=test_set_words", "boost.sweep=[0.0,2.0]")
    assert "greedy[boost=2]" in out.unavailable and "NotImplementedError" in out.unavailable["greedy[boost=2]"]
    ok = {(r["decoder"], r["dataset"]) for r in out.rows if r["status"] == "ok"}
    assert ("flashlight[boost=0]", "other") in ok and ("flashlight[boost=2]", "other") in ok


def test_flashlight_repairs_greedy_errors_with_lexicon_and_lm(tmp_path):
    out = _run(tmp_path, "experiment.decoders=[greedy,flashlight]")
    wer = {(r["decoder"], r["dataset"]): r["wer"] for r in out.rows if r["status"] == "ok"}
    assert wer[("greedy", "other")] > 0.1
    assert wer[("flashlight", "other")] < wer[("greedy", "other")]
    assert wer[("flashlight", "clean")] == 0.0


def test_flashlight_word_boost_flips_an_ambiguous_word(tmp_path):
    """Frames equally likely to spell 'cat' or 'hat': the boosted word wins."""
    wl = FakeWorkload(tmp_path / "wl")
    tokens = wl.token_set()
    ctx = DecodingContext(tokens=tokens, arpa_path=wl.arpa_path, words_path=wl.words_path)
    dec = build_decoder("flashlight", {"name": "flashlight", "lm_weight": 0.5, "word_score": 0.0}, ctx)
    lp = fake_log_probs("cat", tokens, corrupt=False)
    c, h = tokens.tokens.index("c"), tokens.tokens.index("h")
    lp[1, c] = lp[1, h] = float(torch.log(torch.tensor(0.49)))
    lp_t, lengths = torch.from_numpy(lp)[None], torch.tensor([lp.shape[0]])
    assert dec.decode(lp_t, lengths, boosts=[{"hat": 3.0}])[0].words == ["hat"]
    assert dec.decode(lp_t, lengths, boosts=[{"cat": 3.0}])[0].words == ["cat"]


def test_greedy_decoder_collapses_repeats_and_blanks():
    from eval.adapters.greedy import greedy_ctc

    # blank = 0; frames: 1 1 0 1 2 2 0 (pad) -> tokens 1 1 2
    seq = [1, 1, 0, 1, 2, 2, 0, 2]
    lp = torch.full((1, len(seq), 3), -10.0)
    for t, c in enumerate(seq):
        lp[0, t, c] = 0.0
    tokens, times, scores = greedy_ctc(lp, torch.tensor([7]), blank_id=0)
    assert tokens == [[1, 1, 2]] and times == [[0, 3, 4]]
    assert float(scores[0]) == pytest.approx(0.0)


def test_foreign_graph_dir_is_not_used(tmp_path):
    """Regression: a graph dir built for another workload (same scale name) fed its BPE lexicon to
    Flashlight on a char workload, so every word was out of lexicon and WER was 100 %."""
    gdir = tmp_path / "graphs" / "tiny" / "bpe_blanklast" / "compact"
    gdir.mkdir(parents=True)
    (gdir / "graph_info.json").write_text(json.dumps({"token_kind": "bpe", "sources": {"arpa": "/elsewhere/lm.arpa"}}))
    (gdir / "lexicon.txt").write_text("cat ▁ca t\n")
    out = _run(tmp_path, "decoder=flashlight")
    assert {r["dataset"]: r["wer"] for r in out.rows}["clean"] == 0.0


def test_make_boosts_modes(tmp_path):
    from eval.acoustic.base import Utterance
    from eval.config import validate_config
    from eval.runner import boost_values, make_boosts

    utts = [Utterance("u1", "The cat", 1.0), Utterance("u2", "a dog", 1.0)]
    words = tmp_path / "words.txt"
    words.write_text("cat 10\nhat 3\n")
    cfg = validate_config(compose_config(["boost.mode=words", f"boost.words_file={words}", "boost.words=[dog]", "boost.value=2.5"]))
    assert boost_values(cfg) == [2.5]
    assert make_boosts(cfg, utts, 2.5) == [{"dog": 2.5, "cat": 2.5, "hat": 2.5}] * 2
    cfg = validate_config(compose_config(["boost.mode=test_set_words", "boost.sweep=[1,4]"]))
    assert boost_values(cfg) == [1.0, 4.0]
    assert make_boosts(cfg, utts, 4.0)[0] == {"a": 4.0, "cat": 4.0, "dog": 4.0, "the": 4.0}
    per = tmp_path / "per.jsonl"
    per.write_text(json.dumps({"id": "u2", "boosts": {"dog": 2.0}}) + "\n")
    cfg = validate_config(compose_config(["boost.mode=per_utterance_file", f"boost.per_utterance_file={per}"]))
    assert make_boosts(cfg, utts, 1.5) == [{}, {"dog": 3.0}]
    assert make_boosts(validate_config(compose_config([])), utts, 0.0) is None


def test_per_utterance_boosts_follow_ids_when_the_source_reorders(tmp_path, monkeypatch):
    """Regression: boosts were sliced by position, so a source that sorts utterances (NeMo sorts by
    length) handed each utterance another utterance's boosts."""
    from _eval_fakes import FakeSource

    from decoders.types import Hypothesis
    from eval.adapters.base import _REGISTRY

    class Spy:
        name = "spy"

        def decode(self, log_probs, lengths, boosts=None):
            return [Hypothesis(tokens=[], words=sorted(b), score=0.0) for b in boosts]

        def pop_stats(self):
            return {"overflow_count": 1, "partial_count": 2, "note": "ignored"}

    monkeypatch.setitem(ADAPTER_MODULES, "spy", "tests.none")
    monkeypatch.setitem(_REGISTRY, "spy", lambda cfg, ctx: Spy())

    class Reversed(FakeSource):
        def batches(self, utterances, batch_size):
            return super().batches(list(reversed(utterances)), batch_size)

    wl = FakeWorkload(tmp_path / "wl")
    per = tmp_path / "per.jsonl"
    per.write_text("".join(json.dumps({"id": f"clean-{i}", "boosts": {f"w{i}": 1.0}}) + "\n" for i in range(5)))
    cfg = compose_config([f"experiment.output_dir={tmp_path / 'runs'}", f"graph.root={tmp_path / 'g'}", "experiment.run=r",
                          "experiment.progress=false", "experiment.batch_size=2", "experiment.decoders=[spy]",
                          "data.sets=[clean]", "boost.mode=per_utterance_file", f"boost.per_utterance_file={per}"])
    out = run_experiment(cfg, workload=wl, source_factory=lambda c, **kw: Reversed(kw["tokens"], corrupt=False))
    hyps = {h["id"]: h["hyp"] for h in map(json.loads, open(out.run_dir / "hyps.jsonl"))}
    assert hyps == {f"clean-{i}": f"w{i}" for i in range(5)}
    # decoder counters: one per timed batch (3 batches of <= 2), the warm-up decode not counted
    [row] = [r for r in out.rows if r["status"] == "ok"]
    assert row["overflow_count"] == 3 and row["decoder_stats"] == {"overflow_count": 3, "partial_count": 6}


def test_graph_mismatch_detects_retrained_tokens_and_changed_lm(tmp_path):
    """Regression: a regenerated workload kept the BPE size but not its pieces; the stale graph lexicon
    was used and Flashlight's WER jumped 4x. Token inventory and ARPA contents are both checked."""
    import hashlib

    from eval.runner import graph_mismatch

    wl = FakeWorkload(tmp_path / "wl")
    tokens = wl.token_set()
    gdir = tmp_path / "g"
    gdir.mkdir()
    arpa_sha = hashlib.sha256(wl.arpa_path.read_bytes()).hexdigest()[:16]
    tok_sha = hashlib.sha256("\n".join(tokens.tokens).encode()).hexdigest()[:16]
    info = {"token_kind": "char", "blank_id": 0, "vocab_size": tokens.vocab_size,
            "sources": {"arpa": str(wl.arpa_path), "arpa_sha256": arpa_sha, "tokens_sha256": tok_sha}}
    (gdir / "graph_info.json").write_text(json.dumps(info))
    assert graph_mismatch(gdir, wl.arpa_path, tokens) is None
    info["sources"]["tokens_sha256"] = "0" * 16
    (gdir / "graph_info.json").write_text(json.dumps(info))
    assert "token inventory" in graph_mismatch(gdir, wl.arpa_path, tokens)
    info["sources"]["tokens_sha256"] = tok_sha
    (gdir / "graph_info.json").write_text(json.dumps(info))
    wl.arpa_path.write_text(wl.arpa_path.read_text().replace("-99", "-98"))
    assert "changed since" in graph_mismatch(gdir, wl.arpa_path, tokens)


def test_acoustic_stage_memory_reaches_the_results(tmp_path):
    """Issue 5: the source's per-stage GPU memory (NeMo measures features/encoder/ctc_head peaks per batch)
    lands in every result row as the per-stage maximum over the dataset, and over all datasets in 'all'."""
    from _eval_fakes import FakeSource

    class Measured(FakeSource):
        def batches(self, utterances, batch_size):
            for i, batch in enumerate(super().batches(utterances, batch_size)):
                batch.stage_memory_bytes = {"encoder": 1000 * (i + 1), "features": 7}
                yield batch

    wl = FakeWorkload(tmp_path / "wl")
    cfg = compose_config([f"experiment.output_dir={tmp_path / 'runs'}", f"graph.root={tmp_path / 'g'}", "experiment.run=r",
                          "experiment.progress=false", "experiment.batch_size=2", "decoder=greedy"])
    out = run_experiment(cfg, workload=wl, source_factory=lambda c, **kw: Measured(kw["tokens"], corrupt=False))
    rows = {r["dataset"]: r for r in out.rows if r["status"] == "ok"}
    # 5 utterances per set in batches of 2 -> 3 batches: the encoder peak is the third batch's
    assert rows["clean"]["acoustic_stage_peak_bytes"] == {"encoder": 3000, "features": 7}
    assert rows["all"]["acoustic_stage_peak_bytes"] == {"encoder": 3000, "features": 7}
