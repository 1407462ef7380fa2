"""Tables the benchmark scripts print (pure functions of their result rows; no GPU needed)."""

from eval.bench.wfst_bench import comparison_table


def test_wfst_bench_comparison_table_pairs_ours_with_riva_on_the_same_tlg_and_batch():
    rows = [
        dict(decoder="ours", graph="compact/TLG", batch=32, rtfx=1220.0, wer=0.1516, vram_delta_bytes=100 * 2**20,
             rescued_utts=18, rescue_causes={"frontier": 18}),
        dict(decoder="ours", graph="compact/HLG", batch=32, rtfx=5900.0, wer=0.1570, rescued_utts=0),
        dict(decoder="riva", graph="compact/TLG", batch=32, rtfx=1000.0, wer=0.1502, vram_delta_bytes=50 * 2**20),
        dict(decoder="riva", graph="compact/TLG", batch=200, error="boom"),
        dict(decoder="ours", graph="normal/TLG", batch=32, rtfx=900.0, wer=0.2, rescued_utts=0),
        dict(decoder="k2py(cpu)", graph="compact/HLG", batch=1, rtfx=45.0, wer=0.154),
    ]
    lines = comparison_table(rows).splitlines()
    assert len(lines) == 2 + 4  # header + our three rows + k2py; Riva rows only as columns
    assert lines[2].split(" | ")[3:6] == ["1220", "1000", "1.22x"]
    assert lines[2].endswith("18 (frontier 18) |") and "| 100 | 50 |" in lines[2]
    assert lines[3].split(" | ")[4:6] == ["-", "-"]  # HLG: Riva takes only the TLG
    assert lines[4].split(" | ")[4:6] == ["-", "-"]  # no Riva row for the normal topology
    assert lines[5].startswith("| k2py(cpu) | compact/HLG | 1 | 45 |")
