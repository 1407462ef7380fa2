"""The paper-experiment machinery: bootstrap intervals (eval.metrics), Flashlight's process pool, the driver's
option checks and run plans (eval.paper), and the renderer (reports.paper) on a hand-made experiment folder."""
import json
import math

import numpy as np
import pytest
import torch

from _eval_fakes import SENTENCES, FakeWorkload, fake_log_probs
from eval import paper
from eval.metrics import (bootstrap_wer_ci, paired_bootstrap, utterance_error_counts, word_error_stats)

# ---------------------------------------------------------------------------------------------------------
# Bootstrap
# ---------------------------------------------------------------------------------------------------------


def _binomial_corpus(rng, n_utts=300, words=12, p=0.2):
    """Utterances of `words` words, each wrong with probability p: the corpus WER's expectation is p."""
    return rng.binomial(words, p, size=n_utts).tolist(), [words] * n_utts


def test_utterance_error_counts_sum_to_the_corpus_stats():
    refs = ["the cat sat", "a dog", "red hat on the mat", ""]
    hyps = ["the bat sat down", "", "red hat the mat", "extra"]
    errors, words = utterance_error_counts(refs, hyps)
    stats = word_error_stats(refs, hyps)
    assert words == [3, 2, 5, 0]
    assert errors == [2, 2, 1, 1]  # sub+ins, 2 del, 1 del, 1 ins into an empty reference
    assert sum(errors) == stats.errors and sum(words) == stats.ref_words


def test_bootstrap_ci_covers_a_known_proportion_at_about_the_nominal_rate():
    rng = np.random.default_rng(7)
    covered, widths = 0, []
    trials = 80
    for k in range(trials):
        errors, words = _binomial_corpus(rng)
        ci = bootstrap_wer_ci(errors, words, n_resamples=1000, seed=k)
        assert ci.low <= ci.estimate <= ci.high
        assert ci.estimate == pytest.approx(sum(errors) / sum(words))
        covered += ci.low <= 0.2 <= ci.high
        widths.append(ci.high - ci.low)
    # binomial: sd of the corpus WER = sqrt(p(1-p)/N) = 0.0067 for N = 3600 words -> 95 % width ~ 0.026
    assert 0.85 <= covered / trials <= 1.0
    assert np.mean(widths) == pytest.approx(2 * 1.96 * math.sqrt(0.2 * 0.8 / 3600), rel=0.2)


def test_bootstrap_is_seeded():
    errors, words = _binomial_corpus(np.random.default_rng(1))
    a = bootstrap_wer_ci(errors, words, seed=3)
    assert a == bootstrap_wer_ci(errors, words, seed=3)
    assert (a.low, a.high) != (bootstrap_wer_ci(errors, words, seed=4).low, bootstrap_wer_ci(errors, words, seed=4).high)


def test_paired_bootstrap_sign_follows_the_better_system():
    rng = np.random.default_rng(2)
    base, words = _binomial_corpus(rng, p=0.2)
    better = [max(e - (i % 3 == 0), 0) for i, e in enumerate(base)]  # a third of the utterances one error fewer
    res = paired_bootstrap(better, base, words, seed=0)
    assert res.estimate < 0 and res.high < 0 and res.prob_a_better > 0.99
    rev = paired_bootstrap(base, better, words, seed=0)
    assert rev.low > 0 and rev.prob_a_better < 0.01
    assert rev.estimate == pytest.approx(-res.estimate)
    same = paired_bootstrap(base, base, words, seed=0)
    assert same.estimate == same.low == same.high == 0.0


def test_paired_bootstrap_is_narrower_than_the_independent_intervals():
    """The point of pairing: a small consistent improvement is resolved although the two CIs overlap."""
    rng = np.random.default_rng(3)
    base, words = _binomial_corpus(rng, p=0.2)
    better = [max(e - (i % 5 == 0), 0) for i, e in enumerate(base)]
    a, b = bootstrap_wer_ci(better, words), bootstrap_wer_ci(base, words)
    assert a.high > b.low  # the independent intervals overlap
    assert paired_bootstrap(better, base, words).high < 0


