"""Fuzz: corrupted, truncated, extended and foreign CTC streaming states never crash the process and are never
read silently (issue 11: a tampered header word or length word crashed `finalize` with SIGSEGV; a state of
another config of the same byte size was read silently; chunks of another vocabulary read out of bounds).

Every case is one corrupted state fed to `decode_chunk` (the next chunk) then `finalize`, in a child process;
the children run many cases each and print a START and a RESULT line per case, so a crash names its case
(the parent restarts a child after the crashing case). Outcomes:
  clean error     one ValueError/RuntimeError with a one-line message;
  accepted-equal  no error, and the N-best (tokens and scores) equals the uncorrupted state's (a corruption
                  that left the content unchanged, e.g. zeroing words that were already zero);
  crash           the child died (signal / abnormal exit) or raised something else;
  silently changed  no error but a different result.
The tally line is printed (`-s` shows it); crashes and silent changes must both be 0.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder, CtcStreamState
from tests.ctc_helpers import random_log_probs

REPO = Path(__file__).resolve().parents[1]
SEED = 20261201
N_RANDOM = 240  # random corruptions; plus the fixed reproductions and foreign states below

# Decoder configs (name -> config kwargs, vocabulary). "flat_b8" has the same bytes per row as "flat_b4"
# (16 + 9*8 + 8*7/2 == 16 + 9*4 + 4*32/2 == 116 words): the "same byte size, other config" case of the issue.
CONFIGS = {
    "flat_b4": (dict(beam_size=4, nbest=3, max_seq_len=32), 7),
    "flat_b8": (dict(beam_size=8, nbest=3, max_seq_len=7), 7),
    "paged_b4": (dict(beam_size=4, nbest=3, max_seq_len=32, paged=True, page_size=4), 7),
    "flat_v129": (dict(beam_size=4, nbest=3, max_seq_len=32), 129),
    "flat_blank_last": (dict(beam_size=4, nbest=3, max_seq_len=32, blank_id=6), 7),
}


def _decoder(name: str) -> tuple[CtcStreamingDecoder, int]:
    kw, V = CONFIGS[name]
    return CtcStreamingDecoder(CtcBeamSearchConfig(blank_skip_threshold=1.0, **kw)), V


def _chunks(V: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    lp = random_log_probs(1, 30, V, seed=seed, peaky=3.0)
    return lp[:, :20], lp[:, 20:]  # the state has decoded the first; each case decodes the second


def _base_state(name: str) -> torch.Tensor:
    dec, V = _decoder(name)
    first, _ = _chunks(V, seed=zlib.crc32(name.encode()) % 1000)
    st = dec.create_state(1, V)
    dec.decode_chunk(first, state=st)
    return st.tensor.clone()


def _run_case(case: dict) -> dict:
    """decode_chunk + finalize on the case's state; the outcome as a JSON-able dict (child side)."""
    dec, V = _decoder(case["decoder"])
    chunk_v = case.get("chunk_vocab", V)
    _, second = _chunks(chunk_v, seed=zlib.crc32(case["base"].encode()) % 1000)
    state = CtcStreamState(tensor=torch.tensor(case["state"], dtype=torch.int32).reshape(1, -1)
                           if case["state"] is not None else None, vocab_size=case.get("state_vocab", V))
    try:
        if case.get("batch_twice"):
            dec.decode_chunk_batch([second, second], [state, state])
        else:
            dec.decode_chunk(second, state=state)
        res = dec.finalize(state)
    except (ValueError, RuntimeError, TypeError) as err:
        msg = str(err)
        return {"outcome": "error", "one_line": "\n" not in msg.strip() and len(msg) > 0, "msg": msg[:300]}
    return {"outcome": "ok", "tokens": res.tokens, "scores": [[float(x) for x in r] for r in res.scores.tolist()]}


def _child(case_file: str, start: int) -> None:
    cases = json.loads(Path(case_file).read_text())
    for i in range(start, len(cases)):
        print(f"START {i}", flush=True)
        out = _run_case(cases[i])
        print(f"RESULT {i} {json.dumps(out)}", flush=True)


