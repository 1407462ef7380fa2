"""LogProbSet files: the packed float16 form round-trips to the padded float32 layout; bad packed files are refused."""
import pytest
import torch

from eval.bench.common import LogProbSet


def _set(B=3, T=7, V=5):
    torch.manual_seed(0)
    lens = torch.tensor([7, 0, 4])[:B]
    lp = torch.randn(B, T, V).log_softmax(-1)
    for i, n in enumerate(lens.tolist()):
        lp[i, n:] = 0.0
    return LogProbSet(log_probs=lp, lengths=lens, refs=["a b", "", "c"], durations=[0.28, 0.0, 0.16],
                      ids=["u0", "u1", "u2"], tokens=[f"t{i}" for i in range(V)], blank_id=V - 1, kind="char",
                      dataset="other")


def test_packed_roundtrip(tmp_path):
    s = _set()
    s.save(tmp_path / "p.pt", packed=True)
    back = LogProbSet.load(tmp_path / "p.pt")
    assert back.log_probs.shape == s.log_probs.shape and back.log_probs.dtype == torch.float32
    assert torch.equal(back.lengths, s.lengths) and back.refs == s.refs and back.ids == s.ids
    assert torch.allclose(back.log_probs, s.log_probs.half().float())  # float16 rounding only
    assert torch.all(back.log_probs[0, :7] != 0) and torch.all(back.log_probs[2, 4:] == 0)
    s.save(tmp_path / "u.pt")
    assert torch.equal(LogProbSet.load(tmp_path / "u.pt").log_probs, s.log_probs)


def test_packed_bad_file(tmp_path):
    s = _set()
    s.save(tmp_path / "p.pt", packed=True)
    d = torch.load(tmp_path / "p.pt", weights_only=True)
    d["len"] = torch.tensor([7, 1, 4])  # lengths that disagree with the packed frames
    torch.save(d, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="packed file"):
        LogProbSet.load(tmp_path / "bad.pt")