@pytest.mark.parametrize("call, match", [
    (lambda: bootstrap_wer_ci([], []), "no utterances"),
    (lambda: bootstrap_wer_ci([1, 2], [3]), "differ in length"),
    (lambda: bootstrap_wer_ci([1], [3], n_resamples=0), "n_resamples"),
    (lambda: bootstrap_wer_ci([1], [3], confidence=1.0), "confidence"),
    (lambda: bootstrap_wer_ci([-1], [3]), "non-negative"),
    (lambda: paired_bootstrap([1], [1, 2], [3]), "differ in length"),
])
def test_bootstrap_bad_input_is_one_line(call, match):
    with pytest.raises(ValueError, match=match) as e:
        call()
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------------------
# Flashlight num_processes
# ---------------------------------------------------------------------------------------------------------


def _flashlight_inputs(tmp_path):
    pytest.importorskip("flashlight.lib.text.decoder")
    from eval.acoustic.simulator import pad_log_probs
    from eval.adapters.base import DecodingContext

    wl = FakeWorkload(tmp_path / "wl")
    tokens = wl.token_set()
    rng = np.random.default_rng(0)
    arrays = []
    for name, sents in SENTENCES.items():
        for s in sents:
            lp = fake_log_probs(s, tokens, corrupt=name == "other")
            lp = lp + rng.normal(0, 0.8, lp.shape).astype(np.float32)  # noisy: the search has choices to make
            arrays.append(lp - np.logaddexp.reduce(lp, axis=1, keepdims=True))
    lp, lengths = pad_log_probs(arrays, tokens.blank_id)
    lengths[3] = 0  # an empty utterance in the middle of the batch
    ctx = DecodingContext(tokens=tokens, arpa_path=wl.arpa_path, words_path=wl.words_path)
    return ctx, lp, lengths


def test_flashlight_process_pool_gives_the_same_hypotheses(tmp_path):
    from eval.adapters.base import build_decoder

    ctx, lp, lengths = _flashlight_inputs(tmp_path)
    cfg = {"name": "flashlight", "lm_weight": 0.5, "word_score": 0.5}
    one = build_decoder("flashlight", {**cfg, "num_processes": 1}, ctx)
    two = build_decoder("flashlight", {**cfg, "num_processes": 2}, ctx)
    try:
        boosts = [{"cat": 2.0, "dog": 1.0} if i % 2 else {} for i in range(lp.shape[0])]
        for b in (None, boosts):
            h1, h2 = one.decode(lp, lengths, boosts=b), two.decode(lp, lengths, boosts=b)
            assert len(h1) == len(h2) == lp.shape[0]
            assert [(h.tokens, h.words, h.timesteps) for h in h1] == [(h.tokens, h.words, h.timesteps) for h in h2]
            assert [h.score for h in h1] == pytest.approx([h.score for h in h2])
        assert h1[3].words == [] and any(h.words for h in h1)
    finally:
        two.close()


def test_flashlight_worker_that_cannot_build_fails_once(tmp_path):
    """Regression: an exception escaping a multiprocessing.Pool initializer kills the worker and the pool spawns a
    replacement forever, so decode() hung; the workers' build failure must come back as one RuntimeError."""
    from eval.adapters.base import build_decoder

    ctx, lp, lengths = _flashlight_inputs(tmp_path)
    dec = build_decoder("flashlight", {"name": "flashlight", "num_processes": 2}, ctx)
    try:
        ctx.arpa_path.unlink()  # the parent already loaded it; the workers, started on first decode, cannot
        with pytest.raises(RuntimeError, match="could not build its decoder.*ARPA LM not found"):
            dec.decode(lp, lengths)
    finally:
        dec.close()


