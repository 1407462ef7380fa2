"""eval.bench.ncu_hot_blocks: basic blocks from an Nsight Compute SASS source CSV, ranked by executed instructions."""
import pytest

from eval.bench.ncu_hot_blocks import hot_blocks, main, read_kernels

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
          '"# Samples","Instructions Executed"\n')


def _csv(tmp_path, body_rows, kernels=1):
    text = ""
    for k in range(kernels):
        text += f'"Kernel Name","kern{k}",""\n' + HEADER
        text += "".join(f'"0x{i:x}","      {src}","{s}","0","0","{n}"\n' for i, (src, s, n) in enumerate(body_rows))
    p = tmp_path / "x.sass.csv"
    p.write_text(text)
    return p


def test_blocks_are_runs_of_equal_counts_ranked_by_instructions(tmp_path):
    rows = [("MOV R1, R2", 0, 1), ("IADD3 R1, R1, 1", 1, 1),  # prologue: 2 x 1
            ("ISETP.GT P0, R1, 3", 5, 100), ("@P0 BRA 0x10", 2, 100), ("SEL R3, R1, R2, P0", 1, 100),  # loop: 3 x 100
            ("EXIT", 0, 1), ("NOP", 0, 0)]
    kernels = read_kernels(_csv(tmp_path, rows, kernels=2))
    assert [k for k, _ in kernels] == ["kern0", "kern1"] and len(kernels[0][1]) == 7
    blocks = hot_blocks(kernels[0][1])
    got = [(b.start, b.length, b.count, b.instructions) for b in blocks]
    assert got == [(2, 3, 100, 300), (0, 2, 1, 2), (5, 1, 1, 1)]
    assert blocks[0].samples == 8 and blocks[0].ops["BRA"] == 1 and blocks[0].ops["ISETP"] == 1


def test_cli_refuses_bad_files_and_options(tmp_path, capsys):
    p = _csv(tmp_path, [("EXIT", 0, 1)])
    assert main([str(p), "--per", "2"]) == 0 and "kern0" in capsys.readouterr().out
    assert main([str(p), "--kernel", "3"]) == 2 and "holds 1 launches" in capsys.readouterr().err
    assert main([str(p), "--per", "0"]) == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n")
    assert main([str(bad)]) == 2 and "not an ncu" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.csv")]) == 2
