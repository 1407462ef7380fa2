"""reports/: markdown table from results rows, unavailable list, plots, CLI; no torch imported."""
import json
import subprocess
import sys

from reports.cli import main
from reports.tables import load_results, results_table, unavailable_table


def _rows():
    rows = []
    for dec, dev, wers in (("greedy", "cpu", (0.0469, 0.1284)), ("flashlight", "cpu", (0.0008, 0.0095)),
                           ("wfst@cuda", "cuda", (0.0007, 0.009))):
        for ds, w in zip(("clean", "other"), wers):
            rows.append({"status": "ok", "run": "r", "decoder": dec, "device": dev, "dataset": ds, "wer": w,
                         "substitutions": 3, "deletions": 2, "insertions": 1, "rtfx_decoder": 1234.5,
                         "rtfx_end_to_end": 99.0, "rss_increase_bytes": 2 * 2**20, "cuda_peak_bytes": 5 * 2**20,
                         "utterances": 200, "boost_value": None})
    rows.append({"status": "unavailable", "decoder": "riva", "reason": "CUDA | not available"})
    return rows


def test_table_has_one_row_per_decoder_and_columns_per_dataset():
    table = results_table(_rows())
    lines = table.splitlines()
    assert lines[0].startswith("| decoder | device | clean WER %")
    assert "other RTFx" in lines[0] and "other mem MiB" in lines[0]
    assert len(lines) == 2 + 3
    greedy = next(line for line in lines if line.startswith("| greedy"))
    assert "| 4.69 |" in greedy and "| 12.84 |" in greedy and "1,234" in greedy and "3/2/1" in greedy
    cuda = next(line for line in lines if line.startswith("| wfst@cuda"))
    assert "| 5.0 |" in cuda  # CUDA peak for GPU decoders, RSS rise (2.0) for CPU ones
    assert "riva" not in table


def test_unavailable_table_lists_reasons_escaped():
    text = unavailable_table(_rows())
    assert "| riva | CUDA \\| not available |" in text
    assert unavailable_table([r for r in _rows() if r["status"] == "ok"]) == ""


def test_cli_writes_report_and_plot(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    assert main([str(run)]) == 0
    assert (run / "report.md").read_text().startswith("# Decoder comparison")
    assert (run / "wer_vs_rtfx.png").stat().st_size > 1000
    assert "| flashlight |" in capsys.readouterr().out
    assert len(load_results([tmp_path])) == len(_rows())
    assert main([str(tmp_path / "missing")]) == 2


def test_reports_do_not_import_torch():
    code = "import sys, reports.tables, reports.plots, reports.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
