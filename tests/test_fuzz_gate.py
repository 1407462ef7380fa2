"""Fuzz the gate's inputs (issue 11): seeded random corruptions of results.jsonl and of the baseline JSON (type
swaps, NaN/inf/negative/huge numbers, missing and extra keys, truncation, junk lines, duplicated rows, lists or
scalars instead of objects) through `eval.gate.main`. Every case must end with exit 2 and one `error:` line, or
with exit 0/1 on input an independent well-formedness oracle accepts; never a traceback, never bad input that
passes. A few cases also run as `python -m eval.gate` subprocesses to check the real exit codes."""
import contextlib
import copy
import dataclasses
import io
import json
import math
import random
import subprocess
import sys
from pathlib import Path

from eval.gate import main, make_baseline
from reports.schema import BASELINE_FIELDS, ResultRow
from test_gate_compare import ROWS, _bench_rows

REPO = Path(__file__).parents[1]
SEED = 20261201
N_CASES = 240
ALL_FIELDS = {f.name for f in dataclasses.fields(ResultRow)}
ODD_VALUES = [None, "x", "", [], {}, [1], {"a": 1}, True, False, 0, -1, 1.5, -0.5, 10**30, 2**64, 1e308,
              float("nan"), float("inf"), float("-inf"), "nan", "0.05"]
JUNK_LINES = ["garbage", "{", "[]", "[1, 2]", "null", "1", '"row"', "{}", '{"decoder": "x"}', "\x00\x01", "NaN"]


# ------------------------------------------------------------------ an independent oracle (necessary conditions)


def _finite_tree(v) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, dict):
        return all(_finite_tree(x) for x in v.values())
    if isinstance(v, list):
        return all(_finite_tree(x) for x in v)
    return True


def _row_key(d):
    return (d.get("decoder"), d.get("dataset"), json.dumps(d.get("params"), sort_keys=True))


def results_look_valid(text: str) -> bool:
    keys = set()
    n = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError:
            return False
        if not isinstance(d, dict) or set(d) != ALL_FIELDS or not _finite_tree(d):
            return False
        if d["status"] == "ok" and not isinstance(d["wer"], (int, float, type(None))):
            return False
        if _row_key(d) in keys:
            return False
        keys.add(_row_key(d))
        n += 1
    return n > 0


def baseline_looks_valid(text: str) -> bool:
    try:
        d = json.loads(text)
    except ValueError:
        return False
    if not isinstance(d, dict) or not _finite_tree(d):
        return False
    rows, tol = d.get("rows"), d.get("tolerances", {})
    if not isinstance(rows, list) or not rows or not isinstance(tol, dict):
        return False
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in tol.values()):
        return False
    keys = set()
    for r in rows:
        if not isinstance(r, dict) or set(r) != set(BASELINE_FIELDS):
            return False
        if r["wer"] is not None and (isinstance(r["wer"], (bool, str)) or not r["wer"] >= 0):
            return False
        if _row_key(r) in keys:
            return False
        keys.add(_row_key(r))
    return True


# ------------------------------------------------------------------ corruptions


def _pick_row(rng, rows):
    return rng.randrange(len(rows)) if rows else None


def corrupt_results(rng: random.Random, rows: list) -> str:
    kind = rng.choice(["swap", "swap", "drop_key", "extra_key", "dup", "truncate", "junk", "non_object",
                       "wer_parts", "empty", "nested", "none"])
    rows = copy.deepcopy(rows)
    i = _pick_row(rng, rows)
    if kind == "swap":
        k = rng.choice(sorted(rows[i]))
        rows[i][k] = copy.deepcopy(rng.choice(ODD_VALUES))
    elif kind == "drop_key":
        rows[i].pop(rng.choice(sorted(rows[i])))
    elif kind == "extra_key":
        rows[i][rng.choice(["extra", "WER", "wer_pct", "rows"])] = rng.choice(ODD_VALUES)
    elif kind == "dup":
        rows.insert(rng.randrange(len(rows) + 1), copy.deepcopy(rows[i]))
    elif kind == "non_object":
        rows[i] = copy.deepcopy(rng.choice([[1, 2], "row", 3, None, [rows[i]]]))
    elif kind == "wer_parts":
        rows[i]["substitutions"] = rows[i]["substitutions"] + rng.choice([1, 7, 1000])
    elif kind == "empty":
        rows = []
    elif kind == "nested":
        rows[i][rng.choice(["params", "environment", "decoder_config"])] = rng.choice(
            [{"a": float("nan")}, {"a": [1]}, "x", [1], {"nested": {"x": 1}}])
    text = "".join(json.dumps(r) + "\n" for r in rows)  # json.dumps writes NaN/Infinity, as a buggy producer would
    if kind == "truncate" and text:
        text = text[: rng.randrange(len(text))]
    if kind == "junk":
        lines = text.splitlines()
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(JUNK_LINES))
        text = "\n".join(lines) + "\n"
    return text