@pytest.mark.parametrize("bad", [0, -2])
def test_flashlight_num_processes_must_be_positive(tmp_path, bad):
    from eval.adapters.base import build_decoder

    ctx, _, _ = _flashlight_inputs(tmp_path)
    with pytest.raises(ValueError, match="num_processes must be an integer >= 1"):
        build_decoder("flashlight", {"name": "flashlight", "num_processes": bad}, ctx)


# ---------------------------------------------------------------------------------------------------------
# The driver: options, plans, config validation
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, match", [
    (["table9"], None),  # argparse: exit status 2
    (["table1", "--sentences", "0"], "--sentences must be an integer >= 1"),
    (["table1", "--resamples", "0"], "--resamples"),
    (["fig6", "--boost-points", "1"], "--boost-points"),
    (["fig6", "--sentences", "100", "--boost-sentences", "300"], "must not exceed --sentences"),
    (["fig6", "--sentences", "100", "--boost-sentences", "50", "--ctc-lm-boost-sentences", "101"],
     "must not exceed --sentences"),
    (["fig6", "--ctc-lm-boost-sentences", "-1"], "--ctc-lm-boost-sentences must be an integer >= 0"),
    (["fig6", "--ctc-lm-boost-points", "1"], "--ctc-lm-boost-points"),
    (["fig6", "--ctc-lm-beam-size", "0"], "--ctc-lm-beam-size"),
    (["table1", "--topologies", "compact,fancy"], "--topologies"),
    (["table1", "--graphs", "TLG,XLG"], "--graphs"),
    (["fig6", "--beams", "8,-1"], "--beams must be positive"),
    (["fig6", "--beams", "8,x"], "--beams must be comma-separated numbers"),
    (["table1", "--model", "/nonexistent.nemo", "--cache-dir", "/nonexistent"], "no such .nemo file"),
])
def test_driver_options_are_checked(argv, match):
    if match is None:
        with pytest.raises(SystemExit):
            paper.parse_args(argv)
        return
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        paper.parse_args(argv)
    assert paper.main(argv) == 2


def _manifests(tmp_path):
    out = {}
    for name, sents in (("clean", ["the cat sat", "a dog"]), ("other", ["the red hat", "a cat ran"])):
        p = tmp_path / f"{name}.jsonl"
        p.write_text("".join(json.dumps({"id": f"{name}{i}", "text": s, "duration": 1.0}) + "\n"
                             for i, s in enumerate(sents)))
        out[name] = str(p)
    return out


