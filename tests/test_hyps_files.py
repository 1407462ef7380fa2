"""Hypothesis files: a run directory's hyps.jsonl or its gzip-compressed hyps.jsonl.gz (the committed evidence's
form) read the same way by everything that reads hypotheses."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest


def _lines():
    return [json.dumps({"decoder": d, "dataset": "other", "id": f"u{i}", "ref": "a b", "hyp": "a" if i else "a b"})
            + "\n" for d in ("wfst", "greedy") for i in range(3)]


def test_compressed_hyps_read_like_plain_ones(tmp_path):
    from eval.paper import read_hyps
    from eval.results import compress_hyps, hyps_path, open_hyps

    plain, packed = tmp_path / "plain", tmp_path / "packed"
    for d in (plain, packed):
        d.mkdir()
        (d / "hyps.jsonl").write_text("".join(_lines()), encoding="utf-8")
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "hyps.jsonl").write_text(_lines()[0], encoding="utf-8")
    written = compress_hyps(tmp_path / "packed")
    assert written == [packed / "hyps.jsonl.gz"] and not (packed / "hyps.jsonl").exists()
    assert compress_hyps(tmp_path / "small", min_bytes=10_000) == []  # below the size: left alone
    assert hyps_path(packed) == packed / "hyps.jsonl.gz" and hyps_path(plain) == plain / "hyps.jsonl"
    with open_hyps(packed) as a, open_hyps(plain) as b:
        assert a.read() == b.read() == "".join(_lines())
    assert read_hyps(packed) == read_hyps(plain) and len(read_hyps(packed)) == 2
    again = tmp_path / "again"  # deterministic bytes: compressing the same file twice gives the same archive
    again.mkdir()
    (again / "hyps.jsonl").write_text("".join(_lines()), encoding="utf-8")
    compress_hyps(again)
    assert (again / "hyps.jsonl.gz").read_bytes() == (packed / "hyps.jsonl.gz").read_bytes()
    with pytest.raises(FileNotFoundError, match="no hyps.jsonl"):
        open_hyps(tmp_path)


def test_output_manifests_from_a_compressed_run(tmp_path):
    from eval.results import RunDirectory, compress_hyps

    with RunDirectory(tmp_path, "exp", "r") as rd:
        with rd.open_hyps() as f:
            f.writelines(_lines())
        compress_hyps(rd.path)
        written = rd.write_output_manifests()
        rd.write_results([])
    assert sorted(p.name for p in written) == ["greedy.jsonl", "wfst.jsonl"]
    assert (tmp_path / "exp" / "r" / "hyps.jsonl.gz").is_file()


def test_committed_evidence_hypotheses_decompress():
    """Every compressed hypothesis file of the committed evidence opens and holds JSON lines."""
    from eval.results import open_hyps

    files = sorted(Path("reports/evidence").rglob("hyps.jsonl.gz"))
    assert files, "the evidence is stored compressed (eval.results.compress_hyps)"
    for path in files:
        with open_hyps(path.parent) as f:
            first = f.readline()
        assert {"decoder", "dataset", "id", "hyp"} <= set(json.loads(first)), path
        with gzip.open(path) as g:  # the whole archive is intact (CRC checked at the end)
            while g.read(1 << 20):
                pass
