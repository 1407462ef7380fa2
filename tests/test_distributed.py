"""Sharded evaluation (issue 17): duration-balanced shards, the torchrun environment, the merge into one run
directory (one WER from every hypothesis, RTFx over the slowest rank, per-rank rows), identical hypotheses and WER
to one process through `torchrun -m eval.run` (2 CPU processes, gloo, the embedded tiny workload), and the failure
paths: a failing rank fails every rank with its error and writes nothing; ranks with different configs are refused."""
from __future__ import annotations

import itertools
import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from eval.distributed import (DistContext, RankFailed, RankFailure, check_same_config, config_digest, first_failure,
                              ordered_hypothesis_lines, shard_by_duration)
from eval.metrics import WerStats, rtfx, word_error_stats
from eval.results import measured_row, rank_row, sharded_row
from reports.schema import load_rows

REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------------------
# Sharding
# ---------------------------------------------------------------------------------------------------------


def _loads(durations, shards):
    return [sum(durations[i] for i in s) for s in shards]


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_shards_cover_every_utterance_once_in_manifest_order(world):
    rng = random.Random(world)
    durations = [rng.uniform(0.5, 20.0) for _ in range(37)]
    shards = shard_by_duration(durations, world)
    assert len(shards) == world
    assert sorted(i for s in shards for i in s) == list(range(37))
    assert all(s == sorted(s) for s in shards)
    assert shard_by_duration(durations, world) == shards  # every rank computes the same assignment


def test_shards_are_balanced_within_the_lpt_bound_of_the_optimum():
    """Longest-first onto the least-loaded rank is within 4/3 of the best possible makespan (Graham 1969);
    the optimum is brute-forced on small sets."""
    rng = random.Random(0)
    for trial in range(30):
        n, world = rng.randint(1, 9), rng.randint(2, 3)
        durations = [rng.choice([rng.uniform(0.1, 30.0), float(rng.randint(1, 5))]) for _ in range(n)]
        makespan = max(_loads(durations, shard_by_duration(durations, world)))
        best = min(max(sum(d for d, r in zip(durations, assign) if r == k) for k in range(world))
                   for assign in itertools.product(range(world), repeat=n))
        assert makespan <= 4 / 3 * best + 1e-9, (trial, durations)


def test_shards_balance_duration_not_count():
    """One long utterance and many short ones: the long one gets a rank of its own."""
    durations = [1.0] * 10 + [10.0]
    shards = shard_by_duration(durations, 2)
    assert sorted(_loads(durations, shards)) == [10.0, 10.0]
    assert [10] in shards


def test_fewer_utterances_than_ranks_leaves_empty_shards():
    assert shard_by_duration([3.0, 1.0], 4) == [[0], [1], [], []]
    assert shard_by_duration([], 2) == [[], []]


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "3"])
def test_bad_durations_are_one_line_errors(bad):
    with pytest.raises(ValueError, match=r"utterance 1: duration must be a finite number"):
        shard_by_duration([1.0, bad], 2)
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        shard_by_duration([1.0], 0)


# ---------------------------------------------------------------------------------------------------------
# The torchrun environment
# ---------------------------------------------------------------------------------------------------------


def test_no_torchrun_environment_is_one_process():
    assert DistContext.from_env({}) == DistContext()
    assert not DistContext.from_env({"WORLD_SIZE": "1", "RANK": "0"}).enabled
    assert DistContext().device("cuda") == "cuda"  # one process: devices untouched


def test_torchrun_environment_and_device_per_rank():
    ctx = DistContext.from_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"})
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.enabled, ctx.is_main) == (3, 4, 1, True, False)
    assert ctx.device("cuda") == "cuda:1"  # a bare cuda is this rank's GPU
    assert ctx.device("cpu") == "cpu" and ctx.device("cuda:0") == "cuda:0"  # an explicit device is kept
    assert [DistContext(r, 4, lr).phase for r, lr in [(0, 0), (2, 0), (1, 1), (3, 1)]] == [0, 1, 2, 2]


