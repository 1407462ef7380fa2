"""Acoustic sources: anything that yields (log_probs, lengths) batches for a dataset (see `base.py`).

`ACOUSTIC_SOURCES` maps the `model.source` config value to the module implementing it; each module has
`build_source(cfg, **kwargs) -> AcousticSource`, where `cfg` is the whole evaluation config and the
keyword arguments it may accept are `workload`, `dataset`, `tokens`, `device`, `manifest_path` (only
those named in its signature are passed). Modules are imported on demand so that a missing optional
dependency (NeMo) only matters when that source is asked for.
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any

ACOUSTIC_SOURCES: dict[str, str] = {
    "simulator": "eval.acoustic.simulator",
    "cache": "eval.acoustic.cache",
    "nemo": "eval.acoustic.nemo",
}


def build_acoustic_source(kind: str, cfg: Any, **kwargs: Any):
    """Build the acoustic source named `kind`; clear errors for unknown or not-yet-available sources."""
    kind = getattr(kind, "value", kind)
    if kind not in ACOUSTIC_SOURCES:
        raise ValueError(f"unknown acoustic source {kind!r}; valid choices: {sorted(ACOUSTIC_SOURCES)}")
    module_name = ACOUSTIC_SOURCES[kind]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            raise RuntimeError(
                f"acoustic source {kind!r} is not available: module {module_name} does not exist yet"
            ) from None
        raise RuntimeError(f"acoustic source {kind!r} needs a package that is not installed: {e}") from e
    build = getattr(module, "build_source", None)
    if build is None:
        raise RuntimeError(f"{module_name} has no build_source(cfg, ...) function")
    params = inspect.signature(build).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return build(cfg, **kwargs)
