"""CPU paths of the WFST benchmarks (eval/bench/wfst_*.py) on a small random graph: each writes a valid run
directory whose rows carry the decoders, params and run mates the reports pair on."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from reports.schema import load_rows
from tests.wfst_testlib import random_graph, random_log_probs, to_openfst_text

V = 6


@pytest.fixture(scope="module")
def bench_inputs(tmp_path_factory):
    """A graph directory (TLG.bin + HLG.bin: the same random graph) and a log-prob file of 5 utterances."""
    d = tmp_path_factory.mktemp("wfst_bench")
    rng = np.random.default_rng(41)
    g = random_graph(rng, epsilon=True, num_states=120, num_tokens=V)
    gdir = d / "compact"
    gdir.mkdir()
    g.save(gdir / "TLG.bin")
    g.save(gdir / "HLG.bin")
    # Riva reads TLG.fst + words.txt; without a GPU it never opens them, so the OpenFst text stands in
    (gdir / "TLG.fst").write_text(to_openfst_text(g))
    (gdir / "words.txt").write_text("".join(f"{w} {i}\n" for i, w in enumerate(g.words)))
    lp = random_log_probs(rng, 5, 12, V)
    words = [w for w in g.words if w != "<eps>"]
    from eval.bench.common import LogProbSet

    data = LogProbSet(log_probs=lp.float(), lengths=torch.tensor([12, 7, 0, 1, 12]),
                      refs=[" ".join(words[1:3]), "", words[1], "x", "y"], durations=[0.5, 0.3, 0.0, 0.04, 0.5],
                      ids=[f"u{i}" for i in range(5)], tokens=[f"t{i}" for i in range(V)], blank_id=V - 1)
    data.save(d / "lp.pt")
    return d, gdir


def test_wfst_bench_cpu_run_directory(bench_inputs, tmp_path):
    """Ours on the CPU reference per graph and batch; Riva (CUDA only) becomes an unavailable row with a reason."""
    from eval.bench.wfst_bench import main

    d, gdir = bench_inputs
    rc = main(["--lp-file", str(d / "lp.pt"), "--graph-dir", f"compact={gdir}", "--batches", "1", "3",
               "--b1-utts", "2", "--device", "cpu", "--decoders", "wfst", "riva", "--output-dir", str(tmp_path),
               "--run", "t"])
    assert rc == 0
    run_dir = tmp_path / "wfst_vs_riva" / "t"
    assert {p.name for p in run_dir.iterdir()} >= {"config.yaml", "results.jsonl", "hyps.jsonl"}
    rows = load_rows(run_dir)
    ok = [r for r in rows if r.ok]
    assert sorted((r.params["graph"], r.batch_size) for r in ok) == [
        ("compact HLG", 1), ("compact HLG", 3), ("compact TLG", 1), ("compact TLG", 3)]
    assert {r.decoder_name for r in ok} == {"wfst"} and all(r.device == "cpu" for r in ok)
    b1 = next(r for r in ok if r.batch_size == 1)
    assert b1.utterances == 2 and b1.audio_seconds == pytest.approx(0.8)
    assert all(r.wer is not None and r.ref_words > 0 for r in ok)
    # Riva takes only the TLG: one unavailable row per TLG batch size, and our TLG rows name it as run mate
    riva = [r for r in rows if r.decoder_name == "riva"]
    assert len(riva) == 2 and all(not r.ok and "CUDA" in r.reason for r in riva)
    tlg = [r for r in ok if r.params["graph"] == "compact TLG"]
    assert {r.run_mate for r in tlg} == {r.decoder for r in riva}
    assert all(r.run_mate is None for r in ok if r.params["graph"] == "compact HLG")
    hyps = [json.loads(line) for line in (run_dir / "hyps.jsonl").read_text().splitlines()]
    assert len(hyps) == sum(r.utterances for r in ok)


def test_wfst_bench_refuses_a_pickle_with_code(tmp_path):
    """--lp-file is read with weights_only=True: a crafted pickle is refused with one line, never executed."""
    import os

    from eval.bench.common import LogProbSet

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    torch.save({"lp": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="not a log-prob file"):
        LogProbSet.load(tmp_path / "evil.pt")
    assert not (tmp_path / "pwned").exists()


def test_capacity_stats_sweeps_beams_with_wer_and_frontier(bench_inputs, tmp_path):
    """eval/bench/wfst_capacity_stats.py (which absorbed wfst_beam_sweep.py): one row per (graph, beam,
    max_active) with WER and the frontier the search kept; per-utterance numbers beside the rows."""
    from eval.bench.wfst_capacity_stats import main

    d, gdir = bench_inputs
    assert main(["--lp-file", str(d / "lp.pt"), "--graph-dir", f"compact={gdir}", "--graphs", "TLG",
                 "--search-beam", "1", "20", "--max-active", "10000", "--chunk", "2", "--output-dir", str(tmp_path),
                 "--run", "t"]) == 0
    run_dir = tmp_path / "wfst_capacity" / "t"
    rows = load_rows(run_dir)
    assert [(r.params["search_beam"], r.params["max_active"]) for r in rows] == [(1.0, 10000), (20.0, 10000)]
    assert all(r.utterances == 5 and r.wer is not None and r.device == "cpu" for r in rows)
    narrow, wide = (r.decoder_stats for r in rows)
    assert wide["mean_frontier"] > narrow["mean_frontier"]  # a wider beam keeps more states
    assert wide["over_frontier"] <= 5 and wide["frontier_capacity"] > 0
    per = json.loads((run_dir / "search_stats.json").read_text())
    assert set(per) == {r.decoder for r in rows} and all(len(v["peak_frontier"]) == 5 for v in per.values())


def test_capacity_stats_acoustic_scale_and_what_if_frontier(bench_inputs, tmp_path):
    """--acoustic-scale reaches the decoder (the row's config, and a different search than the YAML's 3), and
    --what-if-frontier counts, per capacity F, the utterances whose peak frontier > F or peak candidates > 2 F,
    equal to a count over the per-utterance peaks beside the rows; bad values are argparse errors."""
    from eval.bench.wfst_capacity_stats import main

    d, gdir = bench_inputs
    base = ["--lp-file", str(d / "lp.pt"), "--graph-dir", f"compact={gdir}", "--graphs", "TLG", "--chunk", "2",
            "--output-dir", str(tmp_path)]
    assert main(base + ["--run", "yaml"]) == 0
    assert main(base + ["--acoustic-scale", "1.0", "--what-if-frontier", "1", "8", "100000", "--run", "s1"]) == 0
    (yaml_row,), (s1_row,) = (load_rows(tmp_path / "wfst_capacity" / r) for r in ("yaml", "s1"))
    assert s1_row.decoder_config["acoustic_scale"] == 1.0 and "acoustic_scale" not in yaml_row.decoder_config
    assert s1_row.decoder_stats["mean_frontier"] != yaml_row.decoder_stats["mean_frontier"]
    per = next(iter(json.loads((tmp_path / "wfst_capacity" / "s1" / "search_stats.json").read_text()).values()))
    want = {str(f): sum(1 for a, c in zip(per["peak_frontier"], per["peak_candidates"]) if a > f or c > 2 * f)
            for f in (1, 8, 100000)}
    assert s1_row.decoder_stats["rescued_at_frontier"] == want
    assert want["1"] == 5 and want["100000"] == 0  # the counts span the range, so the comparison can fail
    assert "rescued_at_frontier" not in yaml_row.decoder_stats
    for bad in (["--acoustic-scale", "0"], ["--what-if-frontier", "0"]):
        with pytest.raises(SystemExit):
            main(base + bad + ["--run", "bad"])


def test_profile_table_and_cpu_exit(tmp_path, capsys, monkeypatch):
    """wfst_profile: kernel names are shortened, the reports table orders kernels by time, and without a GPU the
    script exits with one line."""
    from eval.bench import wfst_profile
    from reports.profile import kernel_profile_table, load_profile

    assert wfst_profile.kernel_name("void wfst::kernels::ExpandKernel<float>(int, float*)") == "ExpandKernel<float>"
    assert wfst_profile.kernel_name("void wfst::(anonymous namespace)::MaxKernel<float>(wfst::DeviceGraph)") == "MaxKernel<float>"
    entry = dict(decoder="wfst@cuda[x]", graph="compact TLG", batch=32, utterances=2, lane_steps=10, wall_us=500.0,
                 gpu_busy_us=300.0, kernels={"A": {"launches": 2, "us": 100.0}, "B": {"launches": 1, "us": 200.0}})
    (tmp_path / "kernel_profile.json").write_text(json.dumps([entry]))
    table = kernel_profile_table(load_profile(tmp_path)[0]).splitlines()
    assert table[4].startswith("| B | 1 | 0.20 | 200.0 | 66.7% | 20.000 |") and table[5].startswith("| A | 2 |")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert wfst_profile.main(["--lp-file", "x", "--graph-dir", "a=b"]) == 2
    assert "CUDA" in capsys.readouterr().err


def test_wfst_bench_isolated_rows_equal_in_process_rows(bench_inputs, tmp_path):
    """--isolate (the default on cuda): each configuration in a spawned process gives the rows (errors, pairing)
    and hypotheses of the in-process run; Riva's unavailable row keeps its reason."""
    from eval.bench.wfst_bench import main

    d, gdir = bench_inputs
    common = ["--lp-file", str(d / "lp.pt"), "--graph-dir", f"compact={gdir}", "--graphs", "TLG", "--batches", "3",
              "--device", "cpu", "--decoders", "wfst", "riva", "--output-dir", str(tmp_path)]
    assert main(common + ["--in-process", "--run", "a"]) == 0
    assert main(common + ["--isolate", "--run", "b"]) == 0
    rows = {run: load_rows(tmp_path / "wfst_vs_riva" / run) for run in "ab"}
    key = lambda r: (r.decoder, r.ok, r.substitutions, r.deletions, r.insertions, r.run_mate, r.reason)  # noqa: E731
    assert [key(r) for r in rows["a"]] == [key(r) for r in rows["b"]]
    assert [r.ok for r in rows["b"]] == [True, False] and "CUDA" in rows["b"][1].reason
    hyps = {run: (tmp_path / "wfst_vs_riva" / run / "hyps.jsonl").read_text() for run in "ab"}
    assert hyps["a"] == hyps["b"] and hyps["a"]