def test_every_planned_run_composes_and_validates(tmp_path, monkeypatch):
    """Each run's overrides (YAML + plan) go through the same composition and schema checks as eval.run, so a
    typo in a plan fails here, not after an hour of decoding."""
    from eval.config import compose_config, decoder_labels, resolve_decoder_config, validate_config

    opts = paper.PaperOptions(experiment="all", boost_points=3, flashlight_boost_sentences=1, processes=2).check()
    manifests = _manifests(tmp_path)
    monkeypatch.setattr(paper, "vocabulary", lambda scale: ["the", "cat", "sat", "a", "dog", "red", "hat", "ran",
                                                             "far", "mat", "on", "big", "x", "y", "z"])
    plans = {"table1": paper.plan_table1(opts), "fig6": paper.plan_fig6(opts, manifests, tmp_path / "words"),
             "table3": paper.plan_table3(opts), "table2": paper.plan_table2(opts)}
    assert [r.name for r in plans["table1"]] == [f"{t}_{g}" for t in ("compact", "normal", "minimal")
                                                 for g in ("tlg", "hlg")]
    assert len(plans["fig6"]) == 2 * 2 * 2 * 2  # decoders x sets x beams x scenarios
    assert [r.name for r in plans["table3"]] == ["flashlight_p1", "flashlight_p2", "wfst_cpu", "wfst_gpu"]
    assert [r.name for r in plans["table2"]] == ["end_to_end"]
    for exp, runs in plans.items():
        for r in runs:
            cfg = validate_config(compose_config([*paper.common_overrides(opts, exp, manifests), *r.overrides]))
            assert cfg.experiment.name == paper.DIRS[exp] and cfg.experiment.run == r.name
            assert cfg.experiment.output_dir == opts.out_root
            for label in decoder_labels(cfg):
                name = label.split("@")[0]
                dcfg = resolve_decoder_config(name, cfg)
                for k, v in paper.dev_chosen_scales().get(name, {}).items():  # the demo's dev-chosen scales
                    assert dcfg[k] == v
                if name == "wfst" and exp == "table1":
                    assert dcfg.graph == r.name.split("_")[1].upper() and cfg.graph.topology.value == r.name.split("_")[0]
                if name == "flashlight" and exp == "table3":
                    assert dcfg.num_processes == int(r.name[len("flashlight_p"):])
                if name == "flashlight" and exp == "table2":
                    assert dcfg.num_processes == 2
            # table2 times the NeMo model itself; the others decode its cached log-probs
            assert cfg.model.source == ("nemo" if exp == "table2" else "cache")
            if exp == "fig6":
                beam = float(r.name.split("_beam")[1].split("_")[0])
                assert list(cfg.boost.sweep) == paper.boost_values(beam, 3 if "wfst" in r.name else 5)
                assert set(cfg.data.manifests) == {r.name.rsplit("_", 1)[1]}
    # the inaccurate list: as long as the test words, none of them
    acc = (tmp_path / "words" / "accurate_clean_300.txt").read_text().split()
    ina = (tmp_path / "words" / "inaccurate_clean_300.txt").read_text().split()
    assert sorted(acc) == ["a", "cat", "dog", "sat", "the"] and len(ina) == len(acc) and not set(ina) & set(acc)


def test_fig6_plans_ctc_lm_at_its_beam_size_over_every_wfst_grid(tmp_path, monkeypatch):
    """--ctc-lm-boost-sentences adds one ctc_lm sweep per (scenario, set) at its beam size, over the union of the
    WFST beams' boost values, on its own sentence count and word lists; off by default."""
    from eval.config import compose_config, resolve_decoder_config, validate_config

    manifests = _manifests(tmp_path)
    monkeypatch.setattr(paper, "vocabulary", lambda scale: ["the", "cat", "sat", "a", "dog", "red", "hat", "ran",
                                                             "far", "mat", "on", "big", "x", "y", "z"])
    off = paper.plan_fig6(paper.PaperOptions(experiment="fig6").check(), manifests, tmp_path / "w0")
    assert not [r for r in off if r.name.startswith("ctc_lm")]
    opts = paper.parse_args(["fig6", "--beams", "4,6", "--boost-points", "3", "--ctc-lm-boost-sentences", "1",
                             "--ctc-lm-boost-points", "3"])
    runs = {r.name: r for r in paper.plan_fig6(opts, manifests, tmp_path / "words")}
    ctc = sorted(n for n in runs if n.startswith("ctc_lm"))
    assert ctc == [f"ctc_lm_beam10_{s}_{d}" for s in ("accurate", "inaccurate") for d in ("clean", "other")]
    assert len(runs) == 2 * 2 * 2 + 4  # wfst: sets x beams x scenarios; ctc_lm: sets x scenarios
    for name in ctc:
        cfg = validate_config(compose_config([*paper.common_overrides(opts, "fig6", manifests),
                                              *runs[name].overrides]))
        assert list(cfg.experiment.decoders) == ["ctc_lm"] and cfg.experiment.run == name
        assert resolve_decoder_config("ctc_lm", cfg).beam_size == 10
        # every WFST panel's x values: 0, 2, 4 (beam 4) and 0, 3, 6 (beam 6)
        assert list(cfg.boost.sweep) == [0.0, 2.0, 3.0, 4.0, 6.0]
        scenario, dataset = name.split("_")[-2:]
        assert set(cfg.data.manifests) == {dataset} and cfg.data.max_utterances == 1
        assert cfg.boost.words_file.endswith(f"{scenario}_{dataset}_1.txt")
    # its own sentence count: the clean list has the first sentence's words only
    assert (tmp_path / "words" / "accurate_clean_1.txt").read_text().split() == ["cat", "sat", "the"]
    assert paper.union_boost_values([8.0, 17.0], 9) == sorted(set(paper.boost_values(8.0, 9))
                                                              | set(paper.boost_values(17.0, 9)))
    opts10 = paper.parse_args(["fig6", "--ctc-lm-boost-sentences", "1", "--ctc-lm-beam-size", "4"])
    assert "ctc_lm_beam4_accurate_clean" in {r.name for r in paper.plan_fig6(opts10, manifests, tmp_path / "w2")}


