"""The hardware probes under eval/bench/probes (run on the GPU host) build with plain nvcc for sm_90, so a device call
spends its time measuring, not on a compile error."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", ["barrier", "warp", "launch"])
def test_probe_compiles_for_sm90(tmp_path, name):
    src = REPO / f"eval/bench/probes/{name}_probe.cu"
    proc = subprocess.run(["nvcc", "-std=c++17", "-O1", "-arch=sm_90", "-o", str(tmp_path / "probe"), str(src)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "probe").stat().st_size > 0


def test_probe_runner_refuses_an_unknown_probe():
    """probe_gpu_run.sh NAME builds eval/bench/probes/NAME_probe.cu; a name without a probe is a one-line error (exit
    2) before anything is built."""
    proc = subprocess.run(["bash", str(REPO / "eval/bench/probes/probe_gpu_run.sh"), "nosuch"], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "probe_gpu_run.sh: no probe 'nosuch' (eval/bench/probes/nosuch_probe.cu)"