def corrupt_baseline(rng: random.Random, base: dict) -> str:
    kind = rng.choice(["row_swap", "row_swap", "row_drop", "row_extra", "top_swap", "top_drop", "top_extra",
                       "tol", "dup", "truncate", "rows_shape", "top_list", "none"])
    d = copy.deepcopy(base)
    rows = d["rows"]
    i = _pick_row(rng, rows)
    if kind == "row_swap":
        rows[i][rng.choice(BASELINE_FIELDS)] = copy.deepcopy(rng.choice(ODD_VALUES))
    elif kind == "row_drop":
        rows[i].pop(rng.choice(BASELINE_FIELDS))
    elif kind == "row_extra":
        rows[i][rng.choice(["status", "experiment", "junk"])] = rng.choice(ODD_VALUES)
    elif kind == "top_swap":
        d[rng.choice(sorted(d))] = copy.deepcopy(rng.choice(ODD_VALUES))
    elif kind == "top_drop":
        d.pop(rng.choice(sorted(d)))
    elif kind == "top_extra":
        d[rng.choice(["extra", "row", "Rows"])] = rng.choice(ODD_VALUES)
    elif kind == "tol":
        d["tolerances"][rng.choice(["wer_abs", "rtfx_rel_drop", "unknown"])] = rng.choice(ODD_VALUES)
    elif kind == "dup":
        rows.append(copy.deepcopy(rows[i]))
    elif kind == "rows_shape":
        d["rows"] = rng.choice([[], None, {"0": rows[0]}, "rows", [rows], [None], rows[:1] * 2])
    elif kind == "top_list":
        d = [d]
    text = json.dumps(d, indent=1)
    if kind == "truncate":
        text = text[: rng.randrange(len(text))]
    return text


# ------------------------------------------------------------------ the run


def _run_in_process(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except BaseException as e:  # noqa: BLE001 - a traceback is exactly what this test counts
            return None, out.getvalue(), f"Traceback: {type(e).__name__}: {e}"
    return code, out.getvalue(), err.getvalue()


def test_fuzz_gate_inputs(tmp_path):
    rng = random.Random(SEED)
    good_rows = [json.loads(r.to_json()) for r in ROWS + _bench_rows()]
    good_base = make_baseline([ResultRow.from_dict(r) for r in good_rows])
    good_base = json.loads(json.dumps(good_base))  # as read back from disk
    tally = {"tried": 0, "exit-2 clean": 0, "exit 0-1 on valid input": 0, "tracebacks": 0,
             "bad input accepted": 0, "messy exit 2": 0}
    problems = []
    cases = []
    for n in range(N_CASES):
        which = rng.choice(["results", "baseline", "both"])
        res_text = corrupt_results(rng, good_rows) if which != "baseline" else \
            "".join(json.dumps(r) + "\n" for r in good_rows)
        base_text = corrupt_baseline(rng, good_base) if which != "results" else json.dumps(good_base)
        res, base = tmp_path / f"r{n}.jsonl", tmp_path / f"b{n}.json"
        res.write_text(res_text, encoding="utf-8")
        base.write_text(base_text, encoding="utf-8")
        extra = rng.choice([[], [], ["--metrics", "wer"], ["--metrics", "rtfx"], ["--wer-abs-tol", "0.01"]])
        argv = [str(res), str(base), *extra]
        cases.append(argv)
        code, out, err = _run_in_process(argv)
        tally["tried"] += 1
        valid = results_look_valid(res_text) and baseline_looks_valid(base_text)
        if code is None:
            tally["tracebacks"] += 1
            problems.append((n, which, err))
        elif code == 2:
            one_line = len(err.strip().splitlines()) == 1 and err.startswith("error: ") and not out
            tally["exit-2 clean" if one_line else "messy exit 2"] += 1
            if not one_line:
                problems.append((n, which, err))
        elif code in (0, 1) and valid:
            tally["exit 0-1 on valid input"] += 1
        else:
            tally["bad input accepted"] += 1
            problems.append((n, which, f"exit {code} on input the oracle rejects"))
    print("gate fuzz:", ", ".join(f"{k} {v}" for k, v in tally.items()))
    assert tally["tried"] >= 200
    assert tally["tracebacks"] == 0, problems[:5]
    assert tally["messy exit 2"] == 0 and tally["bad input accepted"] == 0, problems[:5]
    # the corruptions do reach both outcomes (a fuzzer that only ever produced junk would prove little)
    assert tally["exit-2 clean"] >= 100 and tally["exit 0-1 on valid input"] >= 5

    # the real entry point agrees on a sample of cases: same exit code, no traceback on stderr
    for argv in rng.sample(cases, 6):
        want, _, _ = _run_in_process(argv)
        p = subprocess.run([sys.executable, "-m", "eval.gate", *argv], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == want and "Traceback" not in p.stderr, (argv, p.returncode, p.stderr[-500:])