def test_partial_rerun_keeps_the_earlier_commands(tmp_path):
    path = tmp_path / "commands.json"
    first = {"command": "python -m eval.paper all", "options": {}, "seconds": 3.0,
             "runs": [{"run": "wfst_a", "seconds": 1.0}, {"run": "wfst_b", "seconds": 2.0}]}
    assert paper.commands_record(path, first, []) == first  # no file yet
    path.write_text(json.dumps(first))
    second = {"command": "python -m eval.paper fig6 --runs wfst_b,ctc_c", "options": {}, "seconds": 5.0,
              "runs": [{"run": "wfst_b", "seconds": 2.5}, {"run": "ctc_c", "seconds": 2.5}]}
    rec = paper.commands_record(path, second, ["wfst_b", "ctc_c"])
    assert rec["runs"] == second["runs"] and rec["command"] == second["command"]
    assert [e["command"] for e in rec["earlier"]] == [first["command"]]
    assert rec["earlier"][0]["runs"] == [{"run": "wfst_a", "seconds": 1.0}]  # wfst_b was re-run
    path.write_text(json.dumps(rec))
    third = {"command": "python -m eval.paper fig6 --runs wfst_a", "options": {}, "seconds": 1.0,
             "runs": [{"run": "wfst_a", "seconds": 1.1}]}
    rec3 = paper.commands_record(path, third, ["wfst_a"])
    assert [e["command"] for e in rec3["earlier"]] == [second["command"]]  # the first has no run left
    assert paper.commands_record(path, third, []) == third  # a full run replaces the record


def test_runs_naming_no_planned_run_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paper, "synthesize_test_sets", lambda opts: _manifests(tmp_path))
    monkeypatch.setattr(paper, "vocabulary", lambda scale: ["the", "cat", "sat", "a", "dog", "red", "hat", "ran",
                                                             "far", "mat", "on", "big", "x", "y", "z"])
    argv = ["fig6", "--out-root", str(tmp_path / "out"), "--runs", "ctc_lm_beam10_accurate_clean"]
    assert paper.main(argv) == 2  # without --ctc-lm-boost-sentences there is no ctc_lm run
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --runs ctc_lm_beam10_accurate_clean: no such run in fig6") and "\n" not in err
    assert not (tmp_path / "out" / "fig6_boost" / "commands.json").exists()


def test_inaccurate_words_refuses_a_vocabulary_too_small():
    with pytest.raises(ValueError, match="lower --boost-sentences"):
        paper.inaccurate_words(["a", "b", "c"], {"a", "b"}, seed=0)
    assert paper.inaccurate_words(list("abcdef"), {"a", "b"}, seed=1) == paper.inaccurate_words(list("abcdef"),
                                                                                                {"a", "b"}, seed=1)


def test_boost_values_span_zero_to_the_beam():
    assert paper.boost_values(8.0, 5) == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert paper.boost_values(17.0, 9)[4] == 8.5


# ---------------------------------------------------------------------------------------------------------
# Bootstrap over run directories + rendering
# ---------------------------------------------------------------------------------------------------------


