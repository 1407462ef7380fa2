"""Decoding-graph recipes: CTC topologies, lexicon/LM FSTs, TLG (Kaldi/Riva) and HLG (k2) with kaldifst.

Library first (each step a function), a thin Hydra app on top (`python -m recipes.build_graphs`).
"""
from recipes.graphs.symbols import TokenTable, WordTable, column_of_kaldi_token, kaldi_token_id  # noqa: F401
from recipes.graphs.topologies import TOPOLOGIES, build_topology, ctc_collapse, topology_outputs  # noqa: F401
