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
from reports.schema import ResultRow, load_rows


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
    assert load_rows(out.run_dir) == out.rows  # every line a valid ResultRow, the same the runner returned
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


def test_unavailable_decoder_is_listed_with_reason(tmp_path):
    """torchaudio_ctc needs CUDA: on this machine its build fails, and with skip_unavailable it is listed with
    the reason (an unavailable row) beside the decoders that ran."""
    if torch.cuda.is_available():
        pytest.skip("torchaudio_ctc can be built here")
    out = _run(tmp_path, "experiment.decoders=[greedy,torchaudio_ctc]", "experiment.skip_unavailable=true")
    assert "torchaudio_ctc" in out.unavailable and "Error" in out.unavailable["torchaudio_ctc"]
    rows = load_rows(out.run_dir)
    assert all(isinstance(r, ResultRow) for r in rows)
    assert any(r.decoder == "torchaudio_ctc" and r.status == "unavailable" and r.reason for r in rows)
    assert any(r.decoder == "greedy" and r.ok for r in rows)


def test_unavailable_decoder_raises_without_skip(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("torchaudio_ctc can be built here")
    with pytest.raises((RuntimeError, ImportError)):
        _run(tmp_path, "experiment.decoders=[greedy,torchaudio_ctc]")


def test_a_registered_adapter_module_that_does_not_exist_is_loud(tmp_path, monkeypatch):
    """Regression (issue 11): a missing adapter module was reported as 'not in this tree yet' and skipped, so
    a renamed module turned its decoder into a silent no-op. It is now an error before any work."""
    monkeypatch.setitem(ADAPTER_MODULES, "ghost", "eval.adapters.ghost_not_written")
    with pytest.raises(ModuleNotFoundError, match="ghost_not_written"):
        _run(tmp_path, "experiment.decoders=[greedy,ghost]", "experiment.skip_unavailable=true")
    assert not (tmp_path / "runs").exists()


def test_missing_set_lists_valid_sets(tmp_path):
    with pytest.raises(ValueError, match=r"not in the workload.*clean"):
        _run(tmp_path, "data.sets=[test_clean]")


def test_boost_sweep_labels_and_greedy_refuses_boosts(tmp_path):
    out = _run(tmp_path, "experiment.decoders=[greedy,flashlight]", "experiment.skip_unavailable=true",
               "boost.mode=test_set_words", "boost.sweep=[0.0,2.0]")
    assert "greedy[boost=2]" in out.unavailable and "NotImplementedError" in out.unavailable["greedy[boost=2]"]
    ok = {(r.decoder, r.dataset) for r in out.rows if r.ok}
    assert ("flashlight[boost=0]", "other") in ok and ("flashlight[boost=2]", "other") in ok


def test_flashlight_repairs_greedy_errors_with_lexicon_and_lm(tmp_path):
    out = _run(tmp_path, "experiment.decoders=[greedy,flashlight]")
    wer = {(r.decoder, r.dataset): r.wer for r in out.rows if r.ok}
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
    gdir = tmp_path / "graphs" / "tiny" / "char_blankfirst" / "compact"  # where this workload's graphs go
    gdir.mkdir(parents=True)
    (gdir / "graph_info.json").write_text(json.dumps({"token_kind": "bpe", "sources": {"arpa_sha256": "0" * 16}}))
    (gdir / "lexicon.txt").write_text("cat ▁ca t\n")
    out = _run(tmp_path, "decoder=flashlight")
    assert {r.dataset: r.wer for r in out.rows}["clean"] == 0.0


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

    monkeypatch.setitem(_REGISTRY, "greedy", lambda cfg, ctx: Spy())  # greedy's (empty) config, the spy's decode

    class Reversed(FakeSource):
        def batches(self, utterances, batch_size):
            return super().batches(list(reversed(utterances)), batch_size)

    wl = FakeWorkload(tmp_path / "wl")
    per = tmp_path / "per.jsonl"
    per.write_text("".join(json.dumps({"id": f"clean-{i}", "boosts": {f"w{i}": 1.0}}) + "\n" for i in range(5)))
    cfg = compose_config([f"experiment.output_dir={tmp_path / 'runs'}", f"graph.root={tmp_path / 'g'}", "experiment.run=r",
                          "experiment.progress=false", "experiment.batch_size=2", "experiment.decoders=[greedy]",
                          "data.sets=[clean]", "boost.mode=per_utterance_file", f"boost.per_utterance_file={per}"])
    out = run_experiment(cfg, workload=wl, source_factory=lambda c, **kw: Reversed(kw["tokens"], corrupt=False))
    hyps = {h["id"]: h["hyp"] for h in map(json.loads, open(out.run_dir / "hyps.jsonl"))}
    assert hyps == {f"clean-{i}": f"w{i}" for i in range(5)}
    # decoder counters: one per timed batch (3 batches of <= 2), the warm-up decode not counted
    [row] = [r for r in out.rows if r.ok]
    assert row.overflow_count == 3 and row.decoder_stats == {"overflow_count": 3, "partial_count": 6}


def test_graph_mismatch_detects_retrained_tokens_and_changed_lm(tmp_path):
    """Regression: a regenerated workload kept the BPE size but not its pieces; the stale graph lexicon
    was used and Flashlight's WER jumped 4x. Token inventory and ARPA contents are both checked."""
    import hashlib

    from eval.graphs import graph_mismatch

    wl = FakeWorkload(tmp_path / "wl")
    tokens = wl.token_set()
    gdir = tmp_path / "g"
    gdir.mkdir()
    arpa_sha = hashlib.sha256(wl.arpa_path.read_bytes()).hexdigest()[:16]
    tok_sha = hashlib.sha256("\n".join(tokens.tokens).encode()).hexdigest()[:16]
    info = {"token_kind": "char", "blank_id": 0, "vocab_size": tokens.vocab_size,
            "sources": {"arpa_sha256": arpa_sha, "tokens_sha256": tok_sha}}
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
    rows = {r.dataset: r for r in out.rows if r.ok}
    # 5 utterances per set in batches of 2 -> 3 batches: the encoder peak is the third batch's
    assert rows["clean"].acoustic_stage_peak_bytes == {"encoder": 3000, "features": 7}
    assert rows["all"].acoustic_stage_peak_bytes == {"encoder": 3000, "features": 7}


# ---------------------------------------------------------------------------------------------------------
# Run directories (issue 11)
# ---------------------------------------------------------------------------------------------------------


def test_interrupted_rerun_leaves_the_previous_run_whole(tmp_path, monkeypatch):
    """Regression (issue 11): an interrupted re-run into the same experiment.run left the old results.jsonl
    beside a new partial hyps.jsonl, and reports.cli reported the stale results as the run's."""
    import eval.runner as runner

    wl = FakeWorkload(tmp_path / "wl")
    first = _run(tmp_path, "decoder=greedy", workload=wl)
    def files(d):
        return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}

    before = files(first.run_dir)

    def interrupted(*args, **kwargs):
        args[-1].write('{"partial": true}\n')  # the hyps file: some hypotheses already written
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "decode_dataset", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "decoder=greedy", workload=wl)
    after = files(first.run_dir)
    assert after == before  # the old run, whole: no new partial hyps beside the old results
    assert [p.name for p in first.run_dir.parent.iterdir()] == ["r1"]  # no partial directory left behind