def _make_cases() -> tuple[list[dict], dict]:
    rng = np.random.default_rng(SEED)
    bases = {name: _base_state(name)[0].numpy().astype(np.int32) for name in CONFIGS}
    cases: list[dict] = []

    def add(base: str, arr, kind: str, decoder: str | None = None, **extra):
        cases.append({"base": base, "decoder": decoder or base, "kind": kind,
                      "state": None if arr is None else np.asarray(arr, dtype=np.int32).tolist(), **extra})

    # the reproductions
    for base in ("flat_b4", "paged_b4"):
        w = bases[base].copy(); w[3] = 100000; add(base, w, "active beams = 100000")
        beam = CONFIGS[base][0]["beam_size"]
        w = bases[base].copy(); w[16 + 3 * beam] = 1 << 30; add(base, w, "len[0] = 2^30")
        w = bases[base].copy(); w[16 + 3 * beam + 1] = -5; add(base, w, "len[1] = -5")
        w = bases[base].copy(); w[16 + 2 * beam] = 1 << 20; add(base, w, "last[0] = 2^20")
        w = bases[base].copy(); w[16 + 4 * beam] = 1 << 28; add(base, w, "slot[0] = 2^28")
    # foreign states: same byte size, other config; other vocabulary (V=4 chunks for a V=129 state, the Python
    # attribute tampered so that only the stamp can tell); other blank; paged read as flat of another size
    add("flat_b8", bases["flat_b8"], "foreign: beam 8 / max_seq_len 7 state, beam 4 decoder", decoder="flat_b4")
    add("flat_b4", bases["flat_b4"], "foreign: beam 4 state, beam 8 / max_seq_len 7 decoder", decoder="flat_b8")
    add("flat_v129", bases["flat_v129"], "foreign: V=129 state fed V=4 chunks", decoder="flat_v129",
        chunk_vocab=4, state_vocab=4)
    add("flat_blank_last", bases["flat_blank_last"], "foreign: blank 6 state, blank 0 decoder", decoder="flat_b4")
    add("flat_b4", bases["flat_b4"], "foreign: blank 0 state, blank 6 decoder", decoder="flat_blank_last")
    add("paged_b4", bases["paged_b4"], "foreign: paged state, flat decoder", decoder="flat_b4")
    add("flat_b4", np.zeros_like(bases["flat_b4"]), "foreign: all-zero row (not made by create_state)")
    add("flat_b4", bases["flat_b4"], "the same state twice in decode_chunk_batch", batch_twice=True)

    names = ["flat_b4", "paged_b4", "flat_v129"]
    for _ in range(N_RANDOM):
        base = names[int(rng.integers(len(names)))]
        w = bases[base].copy()
        n = len(w)
        kind = int(rng.integers(8))
        if kind == 0:  # one bit flip anywhere
            i, b = int(rng.integers(n)), int(rng.integers(32))
            w[i] = np.int32(np.uint32(w[i].view(np.uint32) ^ np.uint32(1 << b)).view(np.int32))
            add(base, w, f"bit flip word {i} bit {b}")
        elif kind == 1:  # byte flips
            raw = bytearray(w.tobytes())
            for _ in range(int(rng.integers(1, 5))):
                raw[int(rng.integers(len(raw)))] ^= int(rng.integers(1, 256))
            add(base, np.frombuffer(bytes(raw), dtype=np.int32), "byte flips")
        elif kind == 2:  # header edit
            i = int(rng.integers(16))
            v = int(rng.choice([0, -1, 1, 2, 7, 100000, 1 << 30, -(1 << 31), int(w[i]) + 1, int(w[i]) - 1]))
            w[i] = np.int32(v)
            add(base, w, f"header word {i} = {v}")
        elif kind == 3:  # zeroed range
            a = int(rng.integers(n)); b = min(n, a + int(rng.integers(1, 40)))
            w[a:b] = 0
            add(base, w, f"zeroed words [{a}, {b})")
        elif kind == 4:  # truncation
            add(base, w[: int(rng.integers(0, n))], "truncated")
        elif kind == 5:  # appended junk
            junk = rng.integers(-(1 << 31), 1 << 31, size=int(rng.integers(1, 20)), dtype=np.int64).astype(np.int32)
            add(base, np.concatenate([w, junk]), "appended junk")
        elif kind == 6:  # a random word set to an extreme / random value
            i = int(rng.integers(n))
            v = int(rng.choice([0, -1, 1 << 30, -(1 << 31), (1 << 31) - 1, int(rng.integers(-1000, 1000))]))
            w[i] = np.int32(v)
            add(base, w, f"word {i} = {v}")
        else:  # several random words replaced
            for _ in range(int(rng.integers(2, 6))):
                w[int(rng.integers(n))] = np.int32(int(rng.integers(-(1 << 31), 1 << 31)))
            add(base, w, "random words")
    return cases, bases


