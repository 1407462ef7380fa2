"""eval/bench/wfst_mbr_bench.py on the CPU: ours best / lattice / MBR rows (Riva unavailable without CUDA), paired
by params, the lattice's best path equal to the 1-best, and lattice memory counted."""
from __future__ import annotations

import numpy as np
import torch

from reports.schema import load_rows
from test_wfst_lattice import acyclic_eps_graph
from wfst_testlib import random_log_probs, to_openfst_text


def _bench_inputs(tmp_path):
    from eval.bench.common import LogProbSet

    rng = np.random.default_rng(61)
    g = acyclic_eps_graph(rng, num_states=8, finals="all")
    V = g.num_tokens
    gdir = tmp_path / "g"
    gdir.mkdir()
    g.save(gdir / "TLG.bin")
    (gdir / "TLG.fst").write_text(to_openfst_text(g))
    (gdir / "words.txt").write_text("".join(f"{w} {i}\n" for i, w in enumerate(g.words)))
    lp = random_log_probs(rng, 4, 6, V)
    data = LogProbSet(log_probs=lp.float(), lengths=torch.tensor([6, 3, 0, 5]), refs=["w1 w2", "w3", "", "w4"],
                      durations=[0.24, 0.12, 0.0, 0.2], ids=[f"u{i}" for i in range(4)],
                      tokens=[f"t{i}" for i in range(V)], blank_id=0)
    data.save(tmp_path / "lp.pt")
    return gdir


def test_mbr_bench_cpu_run_directory(tmp_path):
    from eval.bench.wfst_mbr_bench import main

    gdir = _bench_inputs(tmp_path)
    rc = main(["--lp-file", str(tmp_path / "lp.pt"), "--graph-dir", f"c={gdir}", "--batch", "3", "--device", "cpu",
               "--output-dir", str(tmp_path / "runs"), "--run", "t"])
    assert rc == 0
    rows = load_rows(tmp_path / "runs" / "wfst_mbr" / "t")
    ok = {r.params["output"]: r for r in rows if r.ok}
    assert set(ok) == {"best", "lattice", "mbr"} and all(r.decoder_name == "wfst" for r in ok.values())
    riva = [r for r in rows if not r.ok]
    assert {r.params["output"] for r in riva} == {"best", "mbr"} and all(r.decoder_name == "riva" for r in riva)
    assert ok["best"].run_mate == "riva@cuda[c TLG, best]" and ok["mbr"].run_mate == "riva@cuda[c TLG, mbr]"
    # the lattice's best path is the 1-best: same errors
    assert (ok["lattice"].substitutions, ok["lattice"].deletions, ok["lattice"].insertions) == \
        (ok["best"].substitutions, ok["best"].deletions, ok["best"].insertions)
    assert ok["mbr"].decoder_config["lattice_backend"] == "cpu"
    assert ok["lattice"].decoder_stats["lattice_bytes"] > 0
    # Riva's decode_nbest reading (NBestResult objects, word IDs): tests/test_riva_nbest.py


def test_mbr_bench_isolated_rows_equal_in_process_rows(tmp_path):
    """--isolate (the default on cuda): each row measured in a spawned process gives the same hypotheses and errors
    as in this process, and a decoder that cannot run there is still an unavailable row with its reason."""
    import json

    from eval.bench.wfst_mbr_bench import main

    gdir = _bench_inputs(tmp_path)
    common = ["--lp-file", str(tmp_path / "lp.pt"), "--graph-dir", f"c={gdir}", "--batch", "3", "--device", "cpu",
              "--outputs", "best", "lattice", "--output-dir", str(tmp_path / "runs")]
    assert main(common + ["--in-process", "--run", "a"]) == 0
    assert main(common + ["--isolate", "--run", "b"]) == 0
    rows = {run: load_rows(tmp_path / "runs" / "wfst_mbr" / run) for run in "ab"}
    key = lambda r: (r.decoder, r.ok, r.substitutions, r.deletions, r.insertions, r.run)  # noqa: E731
    assert [key(r)[:5] for r in rows["a"]] == [key(r)[:5] for r in rows["b"]]
    assert {r.run for r in rows["b"]} == {"b"} and sum(r.ok for r in rows["b"]) == 2
    assert any(not r.ok and r.decoder_name == "riva" for r in rows["b"])
    hyps = {run: [json.loads(x) for x in (tmp_path / "runs" / "wfst_mbr" / run / "hyps.jsonl").read_text().splitlines()]
            for run in "ab"}
    assert hyps["a"] == hyps["b"] and len(hyps["a"]) == 8
    cfg = (tmp_path / "runs" / "wfst_mbr" / "b" / "config.yaml").read_text()
    assert "isolate: true" in cfg


def test_mbr_bench_frontier_capacity_reaches_our_rows_only(tmp_path):
    """--frontier-capacity sets ours' per-lane frontier (the rows' decoder config and the run's config record it);
    a value below 1 is a one-line usage error."""
    import pytest

    from eval.bench.wfst_mbr_bench import main

    gdir = _bench_inputs(tmp_path)
    assert main(["--lp-file", str(tmp_path / "lp.pt"), "--graph-dir", f"c={gdir}", "--batch", "3", "--device", "cpu",
                 "--outputs", "best", "--in-process", "--frontier-capacity", "4096", "--output-dir",
                 str(tmp_path / "runs"), "--run", "f"]) == 0
    rows = load_rows(tmp_path / "runs" / "wfst_mbr" / "f")
    ours = [r for r in rows if r.ok]
    assert len(ours) == 1 and ours[0].decoder_config["frontier_capacity"] == 4096
    assert "frontier_capacity: 4096" in (tmp_path / "runs" / "wfst_mbr" / "f" / "config.yaml").read_text()
    with pytest.raises(SystemExit):
        main(["--lp-file", str(tmp_path / "lp.pt"), "--graph-dir", f"c={gdir}", "--frontier-capacity", "0"])


def test_mbr_bench_determinized_and_summed_mbr_rows(tmp_path):
    """ours' MBR rows run over the word-determinized lattice by default (Riva's semantics) and over the lattice itself
    with --mbr-summed, recorded in the row's decoder config and the run's config; the other rows are unchanged."""
    from eval.bench.wfst_mbr_bench import main

    gdir = _bench_inputs(tmp_path)
    for run, flag in (("d", []), ("s", ["--mbr-summed"])):
        assert main(["--lp-file", str(tmp_path / "lp.pt"), "--graph-dir", f"c={gdir}", "--batch", "3", "--device",
                     "cpu", "--outputs", "best", "mbr", "--in-process", *flag, "--output-dir", str(tmp_path / "runs"),
                     "--run", run]) == 0
        rows = {r.params["output"]: r for r in load_rows(tmp_path / "runs" / "wfst_mbr" / run) if r.ok}
        det = not flag
        assert rows["mbr"].decoder_config["mbr_determinize"] is det
        assert "mbr_determinize" not in rows["best"].decoder_config
        assert f"mbr_determinize: {str(det).lower()}" in (tmp_path / "runs" / "wfst_mbr" / run / "config.yaml").read_text()
