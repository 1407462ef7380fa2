"""reports/: markdown tables from ResultRows (utterance counts stated, multi-run rows labelled by what differs),
the unavailable list, plots, the CLI; no torch imported."""
import dataclasses
import subprocess
import sys

from reports.cli import main
from reports.schema import ResultRow
from reports.tables import load_results, results_table, row_labels, unavailable_table
from test_gate_compare import result_row, rows_file


def _rows():
    rows = []
    for dec, dev, errs in (("greedy", "cpu", (469, 1284)), ("flashlight", "cpu", (8, 95)),
                           ("wfst@cuda", "cuda", (7, 90))):
        for ds, e in zip(("clean", "other"), errs):
            rows.append(result_row(dec, ds, e, 1234.5, ref_words=10000, device=dev, rss_increase_bytes=2 * 2**20,
                                   cuda_peak_bytes=5 * 2**20, decoder_name=dec.split("@")[0]))
    rows.append(ResultRow(experiment="e", run="r", decoder="riva", decoder_name="riva", device="cuda",
                          status="unavailable", reason="CUDA | not available"))
    return rows


def test_table_has_one_row_per_decoder_and_columns_per_dataset():
    table = results_table(_rows())
    lines = table.splitlines()
    assert lines[0].startswith("| decoder | device | clean WER %")
    assert "other RTFx" in lines[0] and "other mem MiB" in lines[0]
    assert len([line for line in lines if line.startswith("|")]) == 2 + 3
    greedy = next(line for line in lines if line.startswith("| greedy"))
    assert "| 4.69 |" in greedy and "| 12.84 |" in greedy and "1,234" in greedy and "469/0/0" in greedy
    cuda = next(line for line in lines if line.startswith("| wfst@cuda"))
    assert "| 5.0 |" in cuda  # CUDA peak for GPU decoders, RSS rise (2.0) for CPU ones
    assert "riva" not in table


def test_table_states_the_utterance_count_per_dataset():
    assert results_table(_rows()).splitlines()[-1] == "Utterances: clean 200, other 200."


def test_table_mixing_utterance_counts_shows_them_per_row():
    """Two runs on different subsets: the table must not present 200- and 50-utterance WERs as comparable."""
    a = [dataclasses.replace(r, run="a") for r in _rows()[:2]]
    b = [dataclasses.replace(r, run="b", utterances=50, audio_seconds=300.0, decoder_config={"beam_size": 4})
         for r in _rows()[:2]]
    table = results_table(a + b)
    header = table.splitlines()[0]
    assert "clean utts" in header and "other utts" in header
    rows = [line.split(" | ") for line in table.splitlines()[2:4]]
    col = header.split(" | ").index("clean utts")
    assert {rows[0][col], rows[1][col]} == {"200", "50"}
    assert "clean 200/50" in table and "differ between rows" in table


def test_multi_run_rows_are_labelled_by_what_differs_not_by_timestamp():
    runs = []
    for stamp, beam in (("20261201-040006", 8.0), ("20261201-050107", 17.0)):
        runs += [dataclasses.replace(r, run=stamp, decoder_config={"search_beam": beam, "max_active": 10000})
                 for r in _rows()[:2]]
    table = results_table(runs)
    assert "| greedy (search_beam=8) |" in table and "| greedy (search_beam=17) |" in table
    assert "2026" not in table and "max_active" not in table  # what is equal is not repeated
    # batch size differs instead
    runs = [dataclasses.replace(r, run=f"r{b}", batch_size=b) for b in (1, 32) for r in _rows()[:2]]
    assert "| greedy (batch_size=32) |" in results_table(runs)


def test_identical_repeated_runs_get_distinct_labels():
    runs = [dataclasses.replace(r, run=f"2026120{i}-000000") for i in (1, 2) for r in _rows()[:2]]
    labels = sorted(row_labels(runs).values())
    assert labels == ["greedy (repeat 1)", "greedy (repeat 2)"]


def test_rows_without_references_say_wer_na():
    row = result_row("ctc_beam@cuda", "synthetic", no_wer=True, params={"B": 16})
    table = results_table([row])
    assert "| ctc_beam@cuda [B=16] |" in table and "| n/a |" in table


def test_unavailable_table_lists_reasons_escaped():
    text = unavailable_table(_rows())
    assert "| riva | CUDA \\| not available |" in text
    assert unavailable_table([r for r in _rows() if r.ok]) == ""


def test_cli_writes_report_and_plot(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    rows_file(run / "results.jsonl", _rows())
    assert main([str(run)]) == 0
    assert (run / "report.md").read_text().startswith("# Decoder comparison")
    assert (run / "wer_vs_rtfx.png").stat().st_size > 1000
    out = capsys.readouterr().out
    assert "| flashlight |" in out and "Utterances: clean 200" in out and "| riva |" in out
    assert len(load_results([tmp_path])) == len(_rows())
    assert main([str(tmp_path / "missing")]) == 2


def test_cli_bad_results_line_is_one_line_exit_2(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    rows_file(run / "results.jsonl", _rows())
    with open(run / "results.jsonl", "a") as f:
        f.write('{"decoder": "x", "wer": NaN}\n')
    assert main([str(run), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "results.jsonl:8" in err


def test_reports_do_not_import_torch():
    code = "import sys, reports.tables, reports.plots, reports.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
