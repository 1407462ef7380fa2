"""Decoder adapters: ours and every baseline behind one protocol (see `base.py`).

Each adapter module registers itself with `@register_decoder("<name>")`. Modules are imported lazily by
name so that a missing optional dependency (k2, riva, flashlight) only matters when that decoder is asked
for. Add a new adapter module name to `ADAPTER_MODULES`.
"""
from eval.adapters.base import (  # noqa: F401
    DecodingContext,
    Decoder,
    available_decoders,
    build_decoder,
    register_decoder,
)