@pytest.mark.parametrize("env, match", [
    ({"WORLD_SIZE": "2"}, "RANK is unset"),
    ({"WORLD_SIZE": "two", "RANK": "0"}, r"WORLD_SIZE='two' is not an integer"),
    ({"WORLD_SIZE": "2", "RANK": "2"}, r"RANK=2 must be in \[0, WORLD_SIZE=2\)"),
    ({"WORLD_SIZE": "0", "RANK": "0"}, "WORLD_SIZE=0 must be >= 1"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "-1"}, "LOCAL_RANK=-1 must be >= 0"),
])
def test_bad_torchrun_environment_is_one_line(env, match):
    with pytest.raises(ValueError, match=match):
        DistContext.from_env(env)


# ---------------------------------------------------------------------------------------------------------
# Merging
# ---------------------------------------------------------------------------------------------------------


def test_config_mismatch_names_the_rank_and_the_key():
    a = {"config": {"experiment": {"batch_size": 2, "name": "x"}}, "decoders": {"greedy": {"name": "greedy"}}}
    b = json.loads(json.dumps(a))
    check_same_config([a, b, b])
    assert config_digest(a) == config_digest(dict(reversed(list(a.items()))))  # key order does not matter
    b["config"]["experiment"]["batch_size"] = 3
    with pytest.raises(RankFailed, match=r"rank 2's resolved config differs from rank 0's .*"
                                         r"experiment\.batch_size: 2 vs 3"):
        check_same_config([a, a, b])


def test_first_failure_is_the_lowest_rank_and_counts_the_others():
    f = first_failure([None, RankFailure(2, "h2", "ValueError: x"), RankFailure(1, "h1", "OSError: y")])
    assert f.rank == 1 and f.message() == "rank 1 (h1) failed: OSError: y (ranks [2] failed too)"
    assert first_failure([None, 3]) is None


def _hyp_line(decoder, utt):
    return json.dumps({"decoder": decoder, "dataset": "d", "id": utt, "hyp": f"{decoder}-{utt}"}) + "\n"


def test_hypotheses_come_back_in_the_order_one_process_writes_them():
    """One process writes, per batch of the manifest, every decoder over the batch's utterances."""
    ids = [f"u{i}" for i in range(5)]
    labels = ["greedy", "flashlight"]
    one_process = [_hyp_line(lb, u) for start in range(0, 5, 2) for lb in labels for u in ids[start:start + 2]]
    shuffled = list(one_process)
    random.Random(1).shuffle(shuffled)
    assert ordered_hypothesis_lines(ids, 2, labels, shuffled) == one_process
    with pytest.raises(RuntimeError, match="shards overlap"):
        ordered_hypothesis_lines(ids, 2, labels, shuffled + [one_process[0]])
    with pytest.raises(RuntimeError, match="different manifests"):
        ordered_hypothesis_lines(ids[:4], 2, labels, shuffled)


def _row(rank, refs, hyps, audio, seconds, acoustic=0.5, device="cpu"):
    return measured_row(experiment="e", run="r", decoder="greedy", decoder_name="greedy", device=device,
                        dataset="clean", wer=word_error_stats(refs, hyps), audio_seconds=audio,
                        decoder_seconds=seconds, acoustic_seconds=acoustic, env={"cpu_model": "c", "cpu_count": 2},
                        frames=10 * (rank + 1), stats={"overflow_count": rank + 1})