def _write_run(exp_dir, run, experiment, systems, boost=None, config=None, acoustic_seconds=0.0, configs=None):
    """A run directory by hand: systems = {decoder label: {dataset: [(ref, hyp), ...]}}."""
    from eval.results import combined_row, measured_row

    d = exp_dir / run
    d.mkdir(parents=True)
    rows, hyps = [], []
    env = {"cpu_model": "test", "cpu_count": 2, "gpu_name": None, "git_commit": "abc"}
    for label, sets in systems.items():
        parts = []
        for ds, pairs in sets.items():
            for i, (ref, hyp) in enumerate(pairs):
                hyps.append({"decoder": label, "dataset": ds, "id": f"{ds}{i}", "ref": ref, "hyp": hyp, "score": 0.0,
                             "tokens": []})
            parts.append(measured_row(
                experiment=experiment, run=run, decoder=label, decoder_name=label.split("[")[0], device="cpu",
                dataset=ds, wer=word_error_stats([p[0] for p in pairs], [p[1] for p in pairs]),
                audio_seconds=10.0 * len(pairs), decoder_seconds=0.5 * len(pairs), env=env,
                acoustic_seconds=acoustic_seconds * len(pairs),
                decoder_config=dict((configs or {}).get(label, config or {})), boost_value=(boost or {}).get(label)))
        rows += parts + [combined_row(parts)]
    from reports.schema import write_rows

    write_rows(d / "results.jsonl", rows)
    (d / "hyps.jsonl").write_text("".join(json.dumps(h) + "\n" for h in hyps))


def test_table1_bootstrap_and_render_from_files_alone(tmp_path):
    from reports.paper import main as render_main

    exp = tmp_path / "table1_topology"
    refs = [f"the cat sat on mat {i}" for i in range(30)]
    good = {"clean": [(r, r) for r in refs], "other": [(r, r.replace("cat", "hat")) for r in refs]}
    worse = {"clean": [(r, r if i % 4 else r.replace("sat", "")) for i, r in enumerate(refs)],
             "other": [(r, r.replace("cat", "hat").replace("mat", "")) for r in refs]}
    _write_run(exp, "compact_tlg", "table1_topology", {"greedy": worse, "wfst": good}, config={"graph": "TLG"})
    _write_run(exp, "normal_tlg", "table1_topology", {"wfst": worse}, config={"graph": "TLG"})
    boot = paper.bootstrap_experiment(exp, resamples=200, seed=0,
                                      pairs=[(("compact_tlg", "wfst"), ("normal_tlg", "wfst"))])
    by = {(i["run"], i["decoder"], i["dataset"]): i for i in boot["intervals"]}
    assert by[("compact_tlg", "wfst", "clean")]["estimate"] == 0.0
    assert by[("normal_tlg", "wfst", "all")]["utterances"] == 60
    (pc, po, pa) = boot["paired"]
    assert [p["dataset"] for p in boot["paired"]] == ["clean", "other", "all"]
    assert pa["high"] < 0 and pa["prob_a_better"] == 1.0 and pc["identical_hypotheses"] == 30 - 8
    assert json.loads((exp / "bootstrap.json").read_text()) == boot
    assert render_main([str(tmp_path)]) == 0
    md = (exp / "report.md").read_text()
    assert "wfst compact TLG" in md and "wfst normal TLG" in md and "A better (CI excludes 0)" in md
    low, high = by[("normal_tlg", "wfst", "other")]["low"], by[("normal_tlg", "wfst", "other")]["high"]
    assert f"[{100 * low:.2f}, {100 * high:.2f}]" in md
    assert (exp / "table1_topology.png").stat().st_size > 10_000


