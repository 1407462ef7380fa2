"""Acoustic sources: anything that yields (log_probs, lengths) batches for a dataset (see `base.py`).

`ACOUSTIC_SOURCES` maps the `model.source` config value to the module implementing it; each module has
`build_source(cfg, *, workload, dataset, tokens, device, manifest_path) -> AcousticSource` (one fixed
signature: every source receives every argument, whether it uses it or not), where `cfg` is the whole
evaluation config. Modules are imported on demand so that a missing optional dependency (NeMo) only matters
when that source is asked for.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Optional

ACOUSTIC_SOURCES: dict[str, str] = {
    "simulator": "eval.acoustic.simulator",
    "cache": "eval.acoustic.cache",
    "nemo": "eval.acoustic.nemo",
}


def build_acoustic_source(kind: str, cfg: Any, *, workload: Any = None, dataset: Optional[str] = None,
                          tokens: Any = None, device: str = "cpu", manifest_path: Optional[Path] = None):
    """Build the acoustic source named `kind` (`model.source`)."""
    kind = getattr(kind, "value", kind)
    if kind not in ACOUSTIC_SOURCES:
        raise ValueError(f"unknown acoustic source {kind!r}; valid choices: {sorted(ACOUSTIC_SOURCES)}")
    module = importlib.import_module(ACOUSTIC_SOURCES[kind])
    return module.build_source(cfg, workload=workload, dataset=dataset, tokens=tokens, device=device,
                               manifest_path=manifest_path)