def test_sharded_row_sums_wer_parts_and_times_the_slowest_rank():
    refs = [["the cat sat", "a dog"], ["red hat", "on the mat ran"]]
    hyps = [["the cat sad", "a dog"], ["red", "on a mat ran far"]]
    parts = [_row(0, refs[0], hyps[0], audio=30.0, seconds=2.0, acoustic=1.0),
             _row(1, refs[1], hyps[1], audio=10.0, seconds=3.0, acoustic=0.5)]
    merged = sharded_row(parts)
    whole = word_error_stats(refs[0] + refs[1], hyps[0] + hyps[1])
    assert (merged.substitutions, merged.deletions, merged.insertions, merged.hits, merged.sentence_errors,
            merged.utterances) == (whole.substitutions, whole.deletions, whole.insertions, whole.hits,
                                   whole.sentence_errors, 4)
    assert merged.wer == pytest.approx(whole.wer)
    assert merged.audio_seconds == 40.0 and merged.frames == 30 and merged.overflow_count == 3
    # aggregate RTFx: total audio over the slowest rank's wall time, not over the sum of the ranks' times
    assert merged.decoder_seconds == 3.0 and merged.rtfx_decoder == pytest.approx(rtfx(40.0, 3.0))
    assert merged.end_to_end_seconds == pytest.approx(3.5)  # rank 1's 0.5 + 3.0, not max(acoustic) + max(decoder)
    assert merged.params == {} and merged.hardware_key.endswith(" x2 ranks")
    r1 = rank_row(parts[1], 1, 2)
    assert r1.params == {"rank": 1} and r1.key != merged.key and merged.key == parts[0].key
    with pytest.raises(ValueError, match="already a rank's row"):
        rank_row(r1, 1, 2)
    assert sharded_row([_row(0, ["a"], ["a"], 1.0, 1.0, device="cuda:0"),
                        _row(1, ["a"], ["a"], 1.0, 1.0, device="cuda:1")]).device == "cuda"


def test_sharded_row_refuses_unlike_rows():
    a = _row(0, ["a b"], ["a b"], 1.0, 1.0)
    import dataclasses

    with pytest.raises(ValueError, match="one dataset"):
        sharded_row([a, dataclasses.replace(a, dataset="other")])
    with pytest.raises(ValueError, match="no rows"):
        sharded_row([])
    assert sum([WerStats(1, 0, 0, 2, 1, 1)], WerStats()).wer == pytest.approx(1 / 3)


# ---------------------------------------------------------------------------------------------------------
# 2 CPU processes with gloo
# ---------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sharded_overrides(out_dir: Path, *extra: str) -> list[str]:
    return [f"experiment.output_dir={out_dir}", "experiment.run=r", "experiment.progress=false",
            "experiment.batch_size=5", "data.max_utterances=24", "experiment.decoders=[greedy,flashlight]", *extra]


