"""Fuzz test of the graph-image loader (issue 11): random corruptions of a small image, loaded in subprocesses.

Every corrupted file must either be refused with a clean one-line error (CorruptGraphError / ValueError) or, if
accepted, load as exactly the original graph. A crash (signal, abort), an unclean error (another exception type,
a multi-line message) or a silently changed graph fails the test. Children load many cases each and print one
line per case before and after loading, so a crash is attributed to its case (and the rest of the batch is
re-run in a fresh child).

Corruption kinds: byte flips (1-4 bytes anywhere), truncation, zeroed ranges, header edits (a field set to a
nearby or random value, CRCs left as they were: a forger who recomputes CRCs writes a new, valid image),
appended junk, and pairs of these.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from decoders.graph import EPSILON, FINAL, WfstGraph, _HEADER_FMT

SEED = 20261130
NUM_CASES = 240
BATCH = 80
ROOT = Path(__file__).resolve().parents[1]


def _graph() -> WfstGraph:
    """~30 states, emitting/epsilon/final arcs, multi-word arcs, a word table and info: every section non-empty."""
    rng = np.random.default_rng(SEED)
    n, v, w = 30, 7, 15
    final = n - 1
    src, dst, il, ol, wt, aux = [], [], [], [], [], []
    for s in range(n - 1):
        for _ in range(int(rng.integers(1, 5))):
            words = [] if rng.random() < 0.5 else [int(x) for x in rng.integers(1, w, size=int(rng.integers(1, 3)))]
            src.append(s), dst.append(int(rng.integers(0, n - 1))), il.append(int(rng.integers(0, v)))
            ol.append(words[0] if words else 0), wt.append(float(rng.uniform(-3, 0.5))), aux.append(words)
        if rng.random() < 0.3:
            src.append(s), dst.append(int(rng.integers(0, n - 1))), il.append(EPSILON)
            ol.append(0), wt.append(float(-rng.uniform(0, 1))), aux.append([])
        if rng.random() < 0.4:
            src.append(s), dst.append(final), il.append(FINAL), ol.append(0), wt.append(float(rng.uniform(-1, 0)))
            aux.append([])
    words = ["<eps>"] + [f"wörd{i}" for i in range(1, w - 2)] + ["<s>", "</s>"]
    return WfstGraph.from_arcs(src, dst, il, ol, wt, num_states=n, start_state=0, final_state=final, num_tokens=v,
                               words=words, info={"kind": "fuzz", "blank_id": 0}, aux=aux).validate()


# (name, byte offset) of every header field after the magic, from the loader's own struct format
_HEADER_FIELDS = [(name, struct.calcsize(_HEADER_FMT[: 3 + k])) for k, name in enumerate(
    ["version", "flags", "num_states", "num_arcs", "start", "final", "num_tokens", "num_words", "aux_size",
     "words_bytes", "info_bytes", "crc", "header_crc"])]
_FIELD_FMT = {"version": "<I", "flags": "<I", "crc": "<I", "header_crc": "<I"}


def _corrupt(raw: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    b = bytearray(raw)
    kind = ["flip", "truncate", "zero", "header", "junk", "pair"][int(rng.integers(0, 6))]
    if len(b) < 96 and kind in ("header", "zero", "flip"):  # too short for these (after a truncation)
        kind = "junk"
    if kind == "pair":
        k1, b1 = _corrupt(raw, rng)
        k2, b2 = _corrupt(b1, rng)
        return f"{k1}+{k2}", b2
    if kind == "flip":
        for _ in range(int(rng.integers(1, 5))):
            i = int(rng.integers(0, len(b)))
            b[i] ^= int(rng.integers(1, 256))
    elif kind == "truncate":
        b = b[: int(rng.integers(0, len(b)))]
    elif kind == "zero":
        i = int(rng.integers(0, len(b)))
        j = min(len(b), i + int(rng.integers(1, 64)))
        if not any(b[i:j]):  # already zero: zero a header range instead, so the case changes something
            i, j = 8, 8 + int(rng.integers(1, 90))
        b[i:j] = bytes(j - i)
    elif kind == "header":
        name, off = _HEADER_FIELDS[int(rng.integers(0, len(_HEADER_FIELDS)))]
        fmt = _FIELD_FMT.get(name, "<q")
        (old,) = struct.unpack_from(fmt, b, off)
        choices = [old + 1, old - 1, 0, int(rng.integers(0, 1 << 20)), (1 << 31) - 1]
        new = int(choices[int(rng.integers(0, len(choices)))])
        if fmt == "<I":
            new %= 1 << 32
        if new == old:
            new = (old + 1) % (1 << 32) if fmt == "<I" else old + 1
        struct.pack_into(fmt, b, off, new)
        kind = f"header:{name}"
    else:
        b += bytes(rng.integers(0, 256, size=int(rng.integers(1, 200)), dtype=np.uint8))
    return kind, bytes(b)


_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from decoders.graph import CorruptGraphError, WfstGraph

    def same(a, b):
        if (a.num_states, a.start_state, a.final_state, a.num_tokens, a.words, a.info) != \\
                (b.num_states, b.start_state, b.final_state, b.num_tokens, b.words, b.info):
            return False
        for f in ("row_splits", "dest", "ilabel", "olabel"):
            if not np.array_equal(getattr(a, f), getattr(b, f)):
                return False
        if not np.array_equal(np.asarray(a.weight, np.float32).view(np.int32),
                              np.asarray(b.weight, np.float32).view(np.int32)):
            return False
        return all(np.array_equal(x, y) for x, y in zip(a.aux_csr(), b.aux_csr()))

    original = WfstGraph.load(sys.argv[1])
    for path in sys.argv[2:]:
        case = path.rsplit("_", 1)[1].split(".")[0]
        print("START", case, flush=True)
        try:
            g = WfstGraph.load(path)
        except (CorruptGraphError, ValueError) as e:
            msg = str(e)
            print("RESULT", case, "clean" if msg and "\\n" not in msg else "unclean", flush=True)
            continue
        except BaseException as e:
            print("RESULT", case, "unclean", type(e).__name__, str(e).replace("\\n", " ")[:200], flush=True)
            continue
        print("RESULT", case, "identical" if same(g, original) else "changed", flush=True)
""")


