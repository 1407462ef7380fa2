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


def test_measured_decoder_builds_measures_and_always_closes():
    """eval.bench.common.MeasuredDecoder, the benchmarks' one build-and-measure step: the decoder is built from the
    set's token set after the log-probs are resident, decode() is decode_pass over the set (hypotheses in order), and
    the decoder is closed on exit -- also when building or decoding fails; a cuda row without CUDA is refused."""
    import pytest
    import torch

    from decoders.types import Hypothesis
    from eval.bench.common import LogProbSet, MeasuredDecoder

    data = LogProbSet(log_probs=torch.zeros(3, 4, 2), lengths=torch.tensor([4, 2, 0]), refs=["a", "b", ""],
                      durations=[0.16, 0.08, 0.0], ids=["u0", "u1", "u2"], tokens=["a", "<blk>"], blank_id=1)
    events = []

    class Fake:
        def __init__(self, ctx, fail_decode=False):
            events.append(("built", list(ctx.tokens.tokens)))
            self.fail_decode = fail_decode

        def decode(self, lp, lengths, boosts=None):
            if self.fail_decode:
                raise RuntimeError("decode failed")
            return [Hypothesis(tokens=[], words=["a"] * int(n > 0), score=0.0) for n in lengths.tolist()]

        def close(self):
            events.append("closed")

    with MeasuredDecoder(lambda ctx: Fake(ctx), data, "cpu") as m:
        result = m.decode(batch=2)
    assert result.hyps == ["a", "a", ""] and events == [("built", ["a", "<blk>"]), "closed"]
    assert m.decoder is None  # dropped on exit

    events.clear()
    with pytest.raises(RuntimeError, match="decode failed"):
        with MeasuredDecoder(lambda ctx: Fake(ctx, fail_decode=True), data, "cpu") as m:
            m.decode(batch=3)
    assert events[-1] == "closed"

    def bad_build(ctx):
        raise ValueError("cannot build")

    with pytest.raises(ValueError, match="cannot build"):
        with MeasuredDecoder(bad_build, data, "cpu"):
            pass
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            with MeasuredDecoder(lambda ctx: Fake(ctx), data, "cuda"):
                pass
