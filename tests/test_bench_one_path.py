"""eval/bench is a client of the harness's one measurement path: no WER, timing or markdown-table code of its own
(issue 11: the benchmarks had their own jiwer WER with an "<empty>" stand-in, perf_counter/time.time timers,
JSON layouts and comparison tables, so reports/ could not regenerate the README's GPU numbers)."""
from __future__ import annotations

import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "eval" / "bench"
# WER (jiwer, the old stand-in), clocks, allocator/free-memory probes, markdown table rules, tabulate, and the
# scripts' own JSON result files (rows go through eval.results; hyps.jsonl lines through RunDirectory.open_hyps)
FORBIDDEN = re.compile(r"jiwer|<empty>|perf_counter|time\.time|time\.monotonic|max_memory_allocated|mem_get_info|"
                       r"reset_peak_memory_stats|\| ---|\|---|tabulate|to_markdown|write_text\(json\.dumps")


def test_bench_scripts_hold_no_wer_timing_or_table_code():
    hits = []
    for path in sorted(BENCH.glob("*")):
        if path.suffix not in (".py", ".sh"):
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FORBIDDEN.search(line):
                hits.append(f"{path.name}:{lineno}: {line.strip()}")
    assert not hits, "measurement or table code outside eval/metrics.py and reports/:\n" + "\n".join(hits)


def test_the_pattern_catches_what_it_forbids():
    """The grep above cannot pass vacuously: each kind of line it exists for matches."""
    for bad in ("import jiwer", "t0 = time.perf_counter()", "t = time.time()", 'lines = ["| a |", "|---|"]',
                "free = torch.cuda.mem_get_info()[0]", "print(tabulate(rows))", 'out.write_text(json.dumps(rows))'):
        assert FORBIDDEN.search(bad), bad
