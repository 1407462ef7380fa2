"""Log-prob cache: write from any acoustic source, read back (float16), detect stale manifests/models."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from eval.acoustic import build_acoustic_source
from eval.acoustic.base import AcousticBatch, Utterance
from eval.acoustic.cache import CacheSource, StaleCacheError, cache_dir_for, manifest_hash, write_cache
from recipes.tokens import TokenSet


class FakeSource:
    """Deterministic random log-probs per utterance (length from duration), yielded in a shuffled order."""

    def __init__(self, tokens: TokenSet, frame_shift_s: float = 0.04):
        self.tokens, self.frame_shift_s = tokens, frame_shift_s
        self.calls = 0

    def log_probs_for(self, u: Utterance) -> np.ndarray:
        rng = np.random.default_rng(zlib.crc32(u.id.encode()))
        frames = max(1, int(u.duration / self.frame_shift_s))
        x = rng.standard_normal((frames, self.tokens.vocab_size)).astype(np.float32) * 3
        return x - np.logaddexp.reduce(x, axis=1, keepdims=True)

    def batches(self, utterances, batch_size):
        self.calls += 1
        utts = sorted(utterances, key=lambda u: -u.duration)  # like the NeMo source: sorted by length
        for i in range(0, len(utts), batch_size):
            chunk = utts[i : i + batch_size]
            arrays = [self.log_probs_for(u) for u in chunk]
            t = max(a.shape[0] for a in arrays)
            lp = torch.full((len(chunk), t + 1, self.tokens.vocab_size), 7.0)  # junk padding, one extra frame
            for j, a in enumerate(arrays):
                lp[j, : a.shape[0]] = torch.from_numpy(a)
            yield AcousticBatch(chunk, lp, torch.tensor([a.shape[0] for a in arrays]))


def _utts(n=7):
    return [Utterance(id=f"u{i}", text=f"word {i}", duration=0.05 + 0.13 * i, audio_filepath=None) for i in range(n)]


@pytest.fixture
def tokens():
    return TokenSet.from_chars(list("abc'"), blank="last")


def test_cache_round_trip_matches_source_within_float16(tmp_path, tokens):
    src, utts = FakeSource(tokens), _utts()
    d = write_cache(src, utts, tmp_path / "c", model="m", dataset="d", precision="fp32", batch_size=3, progress=False)
    cache = CacheSource(d)
    assert cache.tokens.tokens == tokens.tokens and cache.tokens.blank_id == tokens.blank_id
    assert cache.frame_shift_s == pytest.approx(0.04)
    assert cache.meta["manifest_sha256"] == manifest_hash(utts)
    request = [utts[5], utts[0], utts[3]]  # any subset, any order: batches follow the request
    got = list(cache.batches(request, batch_size=2))
    assert [u.id for b in got for u in b.utterances] == ["u5", "u0", "u3"]
    for b in got:
        assert b.log_probs.dtype == torch.float32 and b.log_probs.dim() == 3
        for i, u in enumerate(b.utterances):
            ref = src.log_probs_for(u)
            n = int(b.lengths[i])
            assert n == ref.shape[0]
            np.testing.assert_allclose(b.log_probs[i, :n].numpy(), ref, rtol=2e-3, atol=2e-3)
            pad = b.log_probs[i, n:]
            if pad.numel():  # padding is certain blank, not the source's junk
                assert torch.all(pad[:, tokens.blank_id] == 0) and torch.all(pad[:, 0] < -10)


def test_stale_cache_is_detected(tmp_path, tokens):
    utts = _utts()
    d = write_cache(FakeSource(tokens), utts, tmp_path / "c", model="m", dataset="d", precision="fp32", progress=False)
    cache = CacheSource(d)
    changed = list(utts)
    changed[2] = Utterance(id="u2", text="another text", duration=utts[2].duration)
    with pytest.raises(StaleCacheError, match="changed text/duration.*u2"):
        list(cache.batches(changed, 4))
    with pytest.raises(StaleCacheError, match="missing.*zz"):
        list(cache.batches(utts + [Utterance(id="zz", text="x", duration=1.0)], 4))
    # moving the audio does not invalidate: the digest ignores audio paths
    moved = [Utterance(u.id, u.text, u.duration, audio_filepath=f"/elsewhere/{u.id}.flac") for u in utts]
    assert len(list(cache.batches(moved, 4))) == 2


def test_cache_refuses_another_model_file(tmp_path, tokens):
    model_a, model_b = tmp_path / "a.nemo", tmp_path / "b.nemo"
    model_a.write_bytes(b"A" * 100)
    model_b.write_bytes(b"B" * 100)
    d = write_cache(FakeSource(tokens), _utts(3), tmp_path / "c", model=str(model_a), dataset="d",
                    precision="fp32", progress=False)
    CacheSource(d, model=str(model_a))
    with pytest.raises(StaleCacheError, match="not by"):
        CacheSource(d, model=str(model_b))


def test_truncated_cache_file_is_refused(tmp_path, tokens):
    d = write_cache(FakeSource(tokens), _utts(3), tmp_path / "c", model="m", dataset="d", precision="fp32",
                    progress=False)
    data = d / "log_probs.f16"
    data.write_bytes(data.read_bytes()[:-2])
    with pytest.raises(StaleCacheError, match="bytes"):
        CacheSource(d)


def test_cache_source_through_the_registry(tmp_path, tokens):
    utts = _utts(4)
    root = tmp_path / "root"
    d = cache_dir_for(root, "/models/my model.nemo", "test-clean", "bf16")
    assert d == root / "my_model" / "test-clean" / "bf16"
    write_cache(FakeSource(tokens), utts, d, model="/models/my model.nemo", dataset="test-clean", precision="bf16",
                progress=False)
    cfg = {"model": {"source": "cache", "cache_dir": str(root), "nemo_model": "/models/my model.nemo",
                     "params": {"precision": "bf16", "build_if_missing": False}}}
    src = build_acoustic_source("cache", cfg, dataset="test-clean", device="cpu")
    assert sum(len(b.utterances) for b in src.batches(utts, 3)) == 4
    with pytest.raises(FileNotFoundError, match="build_if_missing=false"):
        build_acoustic_source("cache", cfg, dataset="test-other", device="cpu")
    direct = build_acoustic_source("cache", {"cache_dir": str(d)}, device="cpu")
    assert direct.tokens.tokens == tokens.tokens
    other = TokenSet.from_chars(list("abd'"), blank="last")
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        build_acoustic_source("cache", {"cache_dir": str(d)}, device="cpu", tokens=other)


def test_write_cache_rejects_bad_input(tmp_path, tokens):
    with pytest.raises(ValueError, match="no utterances"):
        write_cache(FakeSource(tokens), [], tmp_path / "c", model="m", dataset="d", precision="fp32")
    dup = _utts(2) + [_utts(1)[0]]
    with pytest.raises(ValueError, match="duplicate"):
        write_cache(FakeSource(tokens), dup, tmp_path / "c", model="m", dataset="d", precision="fp32")
    assert not (tmp_path / "c").exists()


# ---------------------------------------------------------------------------------------------------------
# Content checks (issue 11: the cache had none)
# ---------------------------------------------------------------------------------------------------------


def _cache(tmp_path, tokens, n=5):
    utts = _utts(n)
    d = write_cache(FakeSource(tokens), utts, tmp_path / "c", model="m", dataset="d", precision="fp32",
                    progress=False)
    return d, utts


def _read_all(d, utts):
    return [b.log_probs for b in CacheSource(d).batches(utts, 2)]


def test_cache_refuses_exponent_bit_flips_in_the_data(tmp_path, tokens):
    """Regression (issue 11): flipping exponent bits of float16 log-probs in log_probs.f16 was accepted and
    silently changed what every decoder saw."""
    d, utts = _cache(tmp_path, tokens)
    data = bytearray((d / "log_probs.f16").read_bytes())
    data[len(data) // 2 + 1] ^= 0x40  # high byte of a little-endian float16: an exponent bit
    (d / "log_probs.f16").write_bytes(bytes(data))
    with pytest.raises(StaleCacheError, match="do not match their digest"):
        _read_all(d, utts)


def test_cache_refuses_a_same_size_replacement_of_the_data(tmp_path, tokens):
    """Regression (issue 11): another file of the same size in place of log_probs.f16 was accepted."""
    d, utts = _cache(tmp_path, tokens)
    size = (d / "log_probs.f16").stat().st_size
    other = np.random.default_rng(1).standard_normal(size // 2).astype(np.float16)
    (d / "log_probs.f16").write_bytes(other.tobytes())
    assert (d / "log_probs.f16").stat().st_size == size
    with pytest.raises(StaleCacheError, match="do not match their digest"):
        _read_all(d, utts)


@pytest.mark.parametrize("edit", ["length+40", "offset+7", "blank_id"])
def test_cache_refuses_edited_metadata(tmp_path, tokens, edit):
    """Regression (issue 11): `length + 40`, `offset + 7` or another `blank_id` in meta.json were accepted
    (reading other utterances' frames, or decoding with the wrong blank)."""
    import json

    d, utts = _cache(tmp_path, tokens)
    meta = json.loads((d / "meta.json").read_text())
    if edit == "length+40":
        meta["utterances"][1]["length"] += 40
    elif edit == "offset+7":
        meta["utterances"][2]["offset"] += 7
    else:
        meta["blank_id"] = 0
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(StaleCacheError, match="meta_sha256"):
        CacheSource(d)


def test_cache_refuses_a_consistent_looking_but_wrong_layout(tmp_path, tokens):
    """The layout check behind the digest: a table whose digest was recomputed after moving an offset is still
    refused (frames overlapping or beyond the data), with one line."""
    import json

    from eval.acoustic import cache as cache_mod

    d, _ = _cache(tmp_path, tokens)
    meta = json.loads((d / "meta.json").read_text())
    meta["utterances"][2]["offset"] += 7
    meta["meta_sha256"] = cache_mod._meta_digest(meta)
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(StaleCacheError, match="inconsistent utterance table"):
        CacheSource(d)


def test_truncated_meta_json_is_a_one_line_error(tmp_path, tokens):
    """Regression (issue 11): a truncated meta.json gave a bare JSONDecodeError."""
    d, _ = _cache(tmp_path, tokens)
    text = (d / "meta.json").read_text()
    (d / "meta.json").write_text(text[: len(text) // 2])
    with pytest.raises(StaleCacheError, match="not valid JSON") as info:
        CacheSource(d)
    assert "\n" not in str(info.value)


def test_intact_cache_still_reads_after_the_checks(tmp_path, tokens):
    d, utts = _cache(tmp_path, tokens)
    assert sum(lp.shape[0] for lp in _read_all(d, utts)) == len(utts)