def _run_children(original: Path, cases: list[Path]) -> dict[str, str]:
    """{case: outcome}; a case that started but never finished in a child that died is a crash."""
    outcome: dict[str, str] = {}
    pending = list(cases)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    while pending:
        batch, pending = pending[:BATCH], pending[BATCH:]
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(original), *map(str, batch)], capture_output=True,
                              text=True, env=env, timeout=300)
        started = None
        for line in proc.stdout.splitlines():
            parts = line.split()
            if parts[:1] == ["START"]:
                started = parts[1]
            elif parts[:1] == ["RESULT"]:
                outcome[parts[1]] = parts[2]
                started = None
        if proc.returncode != 0:
            if started is None:  # died outside any case (e.g. at import): every unfinished case counts
                for p in batch:
                    outcome.setdefault(p.stem.rsplit("_", 1)[1], f"crash(rc={proc.returncode}): {proc.stderr[-300:]}")
                continue
            outcome[started] = f"crash(rc={proc.returncode})"
            done = set(outcome)
            # re-run what the dead child did not reach
            pending = [p for p in batch if p.stem.rsplit("_", 1)[1] not in done] + pending
    return outcome


def test_fuzzed_graph_images_never_crash_or_change_silently(tmp_path):
    g = _graph()
    original = tmp_path / "original.bin"
    g.save(original)
    raw = original.read_bytes()
    rng = np.random.default_rng(SEED)
    kinds, cases = {}, []
    for i in range(NUM_CASES):
        kind, data = _corrupt(raw, rng)
        if data == raw:  # e.g. a flip that cancelled out: not a corruption
            continue
        p = tmp_path / f"case_{i}.bin"
        p.write_bytes(data)
        kinds[str(i)] = kind
        cases.append(p)
    assert len(cases) >= 200
    # controls (not counted): the harness must see an exact copy as identical and a valid image of another
    # graph (one weight changed, CRCs right) as changed -- otherwise the test could not fail
    other = _graph()
    other.weight = other.weight.copy()
    other.weight[3] += np.float32(0.5)
    other.save(tmp_path / "case_controlchanged.bin")
    (tmp_path / "case_controlsame.bin").write_bytes(raw)
    outcome = _run_children(original, cases + [tmp_path / "case_controlchanged.bin",
                                               tmp_path / "case_controlsame.bin"])
    assert outcome.pop("controlchanged") == "changed" and outcome.pop("controlsame") == "identical"
    tally = {k: 0 for k in ("clean", "identical", "crash", "changed", "unclean")}
    for case, o in outcome.items():
        tally["crash" if o.startswith("crash") else o] += 1
    print(f"\ngraph-image fuzz: tried {len(cases)} | clean errors {tally['clean']} | accepted-identical "
          f"{tally['identical']} | crashes {tally['crash']} | unclean errors {tally['unclean']} | "
          f"silently changed {tally['changed']}")
    bad = {c: (kinds.get(c), o) for c, o in outcome.items() if o not in ("clean", "identical")}
    assert len(outcome) == len(cases), "some cases produced no outcome"
    assert tally["crash"] == 0 and tally["changed"] == 0 and tally["unclean"] == 0, bad