def test_completed_rerun_replaces_the_previous_run(tmp_path):
    wl = FakeWorkload(tmp_path / "wl")
    _run(tmp_path, "decoder=greedy", workload=wl)
    out = _run(tmp_path, "decoder=greedy", "data.sets=[clean]", workload=wl)
    assert [(r.decoder, r.dataset) for r in load_rows(out.run_dir)] == [("greedy", "clean")]
    assert {h["dataset"] for h in map(json.loads, open(out.run_dir / "hyps.jsonl"))} == {"clean"}


@pytest.mark.parametrize("override", ["experiment.run=../../x", "experiment.name=/abs", "experiment.run=a/b",
                                      "experiment.name=..", "experiment.run=.hidden"])
def test_run_and_experiment_names_cannot_escape_output_dir(tmp_path, override):
    """Regression (issue 11): `experiment.run=../../x` and `experiment.name=/abs` wrote outside output_dir."""
    before = set(tmp_path.rglob("*"))
    with pytest.raises(ValueError, match="not a valid directory name"):
        _run(tmp_path, "decoder=greedy", override)
    created = {p for p in set(tmp_path.rglob("*")) - before if "wl" not in p.relative_to(tmp_path).parts}
    assert created == set()


@pytest.mark.parametrize("value", ["0", "-1"])
def test_max_utterances_below_one_is_refused(tmp_path, value):
    """Regression (issue 11): data.max_utterances=0 or -1 decoded one utterance per set without a word."""
    with pytest.raises(ValueError, match="data.max_utterances must be >= 1 or null"):
        _run(tmp_path, "decoder=greedy", f"data.max_utterances={value}")
    out = _run(tmp_path, "decoder=greedy", "data.max_utterances=2")
    assert {r.dataset: r.utterances for r in out.rows} == {"clean": 2, "other": 2, "all": 4}


