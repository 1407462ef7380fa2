"""The hardware probes under eval/bench/probes (run on the GPU host) build with plain nvcc for sm_90, so a device call
spends its time measuring, not on a compile error."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_barrier_probe_compiles_for_sm90(tmp_path):
    src = REPO / "eval/bench/probes/barrier_probe.cu"
    proc = subprocess.run(["nvcc", "-std=c++17", "-O1", "-arch=sm_90", "-o", str(tmp_path / "probe"), str(src)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "probe").stat().st_size > 0
