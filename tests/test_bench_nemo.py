"""eval/bench/nemo_e2e.py on the CPU: a random-weight tiny Conformer-CTC, synthetic audio, a run directory with one
reference-free row per (decoder, batch size)."""
from __future__ import annotations

import pytest

from reports.schema import load_rows

pytest.importorskip("nemo.collections.asr")


@pytest.mark.slow
def test_nemo_e2e_writes_a_run_directory(tmp_path):
    from eval.bench.nemo_e2e import main

    assert main(["--model", "tiny-char", "--batch-sizes", "1", "2", "--num-utterances", "3", "--decoders", "greedy",
                 "--device", "cpu", "--workdir", str(tmp_path / "w"), "--output-dir", str(tmp_path), "--run", "t"]) == 0
    rows = load_rows(tmp_path / "nemo_e2e" / "t")
    assert [(r.decoder_name, r.batch_size) for r in rows] == [("greedy", 1), ("greedy", 2)]
    for r in rows:
        assert r.ok and r.wer is None and r.utterances == 3 and r.dataset == "synthetic"
        # end to end = acoustic model + this decoder, so it is slower than the decoder alone
        assert r.acoustic_seconds > 0 and r.rtfx_end_to_end < r.rtfx_decoder
        assert r.params["model"] == "tiny-char.nemo" and r.params["num_parameters"] > 0
