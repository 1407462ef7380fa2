"""reports.profile's stall ledger over an Nsight Compute source page (CSV), and its one-line errors."""
import pytest

from reports.profile import main, stall_ledger

PAGE = (
    '"Kernel Name","PersistentKernel"\n'
    '"# Line","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"\n'
    '"10","  x = a[i];","300","200"\n'
    '"11","if (y|z)","1,100","50"\n'
    '"12","","0","0"\n'
    '"# Line","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"\n'
    '"40","grid.sync();","600","590"\n'
)


def test_ledger_sums_every_section_heaviest_first():
    lines = stall_ledger(PAGE, top=3).splitlines()
    assert lines[0] == "4 rows, 2,000 warp stall samples"
    body = [ln for ln in lines if ln.startswith("| 1") or ln.startswith("| 4")]
    assert [ln.split("|")[1].strip() for ln in body] == ["11", "40", "10"]
    assert "55.0%" in body[0] and "85.0%" in body[1] and "100.0%" in body[2]
    assert "if (y\\|z)" in body[0]  # a pipe in the source stays inside its cell
    assert len(stall_ledger(PAGE, top=1).splitlines()) == 5


def test_ledger_refuses_a_page_without_samples(tmp_path, capsys):
    with pytest.raises(ValueError, match="no 'Warp Stall Sampling"):
        stall_ledger('"# Line","Source"\n"1","x"\n')
    bad = tmp_path / "page.csv"
    bad.write_text("Duration,12\n")
    assert main(["stalls", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


SASS_PAGE = (
    '"Kernel Name","PersistentKernel"\n'
    '"Address","Source","Warp Stall Sampling (All Samples)","stall_barrier","stall_long_sb","stall_barrier (Not Issued)"\n'
    '"0x10","BAR.SYNC 0x0","90","80","10","80"\n'
    '"0x20","LDG.E R1, [R2]","30","0","30","0"\n'
)


def test_ledger_and_chart_by_stall_reason(tmp_path):
    from reports.profile import plot_stall_reasons

    text = stall_ledger(SASS_PAGE)
    assert "| barrier | 80 | 66.7% |" in text and "| long_sb | 40 | 33.3% |" in text
    assert "| 0x10 | 90 | 75.0% | 75.0% | 0 | barrier |" in text  # "(Not Issued)" columns are not reasons
    png = plot_stall_reasons(SASS_PAGE, tmp_path / "stalls.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="per-reason"):
        plot_stall_reasons(PAGE, tmp_path / "none.png")
