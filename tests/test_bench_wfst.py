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