def test_two_cpu_ranks_give_the_hypotheses_and_wer_of_one_process(tmp_path):
    """`torchrun --nproc_per_node=2 -m eval.run` (gloo) against one process on the embedded tiny workload: the
    same hyps.jsonl records in the same order, the same WER parts per (decoder, dataset), rows per rank that add up."""
    pytest.importorskip("flashlight.lib.text")
    from eval.config import compose_config
    from eval.runner import run_experiment

    single = run_experiment(compose_config(_sharded_overrides(tmp_path / "one")), dist=DistContext())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", str(_free_port()),
         "-m", "eval.run", *_sharded_overrides(tmp_path / "two")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = tmp_path / "two" / "default" / "r"
    assert proc.stdout.count("| greedy [rank=1] |") == 1  # rank 0 alone prints the table
    # the same records in the same order; scores to float32 rounding (a float32 sum over another batch's padding
    # shape can differ in the last bit)
    got = [json.loads(line) for line in open(two / "hyps.jsonl")]
    want = [json.loads(line) for line in open(single.run_dir / "hyps.jsonl")]
    assert [{k: v for k, v in h.items() if k != "score"} for h in got] == \
           [{k: v for k, v in h.items() if k != "score"} for h in want]
    assert [h["score"] for h in got] == pytest.approx([h["score"] for h in want], rel=1e-5, abs=1e-5)

    rows = load_rows(two)
    merged = {(r.decoder, r.dataset): r for r in rows if r.ok and not r.params}
    by_rank = {}
    for r in rows:
        if r.ok and r.params:
            by_rank.setdefault((r.decoder, r.dataset), []).append(r)
    one = {(r.decoder, r.dataset): r for r in single.rows if r.ok}
    assert set(merged) == set(one) == set(by_rank)
    assert {k[1] for k in merged} == {"clean", "other", "all"}
    for key, r in merged.items():
        o = one[key]
        assert (r.wer, r.substitutions, r.deletions, r.insertions, r.hits, r.utterances, r.frames) == \
               (o.wer, o.substitutions, o.deletions, o.insertions, o.hits, o.utterances, o.frames), key
        assert r.audio_seconds == pytest.approx(o.audio_seconds)
        ranks = sorted(by_rank[key], key=lambda x: x.params["rank"])
        assert [x.params for x in ranks] == [{"rank": 0}, {"rank": 1}]
        assert sum(x.utterances for x in ranks) == r.utterances and all(x.utterances > 0 for x in ranks)
        assert r.decoder_seconds == max(x.decoder_seconds for x in ranks)
        assert r.rtfx_decoder == pytest.approx(r.audio_seconds / r.decoder_seconds)
        assert r.hardware_key.endswith("x2 ranks") and r.environment["world_size"] == 2
    # the WER is the one of every hypothesis in hyps.jsonl
    hyps = [json.loads(line) for line in open(two / "hyps.jsonl")]
    other = [h for h in hyps if h["decoder"] == "flashlight" and h["dataset"] == "other"]
    assert merged[("flashlight", "other")].wer == pytest.approx(
        word_error_stats([h["ref"] for h in other], [h["hyp"] for h in other]).wer)
    config = (two / "config.yaml").read_text()
    assert "world_size: 2" in config and "backend: gloo" in config
    # the gate compares the merged rows with a one-process baseline: WER checked, RTFx skipped (other world size),
    # per-rank rows listed as new
    from eval.gate import compare, make_baseline, parse_baseline

    report = compare(rows, parse_baseline(make_baseline(single.rows)), metrics=["wer", "rtfx"])
    status = {(c.decoder, c.dataset, c.metric): c.status for c in report.checks}
    assert report.passed and status[("flashlight", "other", "wer")] == "pass"
    assert status[("flashlight", "other", "rtfx_decoder")] == "skip"
    assert {c.status for c in report.checks if "rank=" in c.decoder} == {"new"}