def test_fig6_and_table3_render(tmp_path):
    from reports.paper import main as render_main, rule_of_thumb, sweep_curves
    from reports.schema import load_rows

    exp = tmp_path / "fig6_boost"
    refs = [f"the cat sat {i}" for i in range(10)]
    for scenario in ("accurate", "inaccurate"):
        systems, boost = {}, {}
        for b in (0.0, 2.0, 4.0, 6.0, 8.0):
            label = f"wfst[boost={b:g}]"
            # accurate: best at 2 (a quarter of the beam), then worse; inaccurate: flat until the beam
            broken = {0.0: 2, 2.0: 0, 4.0: 1, 6.0: 5, 8.0: 9}[b] if scenario == "accurate" else (2 if b < 8 else 6)
            systems[label] = {"clean": [(r, r if i >= broken else "cat cat cat") for i, r in enumerate(refs)]}
            boost[label] = b
        _write_run(exp, f"wfst_beam8_{scenario}_clean", "fig6_boost", systems, boost=boost,
                   config={"search_beam": 8.0})
    paper.bootstrap_experiment(exp, resamples=100, seed=0)
    rows = load_rows(exp / "wfst_beam8_accurate_clean")
    curves = sweep_curves(load_rows(exp / "wfst_beam8_accurate_clean") + load_rows(exp / "wfst_beam8_inaccurate_clean"))
    rt = rule_of_thumb(curves[("wfst", 8.0, "clean")], 8.0)
    assert rt["best_boost"] == 2.0 and rt["best_within_half"] and rt["wer_at_beam"] > rt["accurate_wer_at_0"]
    assert rt["inaccurate_max_rise_within_half"] == 0.0 and rt["inaccurate_max_rise_above_half"] > 0
    assert rows
    t3 = tmp_path / "table3_speed"
    refs = [f"a b {i}" for i in range(4)]
    same = {"clean": [(r, r) for r in refs], "other": [(r, r) for r in refs]}
    _write_run(t3, "flashlight_p1", "table3_speed", {"flashlight": same}, config={"num_processes": 1})
    _write_run(t3, "flashlight_p2", "table3_speed", {"flashlight": same}, config={"num_processes": 2})
    assert render_main([str(tmp_path)]) == 0
    assert "best 0.00 % at boost 2 (0.25 × beam, within beam/2)" in (exp / "report.md").read_text()
    md3 = (t3 / "report.md").read_text()
    assert "Flashlight, 2 processes" in md3 and "1.00×" in md3
    assert (exp / "fig6_boost.png").is_file() and (t3 / "table3_speed.png").is_file()


