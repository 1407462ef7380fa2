"""Simulator acoustic source plumbing: padding convention and batch contents."""
import numpy as np
import pytest
import torch

from eval.acoustic.simulator import pad_log_probs


def test_pad_log_probs_pads_with_certain_blank():
    a = np.log(np.full((3, 5), 0.2, dtype=np.float32))
    b = np.log(np.full((1, 5), 0.2, dtype=np.float32))
    lp, lengths = pad_log_probs([a, b], blank_id=4)
    assert lp.shape == (2, 3, 5) and lp.dtype == torch.float32
    assert lengths.tolist() == [3, 1]
    torch.testing.assert_close(lp[0], torch.from_numpy(a))
    assert torch.all(lp[1, 1:, 4] == 0.0) and torch.all(lp[1, 1:, :4] == -30.0)


def test_pad_log_probs_rejects_mixed_vocabularies_and_empty_batches():
    with pytest.raises(ValueError, match="vocabulary"):
        pad_log_probs([np.zeros((2, 5), np.float32), np.zeros((2, 6), np.float32)], blank_id=0)
    with pytest.raises(ValueError, match="empty batch"):
        pad_log_probs([], blank_id=0)
