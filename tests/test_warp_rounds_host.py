"""The one-warp CTC kernel's multi-winner rounds (decoders/include/ctc_warp_rounds.cuh, the code the kernel runs with
BEAMDEC_CTC_ROUNDS=multi) on the CPU: tests/cpp/warp_rounds_host.cpp runs it on an emulated warp (32 threads in
lockstep) over random tie-heavy frames and compares its winners, in order, with the sequential order. The GPU tests
(test_ctc_gpu.py, round forms) hold the kernel against the CPU reference; this one runs in CI, without a GPU."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "tests" / "cpp" / "warp_rounds_host.cpp"
HEADER = ROOT / "decoders" / "include" / "ctc_warp_rounds.cuh"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _build(tmp_path: Path, include: Path) -> Path:
    exe = tmp_path / "warp_rounds_host"
    subprocess.run(["g++", "-std=c++20", "-O2", "-pthread", "-Wall", "-Wno-unknown-pragmas", "-Werror",
                    f"-I{include}", f"-I{ROOT / 'decoders' / 'include'}", str(SRC), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    return exe


def _run(exe: Path, cases: int, seed: int) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), str(cases), str(seed)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("seed", [1, 2])
def test_multi_rounds_take_the_sequential_winners_in_order(tmp_path, seed):
    out = _run(_build(tmp_path, HEADER.parent), 250, seed)
    assert out.returncode == 0 and out.stdout.strip() == "ok 250 cases", out.stdout + out.stderr


@pytest.mark.parametrize("old,new", [
    ("const bool won = h != 0ull && rank < beam - nw && h > M;",  # ignore the seconds of the heads above
     "const bool won = h != 0ull && rank < beam - nw;"),
    ("const unsigned long long x = o ? a : b, y = o ? cO2 : cO;",  # an ordinary head's second without the next one
     "const unsigned long long x = o ? a : b, y = o ? 0ull : cO;"),
    ("cO2 = took_o ? c2 : cO2;", "cO2 = took_o && o2 < 0 ? c2 : cO2;"),  # the stream never refilled
])
def test_the_check_fails_on_a_broken_copy(tmp_path, old, new):
    """The harness is not vacuous: a copy of the header with one rule broken fails it. (A second that is too high
    only delays winners to a later round and stays exact; these make it too low, or leave the stream stale.)"""
    text = HEADER.read_text()
    assert text.count(old) == 1
    broken = tmp_path / "include"
    broken.mkdir()
    (broken / HEADER.name).write_text(text.replace(old, new))
    shutil.copy(HEADER.parent / "ctc_common.cuh", broken / "ctc_common.cuh")
    out = _run(_build(tmp_path, broken), 150, 1)
    assert out.returncode == 1 and "want" in out.stdout, out.stdout
