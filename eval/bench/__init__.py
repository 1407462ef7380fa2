"""Benchmarks (scripts, not tests): decoder-only timings on the GPU host."""
