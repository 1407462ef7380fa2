"""GPU beam-search decoders for CTC models, each with an exact CPU reference.

Public API (imported lazily so that `import decoders` never compiles anything):
  WfstGraph                                     graph image / k2 / OpenFst graphs (decoders.graph)
  WfstDecoderConfig, WfstDecoder, WfstResult    WFST beam search, k2 semantics (decoders.wfst)
  WfstStreamingDecoder, WfstStream              streaming WFST decoding, k2 online semantics (decoders.wfst_stream)
  CtcBeamSearchConfig, ctc_beam_search,
  CtcStreamingDecoder, CtcResult                CTC prefix beam search (decoders.ctc)
  Hypothesis                                    shared result type (decoders.types)
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "WfstGraph": "decoders.graph",
    "WfstDecoderConfig": "decoders.wfst",
    "WfstDecoder": "decoders.wfst",
    "WfstResult": "decoders.wfst",
    "WfstStreamingDecoder": "decoders.wfst_stream",
    "WfstStream": "decoders.wfst_stream",
    "CtcBeamSearchConfig": "decoders.ctc",
    "ctc_beam_search": "decoders.ctc",
    "CtcStreamingDecoder": "decoders.ctc",
    "CtcResult": "decoders.ctc",
    "Hypothesis": "decoders.types",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'decoders' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
