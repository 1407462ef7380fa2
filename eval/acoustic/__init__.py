"""Acoustic sources: anything that yields (log_probs, lengths) batches for a dataset (see `base.py`)."""