def _rank_main(rank: int, port: int, out: str, scenario: str) -> None:
    """One spawned rank: compose, run, record what happened in rank<r>.json (the parent asserts on it)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _eval_fakes import FakeWorkload, fake_source_factory
    from eval.config import compose_config
    from eval.runner import run_experiment

    out_dir = Path(out)
    overrides = [f"experiment.output_dir={out_dir / 'runs'}", f"graph.root={out_dir / 'graphs'}", "experiment.run=r",
                 "experiment.batch_size=2", "experiment.progress=false", "decoder=greedy"]
    if scenario == "mismatch" and rank == 1:
        overrides.append("experiment.batch_size=3")
    if scenario == "bad_config" and rank == 1:
        overrides.append("experiment.batch_size=0")

    def factory(cfg, *, dataset, workload, tokens):
        (out_dir / f"decoded{rank}").touch()
        if scenario == "decode_fails" and rank == 1:
            raise RuntimeError("acoustic model broke on purpose")
        return fake_source_factory(cfg, dataset=dataset, workload=workload, tokens=tokens)

    record: dict = {"rank": rank}
    try:
        wl = FakeWorkload(out_dir / f"wl{rank}")  # a root per rank: the fake writes its files when built
        res = run_experiment(compose_config(overrides), workload=wl, source_factory=factory)
        record.update(status="ok", run_dir=str(res.run_dir), rows=len(res.rows))
    except Exception as e:  # noqa: BLE001 - the parent checks type and message
        record.update(status="error", type=type(e).__name__, message=str(e))
    (out_dir / f"rank{rank}.json").write_text(json.dumps(record))


def _spawn(tmp_path, scenario):
    mp.spawn(_rank_main, args=(_free_port(), str(tmp_path), scenario), nprocs=2, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def _no_run_written(tmp_path):
    runs = tmp_path / "runs"
    return not runs.exists() or not any(p for p in runs.rglob("*") if p.is_file())


def test_a_failing_rank_fails_every_rank_with_its_error_and_writes_nothing(tmp_path):
    records = _spawn(tmp_path, "decode_fails")
    for rec in records:
        assert rec["status"] == "error" and rec["type"] == "RankFailed", rec
        assert rec["message"].startswith("rank 1 (") and "RuntimeError: acoustic model broke on purpose" in rec["message"]
        assert "\n" not in rec["message"]
    assert _no_run_written(tmp_path)


@pytest.mark.parametrize("scenario, match", [
    ("mismatch", r"rank 1's resolved config differs from rank 0's .*experiment\.batch_size: 2 vs 3"),
    ("bad_config", r"rank 1 \(.*\) failed: ValueError: experiment\.batch_size must be positive, got 0"),
])
def test_ranks_with_different_configs_are_refused_before_any_work(tmp_path, scenario, match):
    import re

    records = _spawn(tmp_path, scenario)
    for rec in records:
        assert rec["status"] == "error" and re.search(match, rec["message"]), rec
    assert _no_run_written(tmp_path)
    assert not list(tmp_path.glob("decoded*"))  # refused before any rank built an acoustic source


def test_two_ranks_in_process_agree_with_one_process(tmp_path):
    """The spawned (not torchrun) path on the fake workload: both ranks return the run rank 0 wrote."""
    records = _spawn(tmp_path, "ok")
    assert [r["status"] for r in records] == ["ok", "ok"], records
    assert records[0]["run_dir"] == records[1]["run_dir"] and records[0]["rows"] == records[1]["rows"]
    rows = load_rows(Path(records[0]["run_dir"]))
    assert sorted((r.dataset, r.params.get("rank", -1)) for r in rows) == sorted(
        (d, k) for d in ("clean", "other", "all") for k in (-1, 0, 1))


@pytest.mark.gpu
def test_two_gpu_ranks_give_the_hypotheses_and_wer_of_one_gpu(tmp_path):
    """torchrun over 2 GPUs (NCCL default group, gloo for the results), each rank on cuda:LOCAL_RANK, against one
    process on one GPU: same hypotheses and WER parts; the per-rank rows name their own GPU."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    from eval.config import compose_config
    from eval.runner import run_experiment

    gpu = ["experiment.decoders=[ctc_beam@cuda,wfst@cuda]", "data.max_utterances=40"]
    single = run_experiment(compose_config(_sharded_overrides(tmp_path / "one", *gpu)), dist=DistContext())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", str(_free_port()),
         "-m", "eval.run", *_sharded_overrides(tmp_path / "two", *gpu)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = tmp_path / "two" / "default" / "r"
    got = [json.loads(line) for line in open(two / "hyps.jsonl")]
    want = [json.loads(line) for line in open(single.run_dir / "hyps.jsonl")]
    assert [(h["decoder"], h["id"], h["hyp"]) for h in got] == [(h["decoder"], h["id"], h["hyp"]) for h in want]
    rows = load_rows(two)
    one = {(r.decoder, r.dataset): r for r in single.rows if r.ok}
    merged = {(r.decoder, r.dataset): r for r in rows if r.ok and not r.params}
    assert set(merged) == set(one)
    for key, r in merged.items():
        assert (r.wer, r.substitutions, r.deletions, r.insertions) == \
               (one[key].wer, one[key].substitutions, one[key].deletions, one[key].insertions)
        assert r.device == "cuda"
    assert {r.device for r in rows if r.ok and r.params} == {"cuda:0", "cuda:1"}
    assert "backend: nccl" in (two / "config.yaml").read_text()
