"""Artefact builders: synthetic workload, token sets, lexicons, LMs, decoding graphs, data manifests."""
