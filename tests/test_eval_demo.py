"""`python -m eval.demo data=simulator` end to end on a cut-down real tiny workload: prints the table with greedy
and Flashlight on clean and other, writes the run dir (runs/demo/tiny_simulator) + report, and gates (pass on its
own baseline, fail on a planted regression). The speech default is tests/test_demo_speech.py."""
import json

from eval.demo import main
from eval.gate import main as gate_main


def test_demo_end_to_end_with_gate(tmp_path, capsys):
    common = [
        "scale=tiny", f"data.workload_root={tmp_path / 'wl'}", f"experiment.output_dir={tmp_path / 'runs'}",
        f"graph.root={tmp_path / 'graphs'}", "data.max_utterances=6", "experiment.decoders=[greedy,flashlight,ghost_free_name]",
        "experiment.progress=false", "data=simulator",
    ]
    # an unknown decoder name is a config error listing the valid choices (exit 2), not a silent drop
    assert main(common) == 2
    assert "valid choices" in capsys.readouterr().err
    common[5] = "experiment.decoders=[greedy,flashlight]"
    assert main(common + ["experiment.gate_baseline=null"]) == 0
    out = capsys.readouterr().out
    assert "| greedy |" in out and "| flashlight |" in out and "clean WER %" in out and "other WER %" in out
    run_dir = tmp_path / "runs" / "demo" / "tiny_simulator"
    assert (run_dir / "report.md").is_file() and (run_dir / "wer_vs_rtfx.png").is_file()
    baseline = tmp_path / "base.json"
    assert gate_main([str(run_dir / "results.jsonl"), str(baseline), "--write-baseline"]) == 0
    assert main(common + [f"experiment.gate_baseline={baseline}"]) == 0
    assert "GATE PASSED" in capsys.readouterr().out
    # plant a regression in the baseline (claims no errors at all: a valid row) -> the demo exits 1
    data = json.loads(baseline.read_text())
    assert any(row["wer"] > 0.01 for row in data["rows"])
    for row in data["rows"]:
        row.update({k: 0 for k in ("substitutions", "deletions", "insertions") if k in row}, wer=0.0)
        if "hits" in row:
            row["hits"] = row["ref_words"]
    baseline.write_text(json.dumps(data))
    assert main(common + [f"experiment.gate_baseline={baseline}"]) == 1
    assert "GATE FAILED" in capsys.readouterr().out
