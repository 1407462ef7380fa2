"""CTC prefix beam search: the CPU reference against brute force, streaming == offline, API errors, opcheck,
and a compile check of the torch-free CUDA launchers (skipped without nvcc)."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ctc_helpers import assert_results_match, brute_force, random_log_probs, skipped_equivalent  # noqa: E402

from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder, ctc_beam_search, load_ops  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ops():
    return load_ops()


def _cfg(**kw) -> CtcBeamSearchConfig:
    base = dict(beam_size=128, blank_id=0, blank_skip_threshold=1.0, nbest=8)
    base.update(kw)
    return CtcBeamSearchConfig(**base)


@pytest.mark.parametrize("V,T,blank,seed", [(3, 6, 0, 0), (4, 5, 0, 1), (4, 5, 3, 2), (3, 1, 2, 3), (2, 6, 1, 4)])
def test_reference_equals_brute_force(ops, V, T, blank, seed):
    """With a beam wider than the number of prefixes nothing is pruned: N-best and scores must be exact."""
    lp = random_log_probs(1, T, V, seed=seed, peaky=1.5, blank=blank)
    exact = brute_force(lp[0], blank)
    nbest = min(8, len(exact))
    res = ctc_beam_search(lp, torch.tensor([T]), _cfg(blank_id=blank, nbest=nbest))
    for n in range(nbest):
        assert tuple(res.tokens[0][n]) == exact[n][0], f"rank {n}: {res.tokens[0][n]} vs {exact[n][0]}"
        assert abs(float(res.scores[0, n]) - exact[n][1]) <= 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_blank_skipping_equals_brute_force_of_collapsed_sequence(ops, seed):
    """Skipped frames act as one certain blank: the beam's result equals brute force on that sequence,
    including repeated labels across skipped frames (a a | skip | a -> 'a a')."""
    V, T, thr = 3, 7, 0.6
    lp = random_log_probs(1, T, V, seed=10 + seed, peaky=1.5)
    # force: frames 0, 3 and 4 blank-dominant (leading skip, and a two-frame skip in the middle);
    # label 1 likely on both sides of the skip, so 'repeat across a skipped blank' is exercised
    for t in (0, 3, 4):
        lp[0, t] = torch.tensor([0.95, 0.03, 0.02]).log()
    for t in (2, 5):
        lp[0, t] = torch.tensor([0.1, 0.8, 0.1]).log()
    seq = skipped_equivalent(lp[0], 0, thr)
    exact = brute_force(seq, 0)
    nbest = min(8, len(exact))
    res = ctc_beam_search(lp, torch.tensor([T]), _cfg(blank_skip_threshold=thr, nbest=nbest))
    for n in range(nbest):
        assert tuple(res.tokens[0][n]) == exact[n][0]
        assert abs(float(res.scores[0, n]) - exact[n][1]) <= 1e-5
    assert (1, 1) in [tuple(t) for t in res.tokens[0]]  # a repeat across the skipped blank survives


def test_empty_inputs_and_all_blank(ops):
    """Zero-length rows and rows with every frame skipped return the empty hypothesis with score 0."""
    lp = random_log_probs(3, 5, 6, seed=3)
    lp[1] = torch.tensor([0.999] + [0.0002] * 5).log()  # all blank-dominant
    res = ctc_beam_search(lp, torch.tensor([0, 5, 5]), CtcBeamSearchConfig(beam_size=4, nbest=2))
    assert res.tokens[0][0] == [] and float(res.scores[0, 0]) == 0.0
    assert res.tokens[1][0] == [] and float(res.scores[1, 0]) == 0.0
    assert math.isinf(float(res.scores[0, 1])) and res.tokens[0][1] == []
    res0 = ctc_beam_search(lp[:, :0], torch.tensor([0, 0, 0]), CtcBeamSearchConfig())
    assert res0.tokens == [[[]]] * 3 and torch.equal(res0.scores, torch.zeros(3, 1))


def test_first_frame_reserves_empty_prefix(ops):
    """beam > 1: the empty prefix survives frame 0 even when beam-1 labels beat it."""
    lp = torch.tensor([[[0.01, 0.5, 0.49]]]).log()
    res = ctc_beam_search(lp, torch.tensor([1]), _cfg(beam_size=2, nbest=2))
    assert [] in res.tokens[0]
    res1 = ctc_beam_search(lp, torch.tensor([1]), _cfg(beam_size=1, nbest=1))
    assert res1.tokens[0][0] == [1]


def test_blank_last_equals_blank_first_permuted(ops):
    lp = random_log_probs(2, 17, 29, seed=4)
    perm = list(range(1, 29)) + [0]  # blank moves to the last column
    a = ctc_beam_search(lp, torch.tensor([17, 11]), CtcBeamSearchConfig(beam_size=8, nbest=3, blank_skip_threshold=0.9))
    b = ctc_beam_search(lp[..., perm], torch.tensor([17, 11]),
                        CtcBeamSearchConfig(beam_size=8, nbest=3, blank_id=28, blank_skip_threshold=0.9))
    remap = {new: old for new, old in enumerate(perm)}
    torch.testing.assert_close(a.scores, b.scores)
    assert a.tokens == [[[remap[c] for c in h] for h in row] for row in b.tokens]


def test_max_seq_len_caps_and_reports(ops):
    lp = random_log_probs(1, 40, 5, seed=5, peaky=6.0)
    full = ctc_beam_search(lp, torch.tensor([40]), CtcBeamSearchConfig(beam_size=4, blank_skip_threshold=1.0))
    assert not bool(full.hit_max_seq_len[0])
    n = len(full.tokens[0][0])
    assert n >= 4
    cap = ctc_beam_search(lp, torch.tensor([40]), CtcBeamSearchConfig(beam_size=4, blank_skip_threshold=1.0,
                                                                      max_seq_len=n - 2))
    assert bool(cap.hit_max_seq_len[0])
    assert all(len(h) <= n - 2 for h in cap.tokens[0])


@pytest.mark.parametrize("chunk", [1, 7, 128])
def test_streaming_chunks_equal_offline(ops, chunk):
    lp = random_log_probs(2, 150, 29, seed=6)
    cfg = CtcBeamSearchConfig(beam_size=6, nbest=3, blank_skip_threshold=1.0)
    ref = ctc_beam_search(lp, torch.tensor([150, 150]), cfg)
    dec = CtcStreamingDecoder(cfg)
    state = dec.create_state(batch=2, vocab_size=29)
    for t0 in range(0, 150, chunk):
        dec.decode_chunk(lp[:, t0:t0 + chunk], state=state)
    got = dec.finalize(state)
    assert got.tokens == ref.tokens
    torch.testing.assert_close(got.scores, ref.scores)


def test_streaming_speech_mask_equals_offline_skipping(ops):
    thr = 0.8
    lp = random_log_probs(1, 60, 11, seed=7)
    cfg = CtcBeamSearchConfig(beam_size=5, nbest=2, blank_skip_threshold=thr)
    ref = ctc_beam_search(lp, torch.tensor([60]), cfg)
    mask = ~(lp[..., 0] > math.log(thr))
    dec = CtcStreamingDecoder(cfg)
    state = dec.create_state(1, 11)
    for t0 in range(0, 60, 9):
        dec.decode_chunk(lp[:, t0:t0 + 9], state=state, speech_mask=mask[:, t0:t0 + 9])
    got = dec.finalize(state)
    assert got.tokens == ref.tokens
    torch.testing.assert_close(got.scores, ref.scores)


def test_interleaved_and_batched_streams_are_independent(ops):
    lps = [random_log_probs(1, 48, 13, seed=20 + i) for i in range(3)]
    cfg = CtcBeamSearchConfig(beam_size=4, nbest=2, blank_skip_threshold=1.0)
    dec = CtcStreamingDecoder(cfg)
    refs = [ctc_beam_search(lp, torch.tensor([48]), cfg) for lp in lps]
    states = [dec.create_state(1, 13) for _ in lps]
    for t0 in range(0, 48, 5):  # interleaved single-stream calls
        for lp, st in zip(lps, states):
            dec.decode_chunk(lp[:, t0:t0 + 5], state=st)
    bstates = [dec.create_state(1, 13) for _ in lps]
    for t0 in range(0, 48, 6):  # batched calls
        dec.decode_chunk_batch([lp[:, t0:t0 + 6] for lp in lps], bstates)
    for ref, st, bst in zip(refs, states, bstates):
        for got in (dec.finalize(st), dec.finalize(bst)):
            assert got.tokens == ref.tokens
            torch.testing.assert_close(got.scores, ref.scores)


def test_float16_input_matches_float32_of_same_values(ops):
    lp16 = random_log_probs(2, 17, 29, seed=8).half()
    a = ctc_beam_search(lp16, torch.tensor([17, 17]), CtcBeamSearchConfig(beam_size=4, nbest=2))
    b = ctc_beam_search(lp16.float(), torch.tensor([17, 17]), CtcBeamSearchConfig(beam_size=4, nbest=2))
    assert a.tokens == b.tokens
    torch.testing.assert_close(a.scores, b.scores)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda lp, ln: (lp.double(), ln, {}), "float32 or float16"),
        (lambda lp, ln: (lp[0], ln, {}), "3-D"),
        (lambda lp, ln: (lp, torch.tensor([5, 9]), {}), "lengths"),
        (lambda lp, ln: (lp, torch.tensor([5, -1]), {}), "lengths"),
        (lambda lp, ln: (lp[..., :1], ln, {}), "V"),
        (lambda lp, ln: (lp, ln, {"blank_id": 7}), "blank_id"),
        (lambda lp, ln: (lp.clone().index_put_((torch.tensor([1]), torch.tensor([2]), torch.tensor([3])),
                                               torch.tensor(float("nan"))), ln, {}), "NaN"),
        (lambda lp, ln: (lp.clone().index_put_((torch.tensor([0]), torch.tensor([0]), torch.tensor([0])),
                                               torch.tensor(float("inf"))), ln, {}), "inf"),
    ],
)
def test_bad_inputs_name_the_argument(ops, make, match):
    lp, ln = random_log_probs(2, 5, 4, seed=9), torch.tensor([5, 5])
    lp2, ln2, kw = make(lp, ln)
    with pytest.raises(ValueError, match=match):
        ctc_beam_search(lp2, ln2, CtcBeamSearchConfig(beam_size=3, **kw))


@pytest.mark.parametrize("kw,match", [({"beam_size": 0}, "beam_size"), ({"beam_size": 129}, "beam_size"),
                                      ({"nbest": 11}, "nbest"), ({"max_seq_len": 0}, "max_seq_len"),
                                      ({"blank_skip_threshold": float("nan")}, "blank_skip_threshold")])
def test_bad_config(kw, match):
    with pytest.raises(ValueError, match=match):
        CtcBeamSearchConfig(**kw)


def test_op_level_errors_name_the_argument(ops):
    lp = random_log_probs(1, 3, 4)
    with pytest.raises(ValueError, match="beam_size"):
        ops.ctc_decode_offline(lp, torch.tensor([3]), 200, 0, 1.0, 1, 3, 0, 0)
    with pytest.raises(ValueError, match="state"):
        ops.ctc_decode_chunk(torch.zeros(1, 5, dtype=torch.int32), lp, None, 2, 0, 10, 0, 0)
    big = torch.full((1, 1, 65537), -20.0)  # token ids are 16-bit: V <= 65536, at the op and in Python
    with pytest.raises(ValueError, match="65536"):
        ops.ctc_decode_offline(big, torch.tensor([1]), 2, 0, 1.0, 1, 2, 0, 0)
    with pytest.raises(ValueError, match="65536"):
        ctc_beam_search(big, torch.tensor([1]), CtcBeamSearchConfig(beam_size=2))
    with pytest.raises(ValueError, match="65536"):
        CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=2)).create_state(1, 65537)


def test_streaming_api_errors_name_the_argument(ops):
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=3))
    other = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=4)).create_state(1, 5)
    lp = random_log_probs(1, 4, 5)
    with pytest.raises(ValueError, match="state"):
        dec.decode_chunk(lp, state=other)
    with pytest.raises(ValueError, match="state"):
        dec.finalize(other)
    st = dec.create_state(2, 5)
    with pytest.raises(ValueError, match="batch"):
        dec.decode_chunk(lp, state=st)
    with pytest.raises(ValueError, match="V="):
        dec.decode_chunk(random_log_probs(2, 4, 6), state=st)
    with pytest.raises(ValueError, match="speech_mask"):
        dec.decode_chunk(random_log_probs(2, 4, 5), state=st, speech_mask=torch.ones(2, 3, dtype=torch.bool))


@pytest.mark.parametrize("paged", [False, True])
def test_opcheck_registered_ops(ops, paged):
    lp = random_log_probs(2, 6, 5, seed=11)
    lengths = torch.tensor([6, 4])
    store = (4, 9) if paged else (0, 0)
    torch.library.opcheck(ops.ctc_decode_offline.default, (lp, lengths, 3, 0, 0.95, 2, 6, *store))
    torch.library.opcheck(ops.ctc_decode_offline_packed.default, (lp, lengths, 3, 0, 0.95, 2, 6, *store, 64))
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=3, nbest=2, max_seq_len=8, paged=paged, page_size=4))
    store = dec.storage_args
    state = dec.create_state(2, 5)
    mask = torch.ones(2, 6, dtype=torch.bool)
    torch.library.opcheck(ops.ctc_decode_chunk.default, (state.tensor, lp, mask, 3, 0, 8, *store))
    singles = [dec.create_state(1, 5).tensor for _ in range(2)]
    torch.library.opcheck(ops.ctc_decode_chunk_batched.default, (singles, lp, None, 3, 0, 8, *store))
    torch.library.opcheck(ops.ctc_finalize.default, (state.tensor, 3, 0, 5, 2, 8, *store))
    fresh = dec.create_state(2, 5).tensor
    torch.library.opcheck(ops.ctc_init_state.default, (fresh, 3, 0, 5, 8, *store))


def test_streaming_state_fits_40_kb_at_beam_10():
    """Issue goal: <= 40 KB per stream at beam 10 (V 5000) with the default 1000-token cap: 16-bit token ids."""
    from decoders.ctc import state_bytes

    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=10))
    assert dec.max_seq_len == 1000
    assert dec.state_bytes_per_stream == state_bytes(10, 1000) == 4 * (16 + 90) + 2 * 10 * 1000 <= 40_000
    st = dec.create_state(2, 5000)
    assert st.bytes_per_stream == dec.state_bytes_per_stream


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_launchers_compile_with_nvcc(tmp_path):
    """The torch-free launchers + kernel headers build with plain nvcc (no torch) for sm_90."""
    cmd = ["nvcc", "-std=c++17", "-arch=sm_90", "-O1", "--expt-relaxed-constexpr", "-c",
           str(REPO / "decoders/csrc/ctc_launch.cu"), "-I", str(REPO / "decoders/include"),
           "-o", str(tmp_path / "ctc_launch.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


# ---- paged token storage ----

@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("beam,V,thr", [(1, 7, 1.0), (6, 29, 0.9), (16, 11, 1.0)])
def test_paged_offline_equals_flat(ops, page_size, beam, V, thr):
    """Paged storage (forks share pages, appends copy on write) returns exactly the flat results; the CPU op
    also checks internally that every returned hypothesis read from the pages equals its prefix."""
    lp = random_log_probs(3, 60, V, seed=page_size * 100 + beam, peaky=2.0)
    lengths = torch.tensor([60, 41, 0])
    flat = ctc_beam_search(lp, lengths, CtcBeamSearchConfig(beam_size=beam, nbest=beam, blank_skip_threshold=thr))
    paged = ctc_beam_search(lp, lengths, CtcBeamSearchConfig(beam_size=beam, nbest=beam, blank_skip_threshold=thr,
                                                            paged=True, page_size=page_size))
    assert paged.tokens == flat.tokens
    assert torch.equal(paged.scores, flat.scores)
    assert not bool(paged.page_pool_exhausted.any())


@pytest.mark.parametrize("chunk", [1, 7, 128])
def test_paged_streaming_equals_flat_offline(ops, chunk):
    lp = random_log_probs(2, 150, 29, seed=60 + chunk)
    cfg = CtcBeamSearchConfig(beam_size=6, nbest=3, blank_skip_threshold=1.0)
    ref = ctc_beam_search(lp, torch.tensor([150, 150]), cfg)
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=6, nbest=3, paged=True, page_size=4, max_seq_len=160))
    state = dec.create_state(batch=2, vocab_size=29)
    for t0 in range(0, 150, chunk):
        dec.decode_chunk(lp[:, t0:t0 + chunk], state=state)
    got = dec.finalize(state)
    assert got.tokens == ref.tokens
    torch.testing.assert_close(got.scores, ref.scores)


def test_paged_pages_are_shared_and_recycled(ops):
    """Reference counts: every page's count equals the beams ending in it plus the pages chained to it, free
    pages are unreferenced, every page ever used is live or free, and sharing keeps the pool far below
    beam x length."""
    import numpy as np

    beam, P, L = 8, 4, 200
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=beam, nbest=beam, paged=True, page_size=P, max_seq_len=L))
    lp = random_log_probs(1, 150, 13, seed=7, peaky=3.0)
    st = dec.create_state(1, 13)
    for t0 in range(0, 150, 10):
        dec.decode_chunk(lp[:, t0:t0 + 10], state=st)
    w = st.tensor[0].numpy()
    NP = dec.storage_args[1]
    base = 16 + 9 * beam
    nb, free_top, fresh = w[3], w[5], w[6]
    tails = w[16 + 4 * beam:16 + 4 * beam + nb]
    parent, rc = w[base:base + NP], w[base + NP:base + 2 * NP]
    stack = w[base + 2 * NP:base + 3 * NP]
    free = set(stack[:free_top].tolist())
    assert len(free) == free_top and all(rc[p] == 0 for p in free)
    live = [p for p in range(fresh) if p not in free]
    refs = np.zeros(NP, dtype=np.int64)
    for t in tails:
        if t >= 0:
            refs[t] += 1
    for p in live:
        if parent[p] >= 0:
            refs[parent[p]] += 1
    assert np.array_equal(refs, rc), "reference counts differ from the beams and the page chains"
    assert all(rc[p] > 0 for p in live)
    lens = w[16 + 3 * beam:16 + 3 * beam + nb]
    unshared = sum(-(-int(n) // P) for n in lens)
    assert len(live) < unshared / 2, (len(live), unshared)  # prefixes share their pages
    ref = ctc_beam_search(lp, torch.tensor([150]), CtcBeamSearchConfig(beam_size=beam, nbest=beam,
                                                                       blank_skip_threshold=1.0))
    assert dec.finalize(st).tokens == ref.tokens


def test_paged_small_pool_raises_when_a_result_lost_tokens(ops):
    lp = random_log_probs(1, 80, 11, seed=8, peaky=3.0)
    cfg = dict(beam_size=8, nbest=8, blank_skip_threshold=1.0, paged=True, page_size=2)
    with pytest.raises(RuntimeError, match="num_pages"):
        ctc_beam_search(lp, torch.tensor([80]), CtcBeamSearchConfig(num_pages=6, **cfg))
    ok = ctc_beam_search(lp, torch.tensor([80]), CtcBeamSearchConfig(**cfg))
    assert not bool(ok.page_pool_exhausted[0])


def test_paged_state_bytes():
    from decoders.ctc import default_num_pages, state_bytes

    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=10, paged=True, page_size=16, num_pages=200))
    assert dec.state_bytes_per_stream == state_bytes(10, 1000, 16, 200) == 4 * (16 + 90 + 200 * 3) + 2 * 200 * 16
    assert dec.state_bytes_per_stream < CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=10)).state_bytes_per_stream
    assert default_num_pages(10, 1000, 16) == 640


# ---- streaming state validation (issue 11) ----

def _decoded_state(dec, V, T=12, seed=3):
    st = dec.create_state(1, V)
    dec.decode_chunk(random_log_probs(1, T, V, seed=seed), state=st)
    return st


@pytest.mark.parametrize("paged", [False, True])
def test_tampered_state_header_and_length_words_are_refused(ops, paged):
    """Issue 11: header word 3 (active beams) = 100000 then finalize -> SIGSEGV; a length word = 2^30 ->
    SIGSEGV. Both now raise one-line ValueErrors naming the field; an intact state still decodes."""
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=4, nbest=2, max_seq_len=32, paged=paged, page_size=4))
    for word, value, field in [(3, 100000, "active beams"), (16 + 3 * 4, 1 << 30, "prefix length")]:
        st = _decoded_state(dec, 7)
        st.tensor[0, word] = value
        for call in (lambda: dec.finalize(st), lambda: dec.decode_chunk(random_log_probs(1, 3, 7), state=st)):
            with pytest.raises(ValueError, match=field) as info:
                call()
            assert "\n" not in str(info.value)
    st = _decoded_state(dec, 7)
    st.tensor[0, 40] ^= 1  # any other word: the checksum
    with pytest.raises(ValueError, match="checksum"):
        dec.finalize(st)


def test_foreign_states_are_refused_by_name(ops):
    """Issue 11: a state of another beam/max_seq_len with the same byte size was read silently (returned []);
    chunks of V=4 fed to a V=129 state read out of bounds. The stamp names the field and both values."""
    a = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=4, max_seq_len=32))
    b = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=8, max_seq_len=7))
    assert a.state_bytes_per_stream == b.state_bytes_per_stream
    st = _decoded_state(b, 7)
    with pytest.raises(ValueError, match=r"beam_size=8 but this decoder has 4"):
        a.finalize(st)
    big = _decoded_state(a, 129)
    big.vocab_size = 4  # the Python attribute lies; the stamp inside the state does not
    with pytest.raises(ValueError, match=r"vocab_size \(V\)=129 but this decoder has 4"):
        a.decode_chunk(random_log_probs(1, 3, 4), state=big)
    blank_last = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=4, max_seq_len=32, blank_id=6))
    with pytest.raises(ValueError, match="blank_id"):
        blank_last.finalize(_decoded_state(a, 7))
    raw = type(st)(tensor=torch.zeros_like(st.tensor), vocab_size=7)  # zeros: not made by create_state
    with pytest.raises(ValueError, match="magic"):
        a.finalize(raw)


def test_refused_call_leaves_every_row_untouched(ops):
    """Validation runs over every row before any row is decoded: a bad row 1 leaves row 0 as it was."""
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=3, max_seq_len=16))
    st = dec.create_state(2, 5)
    dec.decode_chunk(random_log_probs(2, 6, 5), state=st)
    st.tensor[1, 0] = -1
    before = st.tensor.clone()
    with pytest.raises(ValueError, match="row 1"):
        dec.decode_chunk(random_log_probs(2, 6, 5, seed=1), state=st)
    assert torch.equal(st.tensor, before)
    dec.reset_state(st)  # re-stamps: usable again
    dec.decode_chunk(random_log_probs(2, 6, 5, seed=1), state=st)
    assert len(dec.finalize(st).tokens) == 2


def test_decode_chunk_batch_refuses_the_same_state_twice(ops):
    """Issue 11: decode_chunk_batch accepted the same state twice (two streams decoded into one state)."""
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=3, max_seq_len=16))
    st = dec.create_state(1, 5)
    lp = random_log_probs(1, 4, 5)
    with pytest.raises(ValueError, match="same state"):
        dec.decode_chunk_batch([lp, lp], [st, st])
    alias = type(st)(tensor=st.tensor.view(1, -1), vocab_size=5)  # another tensor object, same memory
    with pytest.raises(ValueError, match="same state"):
        dec.decode_chunk_batch([lp, lp], [st, alias])
    with pytest.raises(ValueError, match="same state"):  # the op checks it too
        ops.ctc_decode_chunk_batched([st.tensor, alias.tensor], torch.cat([lp, lp]), None, 3, 0, 16, 0, 0)


@pytest.mark.parametrize("make", ["ctc", "ctc_lm"])
def test_prefix_search_configs_share_their_option_checks(make):
    """CtcBeamSearchConfig and CtcLmConfig reject the same bad shared options with the same one-line errors (one
    check, decoders.types.check_prefix_search_options)."""
    from decoders.ctc_lm import CtcLmConfig

    cls = CtcBeamSearchConfig if make == "ctc" else CtcLmConfig
    for kwargs, msg in (({"blank_id": -1}, "blank_id must be a non-negative int"),
                        ({"blank_id": 1.0}, "blank_id must be a non-negative int"),
                        ({"beam_size": 4, "nbest": 5}, r"nbest must be an int in \[1, beam_size=4\]"),
                        ({"nbest": 0}, "nbest must be an int"),
                        ({"blank_skip_threshold": float("nan")}, "blank_skip_threshold must be a probability"),
                        ({"blank_skip_threshold": -0.1}, "blank_skip_threshold must be a probability")):
        with pytest.raises(ValueError, match=msg):
            cls(**kwargs)
    assert cls(beam_size=4, nbest=4, blank_skip_threshold=1.0).nbest == 4


def packed_inputs(seed: int = 3):
    """Inputs for ctc_decode_offline_packed's checks: log-prob rows, a probability row set, blank-last argmax rows, a
    NaN row, all -inf and tied rows, lengths in and out of range (negative, past T, past 2^31)."""
    B, T, V = 7, 70, 9
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(B, T, V, generator=g).log_softmax(-1)
    lp[1] = lp[1].exp()  # probabilities
    lp[2, :, V - 1] += 6.0  # argmax in the last column
    lp[2] = lp[2].log_softmax(-1)
    lp[3, 5, 2] = float("nan")  # (row 3 is not sampled: its length is -1)
    lp[0, 5, 2] = float("nan")
    lp[4, :30] = -math.inf
    lp[5, 10:20] = 0.0  # ties: argmax is column 0
    lengths = torch.tensor([T, T, 50, -1, T + 3, 2**40, 0])
    return lp, lengths


@pytest.mark.parametrize("sample_frames", [0, 1, 64, 100])
@pytest.mark.parametrize("half", [False, True])
def test_packed_offline_op_equals_the_op_and_the_value_stats(ops, sample_frames, half):
    """ctc_decode_offline_packed (the CUDA public call's one op; its CPU form is the reference of the layout and the
    checks): the outputs of ctc_decode_offline on lengths clamped to [0, T], lengths outside [0, T] counted, and the
    value counts of log_prob_value_stats."""
    from decoders.ctc import PACKED_HEADER_WORDS, log_prob_value_stats, unpack_offline

    lp, lengths = packed_inputs()
    if half:
        lp = lp.half()
    B, T, _ = lp.shape
    args = (4, 0, 0.95, 2, T, 0, 0)
    packed = ops.ctc_decode_offline_packed(lp, lengths, *args, sample_frames)
    assert packed.dtype == torch.int32 and packed.dim() == 1
    checks, tokens, tok_len, scores, status = unpack_offline(packed, B, 2, T)
    want = ops.ctc_decode_offline(lp, lengths.clamp(0, T), *args)
    for got, ref in zip((tokens, tok_len, scores, status), want):
        torch.testing.assert_close(got, ref, rtol=0, atol=0, equal_nan=True)  # row 0's NaN: NaN scores
    assert checks[0] == 3 and checks[PACKED_HEADER_WORDS - 3:].tolist() == [0, 0, 0]
    assert checks[1:5].tolist() == log_prob_value_stats(lp, lengths, sample_frames).tolist()
    if sample_frames >= 64:
        n, n_prob, n_last, n_first = checks[1:5].tolist()
        t = min(T, sample_frames)
        assert n == 4 * t + 50 and n_prob == t  # rows 0, 1, 4, 5 and row 2's 50 frames; row 1 is probabilities
        assert n_last >= 45 and n_first >= 30 + 10  # row 2; row 4's -inf frames and row 5's tied ones
    with pytest.raises(ValueError, match="sample_frames must be >= 0"):
        ops.ctc_decode_offline_packed(lp, lengths, *args, -1)


def test_unpacked_call_form_equals_the_reference(ops):
    """BEAMDEC_CTC_API=unpacked's body (the CUDA call's form before the packed op, kept for A/B runs) on CPU tensors
    returns what ctc_beam_search returns, and judges the same checks (probabilities refused)."""
    from decoders.ctc import _beam_search_unpacked

    lp = random_log_probs(3, 20, 7, seed=4)
    lengths = torch.tensor([20, 9, 0])
    cfg = CtcBeamSearchConfig(beam_size=4, nbest=2, max_seq_len=20)
    args = (4, 0, float(cfg.blank_skip_threshold), 2, 20, *cfg.storage_args(20))
    got = _beam_search_unpacked(ops, lp, lengths, args, cfg)
    ref = ctc_beam_search(lp, lengths, cfg)
    assert got.tokens == ref.tokens and torch.equal(got.scores, ref.scores) and torch.equal(got.lengths, ref.lengths)
    assert torch.equal(got.hit_max_seq_len, ref.hit_max_seq_len)
    with pytest.raises(ValueError, match="look like probabilities"):
        _beam_search_unpacked(ops, lp.exp(), lengths, args, cfg)


@pytest.mark.parametrize("paged", [False, True])
def test_packed_buffer_converts_like_the_reference(ops, paged):
    """The CUDA public call's host side (_packed_result: numpy views of the one copied buffer, session 27) on the CPU
    packed op's buffer returns what ctc_beam_search returns on the CPU: tokens, scores and lengths (tensors), the
    max_seq_len and page-pool flags (a short max_seq_len and a small pool set them), and it judges the same checks."""
    from decoders.ctc import _packed_result

    lp = random_log_probs(4, 30, 9, seed=8)
    lengths = torch.tensor([30, 11, 0, 30])
    cfg = CtcBeamSearchConfig(beam_size=4, nbest=3, max_seq_len=6, paged=paged, page_size=2,
                              num_pages=14 if paged else None)
    args = (4, 0, float(cfg.blank_skip_threshold), 3, 6, *cfg.storage_args(6))
    ref = ctc_beam_search(lp, lengths, cfg)
    assert bool(ref.hit_max_seq_len.any())
    got = _packed_result(ops.ctc_decode_offline_packed(lp, lengths, *args, 4), 4, 6, lengths, 30, 9, cfg, 2)
    assert got.tokens == ref.tokens and torch.equal(got.scores, ref.scores) and torch.equal(got.lengths, ref.lengths)
    assert got.lengths.dtype == torch.int32 and got.scores.dtype == torch.float32 and got.scores.shape == (4, 3)
    assert torch.equal(got.hit_max_seq_len, ref.hit_max_seq_len)
    assert torch.equal(got.page_pool_exhausted, ref.page_pool_exhausted)
    with pytest.raises(ValueError, match="look like probabilities"):
        _packed_result(ops.ctc_decode_offline_packed(lp.exp(), lengths, *args, 4), 4, 6, lengths, 30, 9, cfg, 2)
    with pytest.raises(RuntimeError, match="returned .* words, expected"):
        _packed_result(torch.zeros(5, dtype=torch.int32), 4, 6, lengths, 30, 9, cfg, 2)
    last = lp.clone()
    last[..., 8] += 12.0  # a blank-last model decoded with blank_id=0
    last = last.log_softmax(-1)
    with pytest.warns(UserWarning, match="looks blank-last") as rec:  # at the caller `stacklevel` frames up: here
        _packed_result(ops.ctc_decode_offline_packed(last, lengths, *args, 64), 4, 6, lengths, 30, 9, cfg, 2)
    assert rec[0].filename == __file__


def test_result_conversion_checks_the_status_words():
    """_host_result / _to_result: NaN or +inf inputs raise, lost paged tokens raise, good rows convert unchanged."""
    from decoders.ctc import _to_result

    tokens = torch.tensor([[[3, 4, 0]]], dtype=torch.int32)
    lengths = torch.tensor([[2]], dtype=torch.int32)
    scores = torch.tensor([[-1.5]])
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        _to_result(tokens, lengths, scores, torch.tensor([1], dtype=torch.int32))
    with pytest.raises(RuntimeError, match="ran out of pages"):
        lost = torch.tensor([[[3, -1, 0]]], dtype=torch.int32)
        _to_result(lost, lengths, scores, torch.tensor([4], dtype=torch.int32))
    res = _to_result(tokens, lengths, scores, torch.tensor([0], dtype=torch.int32))
    assert res.tokens == [[[3, 4]]] and float(res.scores[0, 0]) == -1.5


@pytest.mark.parametrize("bad", [[11, 3], [-1, 2], [2**40, 3]])
def test_lengths_out_of_range_are_refused_with_their_values(bad):
    lp = torch.randn(2, 10, 5).log_softmax(-1)
    with pytest.raises(ValueError, match=r"lengths must be in \[0, T=10\], got \[" + str(bad[0])):
        ctc_beam_search(lp, torch.tensor(bad), CtcBeamSearchConfig(beam_size=3))
