"""reports/agreement.py: identical hypotheses, both WERs and the paired bootstrap between two decoders' rows of run
directories (hyps.jsonl or .gz), and its refusals (different references, no rows, a broken line)."""
from __future__ import annotations

import gzip
import json

import pytest

from reports.agreement import agreement, load_hyps, main


def _write(path, rows, gz=False):
    path.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path / "hyps.jsonl.gz", "wt") as f:
            f.write(text)
    else:
        (path / "hyps.jsonl").write_text(text)


def _rows(decoder, hyps, refs=("a b c", "d e", "f")):
    return [{"decoder": decoder, "dataset": "x", "id": f"u{i}", "ref": r, "hyp": h}
            for i, (r, h) in enumerate(zip(refs, hyps))]


def test_agreement_counts_identical_hypotheses_and_pairs_the_wers(tmp_path, capsys):
    _write(tmp_path / "a", _rows("ours", ["a b c", "d", "F"]) + _rows("other", ["x", "x", "x"]))
    _write(tmp_path / "b", _rows("theirs", ["a b c", "d e", "f"]), gz=True)
    a, b = load_hyps(tmp_path / "a", "ours"), load_hyps(tmp_path / "b", "theirs")
    res = agreement(a, b)
    assert res["utterances"] == 3 and res["identical"] == 2  # "F" equals "f" after the harness's normaliser
    assert res["wer_a"] == pytest.approx(1 / 6) and res["wer_b"] == 0.0
    assert res["paired"]["estimate"] == pytest.approx(1 / 6) and res["paired"]["low"] >= 0.0
    assert main([str(tmp_path / "a"), "ours", str(tmp_path / "b"), "theirs"]) == 0
    out = capsys.readouterr().out
    assert "2 identical hypotheses" in out and "WER A 16.67 %" in out


def test_agreement_refuses_other_inputs_with_one_line_errors(tmp_path, capsys):
    _write(tmp_path / "a", _rows("ours", ["a b c", "d e", "f"]))
    _write(tmp_path / "b", _rows("theirs", ["a b c", "d e", "f"], refs=("a b c", "d e", "g")))
    with pytest.raises(ValueError, match="different references"):
        agreement(load_hyps(tmp_path / "a", "ours"), load_hyps(tmp_path / "b", "theirs"))
    with pytest.raises(ValueError, match="no hypotheses of 'nobody'"):
        load_hyps(tmp_path / "a", "nobody")
    with pytest.raises(FileNotFoundError, match="no hyps.jsonl"):
        load_hyps(tmp_path / "missing", "ours")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "hyps.jsonl").write_text('{"decoder": "ours"\n')
    assert main([str(tmp_path / "c"), "ours", str(tmp_path / "a"), "ours"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: agreement:") and len(err.strip().splitlines()) == 1