def test_fig6_renders_ctc_lm_beside_the_wfst(tmp_path):
    """A ctc_lm sweep (beam_size: a hypothesis count) gets no panel of its own: its section in report.md has no
    boost/beam column and reads its WER at the WFST panels' boosts; the plot keeps one column per WFST beam."""
    from reports.paper import main as render_main, plot_fig6, sweep_curves
    from reports.schema import load_rows

    exp = tmp_path / "fig6_boost"
    refs = [f"the cat sat {i}" for i in range(10)]
    broken = {"wfst": {0.0: 2, 2.0: 3, 4.0: 4}, "ctc_lm": {0.0: 3, 1.0: 1, 2.0: 2, 4.0: 5, 6.0: 8}}
    for decoder, config in (("wfst", {"search_beam": 4.0}), ("ctc_lm", {"beam_size": 10, "lm_weight": 0.5})):
        for scenario in ("accurate", "inaccurate"):
            systems, boost = {}, {}
            for b, k in broken[decoder].items():
                label = f"{decoder}[boost={b:g}]"
                k = k if scenario == "accurate" else 3 + int(b)
                systems[label] = {"clean": [(r, r if i >= k else "cat cat cat") for i, r in enumerate(refs)]}
                boost[label] = b
            beam = 4 if decoder == "wfst" else 10
            _write_run(exp, f"{decoder}_beam{beam}_{scenario}_clean", "fig6_boost", systems, boost=boost,
                       config=config)
    pairs = paper.fig6_pairs(exp)
    assert len(pairs) == 2 * 2 + 2 * 4  # every boosted point vs its own run's boost 0
    assert (("ctc_lm_beam10_accurate_clean", "ctc_lm[boost=6]"), ("ctc_lm_beam10_accurate_clean", "ctc_lm[boost=0]")) \
        in pairs
    paper.bootstrap_experiment(exp, resamples=50, seed=0, pairs=pairs)
    rows = [r for d in sorted(exp.glob("*/results.jsonl")) for r in load_rows(d.parent)]
    curves = sweep_curves(rows)
    assert set(curves) == {("wfst", 4.0, "clean"), ("ctc_lm", 10.0, "clean")}
    assert [b for b, _ in curves[("ctc_lm", 10.0, "clean")]["accurate"]] == [0.0, 1.0, 2.0, 4.0, 6.0]
    assert render_main([str(exp)]) == 0
    md = (exp / "report.md").read_text()
    wfst_at, ctc_at = md.index("### wfst, search beam 4"), md.index("### ctc_lm, beam size 10")
    assert wfst_at < ctc_at
    section = md[ctc_at:]
    assert "boost / beam" not in section.split("\n\n")[1]
    # a broken sentence is 3 errors of its 4 words (40 in all): 3 broken at 0 = 22.5 %, 1 at boost 1 = 7.5 %
    assert "Accurate: WER 22.50 % at 0, best 7.50 % at boost 1, 15.00 % at 2 (≤ 4/2), 37.50 % at 4 (≤ 4)." in section
    assert "Inaccurate: WER 22.50 % at 0, best 22.50 % at boost 0, 37.50 % at 2 (≤ 4/2)" in section
    # the paired difference to boost 0 of the same run: 1 broken sentence instead of 3, every draw
    assert "| 1 | 7.50 [" in section and "| -15.00 [" in section and "| ref |" in section
    assert "accurate Δ vs boost 0 [95 % CI]" in md[wfst_at:ctc_at]
    import matplotlib

    matplotlib.use("Agg")
    fig_rows = rows
    out = plot_fig6(fig_rows, json.loads((exp / "bootstrap.json").read_text()), tmp_path / "f.png")
    assert out.stat().st_size > 10_000


def test_table2_end_to_end_render(tmp_path):
    """Every row shares the run's acoustic time; the ratio is to the Flashlight pipeline with the most processes."""
    from reports.paper import main as render_main

    t2 = tmp_path / "table2_end_to_end"
    refs = [f"a b {i}" for i in range(4)]
    same = {"clean": [(r, r) for r in refs], "other": [(r, r) for r in refs]}
    # per utterance: 10 s of audio, 0.5 s decoding, 1.5 s acoustic -> end-to-end RTFx 10 / 2 = 5 for both rows
    _write_run(t2, "end_to_end", "table2_end_to_end", {"flashlight": same, "wfst": same}, acoustic_seconds=1.5,
               configs={"flashlight": {"num_processes": 16}, "wfst": {}})
    assert render_main([str(tmp_path)]) == 0
    md = (t2 / "report.md").read_text()
    assert "Flashlight, 16 processes" in md and "| 5.0 |" in md and "1.00×" in md and "12.00" in md  # 8 x 1.5 s
    assert (t2 / "table2_end_to_end.png").stat().st_size > 5_000
    assert paper.DIRS["table2"] == "table2_end_to_end"


def test_render_bad_input_is_one_line(tmp_path, capsys):
    from reports.paper import main as render_main

    assert render_main([str(tmp_path / "missing")]) == 2
    (tmp_path / "empty").mkdir()
    assert render_main([str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("error: ") for e in err)


def test_flashlight_inputs_are_finite(tmp_path):
    """Guard for the pool test's inputs: normalised rows, no NaN (a NaN would make both paths agree on garbage)."""
    ctx, lp, lengths = _flashlight_inputs(tmp_path)
    assert torch.isfinite(lp).all() and lengths.tolist().count(0) == 1
