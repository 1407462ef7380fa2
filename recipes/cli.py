"""Running the recipes' Hydra apps as plain CLIs (`python -m recipes.<name> key=value ...`)."""
from __future__ import annotations

import sys
from typing import Callable, Sequence

# no run directory, no .hydra/ output, no log files: the recipe CLIs only write their artefacts
QUIET_HYDRA_OVERRIDES = [
    "hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled",
]


def run_hydra_app(app: Callable[[], None], argv: Sequence[str]) -> None:
    """Call a `@hydra.main` app on `argv` (plus QUIET_HYDRA_OVERRIDES) instead of the process's sys.argv."""
    old = sys.argv
    sys.argv = [old[0], *argv, *QUIET_HYDRA_OVERRIDES]
    try:
        app()
    finally:
        sys.argv = old
