"""The shell scripts a device call or CI runs parse: a syntax error found on the GPU host costs a call (the scripts
only run there, or in CI), so `bash -n` checks each one here first."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*REPO.glob("eval/bench/*.sh"), *REPO.glob("eval/bench/probes/*.sh"), *REPO.glob(".ci/gpu-host/*.sh"),
                  REPO / ".ci/run"])


def test_the_scripts_are_found():
    names = {p.name for p in SCRIPTS}
    assert {"ctc_gpu_run.sh", "wfst_ab_gpu_run.sh", "probe_gpu_run.sh", "sass.sh", "prepare_carry.sh", "run"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_script_parses(script, tmp_path):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # the check can fail: the same script with an unclosed `if` does not parse
    broken = tmp_path / "broken.sh"
    broken.write_text(script.read_text() + "\nif true; then\n")
    assert subprocess.run(["bash", "-n", str(broken)], capture_output=True).returncode != 0
