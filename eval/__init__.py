"""Evaluation harness: acoustic sources, decoder adapters, metrics, run directories, regression gate."""
