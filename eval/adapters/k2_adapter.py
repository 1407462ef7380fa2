"""k2's offline `intersect_dense_pruned` + `shortest_path` on HLG.pt (usable only where `import k2` works;
k2 has no wheel for this project's CPU Python, so this adapter is tested only where k2 exists).

Same graph and defaults as the k2py adapter (search_beam 20, output_beam 8, min_active 30,
max_active 10000). Offline semantics: the final arcs are taken on the extra frame T; an utterance whose
final state did not survive pruning gives an empty hypothesis (counted in pop_stats()["partial_count"]).
Limitation: HLG arcs that output several words (our `aux_labels_ragged` extension of HLG.pt) keep only
their first word here (k2 would need a k2.RaggedTensor); graph_info.json counts such arcs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from decoders.graph import WfstGraph
from decoders.types import Hypothesis
from eval.adapters.base import DecodingContext, register_decoder, typed_config


@dataclass
class K2Config:
    name: str = "k2"
    search_beam: float = 20.0
    output_beam: float = 8.0
    min_active_states: int = 30
    max_active_states: int = 10000
    acoustic_scale: float = 1.0


CONFIG_SCHEMA = K2Config


def load_hlg_pt(path: Path) -> dict:
    """{"arcs", "aux_labels"} of a k2 HLG.pt. `weights_only=True`: the file is user-supplied, and a full
    unpickle would run whatever code a crafted file carries; tensors (and dicts/lists of them) are all an
    HLG.pt needs. A file that is not such a dict is refused with one line."""
    try:
        d = torch.load(str(path), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"k2: no HLG at {path}") from None
    except Exception as e:  # noqa: BLE001 - torch raises UnpicklingError/RuntimeError/... for unsafe or bad files
        raise ValueError(f"k2: {path} is not a tensors-only HLG.pt (refused to unpickle it: "
                         f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if not isinstance(d, dict) or not all(isinstance(d.get(k), torch.Tensor) for k in ("arcs", "aux_labels")):
        raise ValueError(f"k2: {path} does not hold the tensors 'arcs' and 'aux_labels'")
    return {"arcs": d["arcs"], "aux_labels": d["aux_labels"]}


class K2Decoder:
    name = "k2"

    def __init__(self, cfg, ctx: DecodingContext):
        cfg = typed_config("k2", cfg)
        import k2  # raises ImportError where k2 is not installed: the runner lists the decoder as unavailable

        self.k2 = k2
        c = cfg
        if ctx.graph_dir is None:
            raise FileNotFoundError("k2 adapter needs DecodingContext.graph_dir (the HLG directory)")
        self.cfg = c
        self.device = torch.device(ctx.device)
        graph_dir = Path(ctx.graph_dir)
        d = load_hlg_pt(graph_dir / "HLG.pt")
        self.HLG = k2.Fsa.from_dict(d).to(self.device)
        self.graph = WfstGraph.load(graph_dir / "HLG.bin")  # word table
        self.tokens = ctx.tokens
        self._partial = 0

    def pop_stats(self) -> dict:
        out = {"overflow_count": 0, "partial_count": self._partial}
        self._partial = 0
        return out

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor,
               boosts: Optional[Sequence[dict]] = None) -> list[Hypothesis]:
        k2 = self.k2
        if boosts and any(boosts):
            raise NotImplementedError("k2 baseline does not support word boosting")
        c = self.cfg
        lp = (log_probs.to(self.device, torch.float32) * c.acoustic_scale)  # (B, T, V)
        B = lp.shape[0]
        segs = torch.stack([torch.arange(B), torch.zeros(B, dtype=torch.long), lengths.cpu().long()], 1).to(torch.int32)
        dense = k2.DenseFsaVec(lp, segs)
        lattice = k2.intersect_dense_pruned(self.HLG, dense, c.search_beam, c.output_beam, c.min_active_states,
                                            c.max_active_states)
        best = k2.shortest_path(lattice, use_double_scores=True)
        scores = best.get_tot_scores(use_double_scores=True, log_semiring=False)
        out = []
        for b in range(B):
            path = best[b]
            labels = path.labels.tolist()
            if not labels:
                self._partial += 1
                out.append(Hypothesis(tokens=[], words=[], score=float("-inf")))
                continue
            aux = path.aux_labels.tolist()
            words = [self.graph.words[w] for w in aux if 0 < w < len(self.graph.words)]
            tokens, prev = [], None
            for lab in labels:
                if lab >= 0 and lab != self.tokens.blank_id and lab != prev:
                    tokens.append(lab)
                prev = lab
            out.append(Hypothesis(tokens=tokens, words=words, score=float(scores[b])))
        return out


@register_decoder("k2")
def build_k2(cfg, ctx: DecodingContext) -> K2Decoder:
    return K2Decoder(cfg, ctx)