def _eval_run(*args, cwd):
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    env = {**__import__("os").environ, "PYTHONPATH": str(repo)}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, "-m", "eval.run", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("args, message", [
    (["experiment.batch_size=0"], "experiment.batch_size must be positive"),
    (["data.max_utterances=0"], "data.max_utterances must be >= 1"),
    (["decoder.serch_beam=3"], "serch_beam"),
    (["decoder=wfst", "decoder.search_beam=wide"], "search_beam"),
    (["model.token_kind=bep"], "bep"),
    (["experiment.run=../../x"], "not a valid directory name"),
])
def test_config_errors_exit_2_with_one_line(tmp_path, args, message):
    """Regression (issue 11): `python -m eval.run experiment.batch_size=0` (and every config error) exited 1
    with a Hydra traceback; the exit-2 handler was never reached."""
    res = _eval_run(*args, f"experiment.output_dir={tmp_path}", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], res.stderr
    assert "Traceback" not in res.stderr and list(tmp_path.iterdir()) == []


def test_wfst_search_beam_override_needs_no_plus_and_shows_in_help(tmp_path):
    """Regression (issue 11): `decoder.search_beam=8` failed with "Key 'search_beam' is not in struct" and
    --help did not list the parameter, because it lived only in the adapter schema."""
    from eval.config import validate_config

    cfg = validate_config(compose_config(["decoder=wfst", "decoder.search_beam=8"]))
    from eval.config import resolve_decoder_config

    assert resolve_decoder_config("wfst", cfg).search_beam == 8.0
    res = _eval_run("decoder=wfst", "--help", cwd=tmp_path)
    assert res.returncode == 0 and "search_beam: 17.0" in res.stdout and "max_rescues:" in res.stdout


def test_k2_adapter_refuses_a_malicious_hlg_pickle(tmp_path):
    """Regression (issue 11): the k2 adapter read the user's HLG.pt with torch.load(weights_only=False), so a
    crafted file ran its payload. The payload here would create a marker file."""
    import pickle

    from eval.adapters.k2_adapter import load_hlg_pt

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "HLG.pt"
    with open(path, "wb") as f:
        pickle.dump({"arcs": Payload(), "aux_labels": Payload()}, f)
    with pytest.raises(ValueError, match="refused to unpickle") as info:
        load_hlg_pt(path)
    assert "\n" not in str(info.value)
    assert not marker.exists()
    torch.save({"arcs": torch.zeros(3, 4, dtype=torch.int32), "aux_labels": torch.zeros(3, dtype=torch.int32)}, path)
    assert set(load_hlg_pt(path)) == {"arcs", "aux_labels"}  # a tensors-only HLG.pt still loads


def test_build_graphs_refuses_unknown_arguments():
    """Regression (issue 11): `**_ignored` in recipes.build_graphs swallowed renamed or misspelt arguments."""
    from recipes.build_graphs import build_graphs

    with pytest.raises(TypeError, match="topology"):
        build_graphs(workload=object(), topology="compact")