def _reference(case: dict, bases: dict) -> dict:
    """The uncorrupted outcome of the case's decoder on its own base state (parent side)."""
    ref_case = {"base": case["decoder"], "decoder": case["decoder"], "state": bases[case["decoder"]].tolist()}
    return _run_case(ref_case)


def test_fuzz_streaming_state_corruptions(tmp_path, capsys):
    from decoders.ctc import load_ops

    load_ops()  # build once in this process; the children load the cached build
    cases, bases = _make_cases()
    assert len(cases) >= 200
    refs = {name: _reference({"decoder": name}, bases) for name in CONFIGS}
    assert all(r["outcome"] == "ok" for r in refs.values()), refs
    case_file = tmp_path / "cases.json"
    case_file.write_text(json.dumps(cases))

    results: dict[int, dict] = {}
    crashes: list[tuple[int, str]] = []
    start = 0
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    while start < len(cases):
        proc = subprocess.run([sys.executable, "-c",
                               f"from tests.test_fuzz_ctc_state import _child; _child({str(case_file)!r}, {start})"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        last_start = None
        for line in proc.stdout.splitlines():
            if line.startswith("START "):
                last_start = int(line.split()[1])
            elif line.startswith("RESULT "):
                _, i, payload = line.split(" ", 2)
                results[int(i)] = json.loads(payload)
        if proc.returncode == 0 and len(results) >= len(cases) - len(crashes):
            break
        # the child died inside `last_start` (or before its first case): attribute it, resume after it
        culprit = last_start if last_start is not None and last_start not in results else start
        crashes.append((culprit, f"rc={proc.returncode} {proc.stderr.strip().splitlines()[-1:] }"))
        start = culprit + 1

    tally = {"tried": len(cases), "clean errors": 0, "accepted-equal": 0, "crashes": len(crashes),
             "silently changed": 0}
    bad: list[str] = []
    for i, case in enumerate(cases):
        if any(c == i for c, _ in crashes):
            bad.append(f"case {i} ({case['kind']}): crashed")
            continue
        out = results[i]
        if out["outcome"] == "error":
            if out["one_line"]:
                tally["clean errors"] += 1
            else:
                tally["crashes"] += 1  # a multi-line message counts against us as well
                bad.append(f"case {i} ({case['kind']}): multi-line error {out['msg']!r}")
        else:
            ref = refs[case["decoder"]]
            if case["base"] == case["decoder"] and out["tokens"] == ref["tokens"] and out["scores"] == ref["scores"]:
                tally["accepted-equal"] += 1
            else:
                tally["silently changed"] += 1
                bad.append(f"case {i} ({case['kind']}): accepted with a different result")
    with capsys.disabled():
        print("\nCTC streaming-state fuzz: " + ", ".join(f"{k} {v}" for k, v in tally.items()))
    assert tally["crashes"] == 0 and tally["silently changed"] == 0, bad[:10]
    assert tally["clean errors"] + tally["accepted-equal"] == tally["tried"]
    # the reproductions are refused with messages that name the field
    msgs = {cases[i]["kind"]: results[i].get("msg", "") for i in results}
    assert "active beams" in msgs["active beams = 100000"]
    assert "prefix length" in msgs["len[0] = 2^30"]
    assert "beam_size" in msgs["foreign: beam 8 / max_seq_len 7 state, beam 4 decoder"]
    assert "vocab_size" in msgs["foreign: V=129 state fed V=4 chunks"]
    assert "blank_id" in msgs["foreign: blank 6 state, blank 0 decoder"]
    assert "same state" in msgs["the same state twice in decode_chunk_batch"]
