"""eval/bench/ctc_bench.py: the CTC-vs-OASR side by side. Its measurements need a GPU; on the CPU it exits with
one line, and its rows (built from eval.metrics Stopwatches) are checked here with CPU-timed stand-in calls."""
from __future__ import annotations

import pytest
import torch

from reports.schema import load_rows


def test_ctc_bench_on_cpu_exits_with_one_line(capsys, monkeypatch):
    from eval.bench import ctc_bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ctc_bench.main(["--repeats", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "CUDA" in err


def test_missing_oasr_gives_a_reason(tmp_path):
    from eval.bench.ctc_bench import load_oasr

    oc, reason, readback = load_oasr(tmp_path / "nowhere")
    assert oc is None and "OASR not found" in reason and readback == ""


def _run_pairs(tmp_path, with_oasr: bool):
    from eval.bench.common import BenchRun
    from eval.bench.ctc_bench import DATASET, FRAME_SECONDS, add_pair, interleaved

    run = BenchRun("ctc_vs_oasr", "t", config={"test": True}, output_dir=tmp_path)
    x = torch.randn(64, 64)
    fns = {"ours_kernel": lambda: x @ x}
    if with_oasr:
        fns["oasr_kernel"] = lambda: (x @ x) @ x
    watches = interleaved(fns, warmup=1, repeats=3, device="cpu")
    shape = {"B": 4, "T": 50, "V": 29, "beam": 3}
    add_pair(run, watches, {"ours": ("ours_kernel", "ctc_beam@cuda[kernel x]"),
                            "theirs": ("oasr_kernel", "oasr_ctc@cuda[kernel x]")},
             shape, "kernel", 4, 200, "OASR not importable: test", {"best_equal": 4})
    path = run.close()
    rows = load_rows(path)
    assert rows[0].audio_seconds == pytest.approx(200 * FRAME_SECONDS) and rows[0].dataset == DATASET
    return rows


def test_ctc_bench_rows_pair_ours_with_oasr(tmp_path):
    rows = _run_pairs(tmp_path, with_oasr=True)
    ours, theirs = rows
    assert (ours.decoder_name, theirs.decoder_name) == ("ctc_beam", "oasr_ctc")
    assert ours.run_mate == theirs.decoder and theirs.run_mate == ours.decoder
    assert ours.params == theirs.params == {"B": 4, "T": 50, "V": 29, "beam": 3}
    assert ours.boundary == theirs.boundary == "kernel"
    # random inputs have no references: WER is null, not a perfect 0
    assert ours.wer is None and theirs.wer is None and ours.utterances == 4
    assert ours.decoder_seconds > 0 and ours.rtfx_decoder > 0
    assert ours.decoder_stats["best_equal"] == 4 and theirs.decoder_stats == {}


def test_ctc_bench_without_oasr_keeps_ours_and_says_why(tmp_path):
    rows = _run_pairs(tmp_path, with_oasr=False)
    ours, theirs = rows
    assert ours.ok and not theirs.ok and theirs.reason == "OASR not importable: test"
    assert theirs.params == ours.params


def test_ab_env_is_parsed_and_applied_per_call_then_restored(monkeypatch):
    """--ab-env: only BEAMDEC_* items; the wrapped call sees them, the process environment is restored after."""
    import os

    from eval.bench.ctc_bench import parse_ab_env, with_env

    assert parse_ab_env("BEAMDEC_CTC_ROUNDS=branch BEAMDEC_CTC_PREPASS=rank") == {
        "BEAMDEC_CTC_ROUNDS": "branch", "BEAMDEC_CTC_PREPASS": "rank"}
    assert parse_ab_env("") == {}
    for bad in ("PATH=/x", "BEAMDEC_CTC_ROUNDS", "BEAMDEC_CTC_ROUNDS="):
        with pytest.raises(ValueError, match="--ab-env"):
            parse_ab_env(bad)
    monkeypatch.setenv("BEAMDEC_CTC_PREPASS", "warp")
    monkeypatch.delenv("BEAMDEC_CTC_ROUNDS", raising=False)
    seen = with_env({"BEAMDEC_CTC_ROUNDS": "branch", "BEAMDEC_CTC_PREPASS": "rank"},
                    lambda: (os.environ.get("BEAMDEC_CTC_ROUNDS"), os.environ.get("BEAMDEC_CTC_PREPASS")))()
    assert seen == ("branch", "rank")
    assert "BEAMDEC_CTC_ROUNDS" not in os.environ and os.environ["BEAMDEC_CTC_PREPASS"] == "warp"


def test_ab_arms_each_wrap_every_ours_call_under_their_own_switches(monkeypatch):
    """--ab-env "A;B": one arm per ';' part, each arm's "alt{i}_<mode>" callables run the matching "ours_<mode>"
    call under that arm's switches alone; empty parts are dropped, an arm given twice is refused."""
    import os

    from eval.bench.ctc_bench import arm_fns, parse_ab_arms

    arms = parse_ab_arms("BEAMDEC_CTC_CHECK=fused;BEAMDEC_CTC_FILL=finalize BEAMDEC_CTC_ZERO=prepass;")
    assert arms == [{"BEAMDEC_CTC_CHECK": "fused"}, {"BEAMDEC_CTC_FILL": "finalize", "BEAMDEC_CTC_ZERO": "prepass"}]
    assert parse_ab_arms("") == [] and parse_ab_arms(" ; ") == []
    with pytest.raises(ValueError, match="given twice"):
        parse_ab_arms("BEAMDEC_CTC_CHECK=fused;BEAMDEC_CTC_CHECK=fused")
    for k in ("BEAMDEC_CTC_CHECK", "BEAMDEC_CTC_FILL", "BEAMDEC_CTC_ZERO"):
        monkeypatch.delenv(k, raising=False)
    seen = lambda: tuple(os.environ.get(k) for k in ("BEAMDEC_CTC_CHECK", "BEAMDEC_CTC_FILL", "BEAMDEC_CTC_ZERO"))
    fns = {"ours_kernel": seen, "ours_api": seen, "oasr_kernel": seen}
    keys = arm_fns(fns, arms)
    assert sorted(keys) == ["alt0_api", "alt0_kernel", "alt1_api", "alt1_kernel"]
    assert keys["alt1_api"] is arms[1]
    assert fns["alt0_kernel"]() == ("fused", None, None) and fns["alt1_api"]() == (None, "finalize", "prepass")
    assert fns["ours_kernel"]() == (None, None, None)


def test_bad_ab_env_is_one_line(capsys, monkeypatch):
    from eval.bench import ctc_bench

    with pytest.raises(SystemExit) as e:
        ctc_bench.main(["--ab-env", "PATH=/x"])
    assert e.value.code == 2 and "--ab-env" in capsys.readouterr().err


def test_ab_rows_are_ours_with_the_switches_in_label_and_params(tmp_path):
    from eval.bench.common import BenchRun
    from eval.bench.ctc_bench import add_alt, interleaved

    run = BenchRun("ctc_vs_oasr", "t", config={"test": True}, output_dir=tmp_path)
    x = torch.randn(32, 32)
    watches = interleaved({"alt_kernel": lambda: x @ x}, warmup=1, repeats=2, device="cpu")
    add_alt(run, watches, "alt_kernel", "ctc_beam@cuda[kernel x]", {"B": 1}, "kernel", 1, 50,
            {"BEAMDEC_CTC_ROUNDS": "branch"})
    add_alt(run, watches, "missing", "ctc_beam@cuda[api x]", {"B": 1}, "api", 1, 50, {"BEAMDEC_CTC_ROUNDS": "branch"})
    (row,) = load_rows(run.close())
    assert row.decoder == "ctc_beam@cuda[kernel x] [ab BEAMDEC_CTC_ROUNDS=branch]" and row.decoder_name == "ctc_beam"
    assert row.params == {"B": 1, "ab_env": "BEAMDEC_CTC_ROUNDS=branch"} and row.boundary == "kernel"


def test_interleaved_rotates_the_contenders_order_per_repeat():
    """Each contender runs once per repeat, and across repeats in every position equally often (no contender always
    runs right after the same other one)."""
    from eval.bench.ctc_bench import interleaved, rotated

    assert rotated(["a", "b", "c"], 0) == ["a", "b", "c"] and rotated(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert rotated([], 3) == []
    seen: list[str] = []
    fns = {k: (lambda k=k: seen.append(k)) for k in ("a", "b", "c")}
    watches = interleaved(fns, warmup=0, repeats=3, device="cpu")
    assert seen == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(w.regions == 3 for w in watches.values())
    # `before(key)` runs before every call of that key, warm-up included (the stream-length rows restore states)
    seen.clear()
    interleaved(fns, warmup=1, repeats=2, device="cpu", before=lambda k: seen.append("<" + k))
    warm = ["<a", "a", "<b", "b", "<c", "c"]
    assert seen == warm + ["<a", "a", "<b", "b", "<c", "c", "<b", "b", "<c", "c", "<a", "a"]


def test_api_profile_needs_a_gpu_and_says_so(capsys):
    """eval.bench.ctc_api_profile is a GPU-host diagnostic: without CUDA it exits 2 with one line, nothing else."""
    import torch

    from eval.bench.ctc_api_profile import main

    if torch.cuda.is_available():
        import pytest

        pytest.skip("this machine has CUDA")
    assert main([]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs a CUDA device" in err and "\n" not in err
