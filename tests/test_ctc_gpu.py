"""CTC prefix beam search on CUDA against the CPU reference (random and adversarial inputs), streaming on
the GPU, batched streams, interleaving. All `gpu`: skipped without a CUDA device."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ctc_helpers import assert_results_match, random_log_probs  # noqa: E402

from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder, CtcStreamState, ctc_beam_search, load_ops  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ops():
    return load_ops()


def _both(lp, lengths, cfg, top1_only=False):
    ref = ctc_beam_search(lp, lengths, cfg)
    got = ctc_beam_search(lp.cuda(), lengths.cuda(), cfg)
    assert_results_match(got, ref, top1_only=top1_only)
    return got, ref


@pytest.mark.parametrize("V", [2, 29, 1025, 5000])
@pytest.mark.parametrize("beam", [1, 2, 10, 32, 33, 128])
def test_gpu_matches_cpu_random(ops, V, beam):
    B, T = 3, 17
    lp = random_log_probs(B, T, V, seed=V * 1000 + beam)
    lengths = torch.tensor([T, 1, 11])
    cfg = CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 4), blank_skip_threshold=0.9)
    _both(lp, lengths, cfg)
    _both(lp, lengths, CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 4), blank_skip_threshold=1.0))


@pytest.mark.parametrize("V,beam", [(29, 10), (29, 128), (1025, 32), (1025, 33), (5000, 10), (2, 4)])
def test_gpu_matches_cpu_long(ops, V, beam):
    """T = 1500: long prefixes, many forks (slot copies), several pre-pass tiles."""
    lp = random_log_probs(2, 1500, V, seed=V + beam, peaky=4.0)
    _both(lp, torch.tensor([1500, 1333]), CtcBeamSearchConfig(beam_size=beam, nbest=1, blank_skip_threshold=0.98),
          top1_only=True)


@pytest.mark.parametrize("V", [300, 1025, 5000])
@pytest.mark.parametrize("levels", [2, 4, 16, 1000])
def test_gpu_prepass_ties(ops, V, levels):
    """Log-probs on a few levels: many exact ties around the C-th largest (the pre-pass threshold path ranks
    them by id, or falls back to the radix select when over its cap); must equal the CPU reference, and the
    all-equal row too."""
    g = torch.Generator().manual_seed(V + levels)
    lp = torch.randint(0, levels, (3, 20, V), generator=g).float().mul(-1.5)
    lp[2] = 0.0  # every token equal
    lp = lp.log_softmax(-1)
    for beam in (1, 10, 32):
        _both(lp, torch.tensor([20, 20, 20]), CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 3),
                                                                  blank_skip_threshold=1.0))


@pytest.mark.parametrize("V", [256, 300, 1025, 5000])
@pytest.mark.parametrize("levels", [2, 16, 0])
def test_gpu_prepass_warp_threshold_equals_rank_threshold(ops, V, levels, monkeypatch):
    """BEAMDEC_CTC_PREPASS=warp (the fast path's threshold from the warps' r-th largest maxima, candidates
    ranked on packed words) writes the same candidate lists as the rank-counted threshold: bit-equal results on
    tied levels (0: continuous random log-probs), an all-equal row, a row with -inf columns, and beams up to 32
    (C up to 65), and equal to the CPU reference."""
    g = torch.Generator().manual_seed(V * 7 + levels)
    if levels:
        lp = torch.randint(0, levels, (4, 24, V), generator=g).float().mul(-1.5)
    else:
        lp = torch.randn(4, 24, V, generator=g) * 3.0
    lp[2] = 0.0
    lp[3, :, V // 3:] = -math.inf
    lp = lp.log_softmax(-1)
    lengths = torch.tensor([24, 24, 24, 13])
    for beam in (1, 10, 32):
        cfg = CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 3), blank_skip_threshold=1.0)
        monkeypatch.setenv("BEAMDEC_CTC_PREPASS", "rank")
        rank = ctc_beam_search(lp.cuda(), lengths.cuda(), cfg)
        monkeypatch.setenv("BEAMDEC_CTC_PREPASS", "warp")
        warp = ctc_beam_search(lp.cuda(), lengths.cuda(), cfg)
        assert warp.tokens == rank.tokens and torch.equal(warp.scores, rank.scores), beam
        assert_results_match(warp, ctc_beam_search(lp, lengths, cfg))


@pytest.mark.parametrize("blank", ["first", "last"])
def test_gpu_adversarial(ops, blank):
    V = 29
    b = 0 if blank == "first" else V - 1
    T = 40
    lp = random_log_probs(5, T, V, seed=3, blank=b)
    lp[0] = torch.full((V,), -20.0).index_fill(0, torch.tensor([b]), 0.0).log_softmax(-1)  # all blank
    # row 1: label 5 repeated on both sides of blank-dominant (skipped) frames
    for t in range(T):
        row = torch.full((V,), -12.0)
        row[5 if t % 4 in (0, 1) else b] = 0.0
        lp[1, t] = row.log_softmax(-1)
    lp[2] = torch.zeros(T, V).log_softmax(-1)  # uniform: every candidate ties
    lp[3, :, :] = -math.inf  # only blank and one label possible
    lp[3, :, b] = math.log(0.5)
    lp[3, :, 7] = math.log(0.5)
    lengths = torch.tensor([T, T, T, T, 0])
    for thr in (0.98, 1.0):
        for beam in (1, 10, 33):
            cfg = CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 3), blank_id=b, blank_skip_threshold=thr)
            got, ref = _both(lp, lengths, cfg)
            assert got.tokens[0][0] == [] and got.tokens[4][0] == [] and float(got.scores[4, 0]) == 0.0
    cfg = CtcBeamSearchConfig(beam_size=4, nbest=1, blank_id=b, blank_skip_threshold=0.9)
    got, _ = _both(lp[1:2], torch.tensor([T]), cfg)
    assert got.tokens[0][0] == [5] * (T // 4)  # repeats separated by skipped blanks are kept


def test_gpu_t0_and_t1(ops):
    for T in (0, 1):
        lp = random_log_probs(3, T, 1025, seed=T)
        _both(lp, torch.tensor([T, T, 0]), CtcBeamSearchConfig(beam_size=10, nbest=3))


def test_gpu_float16(ops):
    lp = random_log_probs(4, 200, 1025, seed=12).half()
    _both(lp, torch.tensor([200, 150, 17, 1]), CtcBeamSearchConfig(beam_size=10, nbest=3, blank_skip_threshold=1.0))


_ERROR_SCRIPT = r"""
import sys
import torch
from decoders.ctc import CtcBeamSearchConfig, ctc_beam_search, load_ops, state_bytes
ops = load_ops()
lp = torch.randn(2, 5, 7).log_softmax(-1).cuda()
cases = {
    "lengths": lambda: ops.ctc_decode_offline(lp, torch.tensor([5, 5], dtype=torch.int32), 3, 0, 1.0, 1, 5, 0, 0),
    "beam_size": lambda: ops.ctc_decode_offline(lp, torch.tensor([5, 5], dtype=torch.int32).cuda(), 129, 0, 1.0, 1, 5,
                                                0, 0),
    "state": lambda: ops.ctc_decode_chunk(torch.zeros(1, 5, dtype=torch.int32).cuda(), lp[:1], None, 2, 0, 10, 0, 0),
    "speech_mask": lambda: ops.ctc_decode_chunk(torch.zeros(1, state_bytes(2, 100, 4, 3) // 4, dtype=torch.int32).cuda(),
                                                lp[:1], torch.ones(1, 3, dtype=torch.bool).cuda(), 2, 0, 100, 4, 3),
    "page_size": lambda: ops.ctc_decode_offline(lp, torch.tensor([5, 5], dtype=torch.int32).cuda(), 3, 0, 1.0, 1, 5,
                                                -1, 0),
    "NaN": lambda: ctc_beam_search(lp.index_put((torch.tensor([1]), torch.tensor([2]), torch.tensor([3])),
                                                torch.tensor(float("nan")).cuda()), torch.tensor([5, 5]),
                                   CtcBeamSearchConfig(beam_size=3)),
}
word = sys.argv[1]
try:
    cases[word]()
    print("NO-ERROR", word, flush=True)
except ValueError as err:
    print("OK" if word in str(err) else "WRONG-MESSAGE", word, str(err).splitlines()[0][:200], flush=True)
"""


@pytest.mark.parametrize("word", ["lengths", "beam_size", "state", "speech_mask", "page_size", "NaN"])
def test_gpu_errors_name_the_argument(ops, word):
    """Each case in its own subprocess, so that a crash fails this case instead of killing the suite (argument
    errors whose message formatted an integer through an ostream segfaulted on the H200 host: see
    test_gpu_error_path_matrix)."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _ERROR_SCRIPT, word], capture_output=True, text=True, timeout=300,
                          cwd=str(Path(__file__).resolve().parents[1]))
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, f"rc={proc.returncode}: {proc.stdout} {proc.stderr[-2000:]}"
    assert proc.stdout.startswith("OK " + word), proc.stdout


_RAISE_SCRIPT = r"""
import sys
import torch
from decoders.ctc import load_ops
ops = load_ops()
device, mode = sys.argv[1], int(sys.argv[2])
try:
    ops.ctc_debug_raise(torch.zeros(1, device=device), mode)
    print("NO-ERROR", flush=True)
except ValueError as err:
    print("OK", str(err).splitlines()[0][:120], flush=True)
"""

_RAISE_MODES = {0: "op frame, string message", 1: "op frame, integer message", 2: "helper in another TU, string",
                3: "helper in another TU, integer", 4: "op frame, pre-formatted (the production checks)",
                5: "helper in another TU, pre-formatted", 6: "op frame under a CUDAGuard, integer"}


def test_gpu_error_path_matrix(ops):
    """Which ways of raising from a custom op survive on this host: each variant of ctc_debug_raise in its own
    subprocess, on CPU and CUDA tensors. Prints the whole matrix; asserts that the variant the production
    checks use (4: op frame, message pre-formatted with std::to_string) raises a clean ValueError on both.
    On the H200 host (torch 2.11, 2026-11-29) every variant that streams an integer into the message (1, 3,
    6) died with SIGSEGV on CPU and CUDA tensors alike, every string-only one (0, 2, 4, 5) raised cleanly:
    the crash is iostream integer formatting in extension code, not the throwing frame, the translation
    unit or the CUDA guard."""
    import subprocess

    results = {}
    procs = {}
    for device in ("cpu", "cuda"):
        for mode in (_RAISE_MODES if device == "cuda" else [m for m in _RAISE_MODES if m != 6]):
            procs[(device, mode)] = subprocess.Popen(
                [sys.executable, "-c", _RAISE_SCRIPT, device, str(mode)], stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, cwd=str(Path(__file__).resolve().parents[1]))
    for key, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        tail = out.strip() or (err.strip().splitlines() or [""])[-1]
        results[key] = f"rc={proc.returncode} {tail}"
    for (device, mode), res in sorted(results.items()):
        print(f"ERROR-PATH {device:4s} mode {mode} ({_RAISE_MODES[mode]}): {res}")
    for device in ("cpu", "cuda"):
        assert results[(device, 4)].startswith("rc=0 OK"), results[(device, 4)]


@pytest.mark.parametrize("beam", [1, 2, 10, 16, 32])
def test_gpu_warp_kernel_equals_block_kernel(ops, beam, monkeypatch):
    """The one-warp kernel (default for beam <= 32 up to 64 rows) and the block kernel make the same selections:
    equal scores, equal tokens up to exact ties."""
    lp = random_log_probs(4, 300, 1025, seed=beam, peaky=2.0).cuda()
    lengths = torch.tensor([300, 299, 17, 1])
    for paged in (False, True):
        cfg = CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 3), blank_skip_threshold=0.95, paged=paged,
                                  page_size=8)
        monkeypatch.setenv("BEAMDEC_CTC_KERNEL", "warp")
        warp = ctc_beam_search(lp, lengths, cfg)
        monkeypatch.setenv("BEAMDEC_CTC_KERNEL", "block")
        block = ctc_beam_search(lp, lengths, cfg)
        monkeypatch.delenv("BEAMDEC_CTC_KERNEL")
        assert_results_match(warp, block)


@pytest.mark.parametrize("api", ["packed", "unpacked"])
def test_gpu_input_checks_read_back_with_the_results(ops, api, monkeypatch):
    """The CUDA path checks lengths (on the GPU) and the log-prob values on the device and reads them back in
    the results' one copy: the same one-line errors and warning as the CPU path, nothing returned. Both forms of the
    call: the packed op (default) and BEAMDEC_CTC_API=unpacked (torch ops around ctc_decode_offline)."""
    if api == "unpacked":
        monkeypatch.setenv("BEAMDEC_CTC_API", "unpacked")
    lp = random_log_probs(2, 40, 7, seed=1).cuda()
    cfg = CtcBeamSearchConfig(beam_size=3)
    for bad in ([41, 3], [-1, 3], [2**40, 3]):  # an int64 past 2^31 must not wrap into range
        with pytest.raises(ValueError, match=r"lengths must be in \[0, T=40\], got \[" + str(bad[0])):
            ctc_beam_search(lp, torch.tensor(bad).cuda(), cfg)
        with pytest.raises(ValueError, match=r"lengths must be in \[0, T=40\]"):
            ctc_beam_search(lp, torch.tensor(bad), cfg)  # host lengths: refused before the op
    with pytest.raises(ValueError, match="look like probabilities"):
        ctc_beam_search(lp.exp(), torch.tensor([40, 4]).cuda(), cfg)
    last = random_log_probs(2, 40, 7, seed=1, peaky=3.0, blank=6)
    last[..., 6] += 4.0
    with pytest.warns(UserWarning, match="looks blank-last.*blank_id=6") as rec:
        ctc_beam_search(last.log_softmax(-1).cuda(), torch.tensor([40, 40]).cuda(), cfg)
    assert rec[0].filename == __file__  # attributed to the caller of ctc_beam_search, both call forms
    good = ctc_beam_search(lp, torch.tensor([40, 4]).cuda(), cfg)
    assert_results_match(good, ctc_beam_search(lp.cpu(), torch.tensor([40, 4]), cfg))
    assert good.scores.dtype == torch.float32 and good.lengths.dtype == torch.int32


@pytest.mark.parametrize("sample_frames", [0, 1, 64, 100])
@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("int64", [False, True])
def test_gpu_packed_offline_op_equals_cpu(ops, sample_frames, half, int64):
    """ctc_decode_offline_packed on CUDA (the public call's one op: input-check kernel, decode, n-best in one
    buffer): its checks equal its CPU form's word for word (lengths out of range, the value counts: NaN, probability,
    -inf and tied rows; int32 and int64 lengths, past 2^31 included: never wrapped into range), its outputs equal
    the CUDA ctc_decode_offline's bit for bit on the clamped lengths (that op is compared with the CPU reference
    by the tests above)."""
    from test_ctc_cpu import packed_inputs

    lp, lengths = packed_inputs()
    if half:
        lp = lp.half()
    if not int64:
        lengths = lengths.clamp(-5, 2**31 - 1).to(torch.int32)
    B, T, _ = lp.shape
    for beam, nbest in ((4, 2), (40, 3)):  # the one-warp and the block kernel
        args = (beam, 0, 0.95, nbest, T, 0, 0)
        got = ops.ctc_decode_offline_packed(lp.cuda(), lengths.cuda(), *args, sample_frames).cpu()
        want = ops.ctc_decode_offline_packed(lp, lengths, *args, sample_frames)
        assert torch.equal(got[:8], want[:8]) and int(got[0]) == 3
        from decoders.ctc import unpack_offline

        clamped = lengths.to(torch.int64).clamp(0, T).to(torch.int32).cuda()
        ref = [x.cpu() for x in ops.ctc_decode_offline(lp.cuda(), clamped, *args)]
        for x, y in zip(unpack_offline(got, B, nbest, T)[1:], ref):
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)


def _round_inputs():
    """Inputs where the top-`beam` rounds decide on ties and sentinels: random, uniform rows (every candidate
    ties), a few log-prob levels (ties around the threshold), -inf columns, blank-dominant frames, one beam taking
    every winner of a frame, and T = 1."""
    T, V = 60, 301
    lp = random_log_probs(6, T, V, seed=11, peaky=2.5)
    lp[1] = torch.zeros(T, V).log_softmax(-1)
    g = torch.Generator().manual_seed(5)
    lp[2] = (torch.randint(0, 3, (T, V), generator=g).float() * -1.5).log_softmax(-1)
    lp[3, :, 40:] = -math.inf
    lp[3] = lp[3].log_softmax(-1)
    lp[4, ::2, 0] = 5.0
    lp[4] = lp[4].log_softmax(-1)
    # one beam far ahead of the rest, then a flat frame: every winner is an extension of that one beam, all tied
    # (the multi-winner rounds' worst case: one winner per round)
    one = torch.full((T, V), -30.0)
    one[0::2, 7] = 0.0
    one[1::2, 1:] = 0.0
    lp = torch.cat([lp[:5], one.log_softmax(-1)[None], lp[5:]])
    return lp, torch.tensor([T, T, T, T, T, T, 1])


@pytest.mark.parametrize("beam", [1, 2, 3, 10, 15, 16, 31, 32])
@pytest.mark.parametrize("half", [False, True])
def test_gpu_round_forms_equal_each_other_and_cpu(ops, beam, half, monkeypatch):
    """BEAMDEC_CTC_ROUNDS=select (the one-warp kernel's top-`beam` rounds as selects, the next ordinary
    extension's key kept a round ahead) and =multi (several winners per round: heads ranked by counting, each
    taken while it beats the seconds of the heads above it) pick the same winners in the same order as the
    branch form: bit-equal tokens and scores, flat and paged, offline and streamed in 7-frame chunks, and equal to
    the CPU reference. The inputs (_round_inputs) hold exact ties between beams, stays and extensions, -inf tails
    and 1-frame rows."""
    monkeypatch.setenv("BEAMDEC_CTC_KERNEL", "warp")
    lp, lengths = _round_inputs()
    if half:
        lp = lp.half()
    for paged in (False, True):
        for thr in (0.97, 1.0):
            cfg = CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 4), blank_skip_threshold=thr, paged=paged,
                                      page_size=8)
            monkeypatch.setenv("BEAMDEC_CTC_ROUNDS", "branch")
            branch = ctc_beam_search(lp.cuda(), lengths.cuda(), cfg)
            for mode in ("select", "multi"):
                monkeypatch.setenv("BEAMDEC_CTC_ROUNDS", mode)
                got = ctc_beam_search(lp.cuda(), lengths.cuda(), cfg)
                assert got.tokens == branch.tokens and torch.equal(got.scores, branch.scores), (mode, paged, thr)
                assert_results_match(got, ctc_beam_search(lp.float(), lengths, cfg))
        dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 4), paged=paged, page_size=8))
        outs = []
        for mode in ("branch", "select", "multi"):
            monkeypatch.setenv("BEAMDEC_CTC_ROUNDS", mode)
            st = dec.create_state(lp.shape[0] - 1, lp.shape[2], device="cuda")
            for t0 in range(0, lp.shape[1], 7):
                dec.decode_chunk(lp[:-1, t0:t0 + 7].cuda(), state=st)
            outs.append(dec.finalize(st))
        for o in outs[1:]:
            assert o.tokens == outs[0].tokens and torch.equal(o.scores, outs[0].scores)


@pytest.mark.parametrize("mode", ["branch", "select", "multi"])
@pytest.mark.parametrize("beam", [4, 10, 15, 32])
def test_gpu_round_forms_random_long(ops, mode, beam, monkeypatch):
    """Every form of the one-warp kernel's rounds against the CPU reference on random log-probs: Gaussian (OASR's
    benchmark inputs are of this kind: many extensions per beam compete) and all-equal non-blank values (ties
    everywhere), 300 frames, V 97 and 5000."""
    monkeypatch.setenv("BEAMDEC_CTC_KERNEL", "warp")
    monkeypatch.setenv("BEAMDEC_CTC_ROUNDS", mode)
    for V, peaky in ((97, 1.0), (97, 0.0), (5000, 1.0)):
        lp = random_log_probs(3, 300, V, seed=beam + V, peaky=peaky)
        lengths = torch.tensor([300, 171, 2])
        cfg = CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 4), blank_skip_threshold=1.0)
        assert_results_match(ctc_beam_search(lp.cuda(), lengths.cuda(), cfg), ctc_beam_search(lp, lengths, cfg))


@pytest.mark.parametrize("beam", [2, 10, 32])
def test_gpu_lazy_prefix_rebuild(ops, beam, monkeypatch):
    """The one-warp kernel rebuilds flat prefixes once per launch (forks copied at the end, 32-bit words when the
    slot stride is even): long prefixes (past 128 and 512 tokens, several 128-frame launches) give the same
    results with odd and even max_seq_len, and streaming in 7-frame chunks (a rebuild per chunk) equals offline.
    (test_gpu_matches_cpu_long / _random hold the CPU reference against the same kernel.)"""
    monkeypatch.setenv("BEAMDEC_CTC_KERNEL", "warp")
    lp = random_log_probs(3, 900, 300, seed=beam, peaky=1.0).cuda()
    lengths = torch.tensor([900, 613, 5])
    cfg = CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 4), blank_skip_threshold=1.0)
    ref = ctc_beam_search(lp, lengths, cfg)
    assert max(len(t) for t in ref.tokens[0]) > 512
    odd = CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 4), blank_skip_threshold=1.0, max_seq_len=901)
    got = ctc_beam_search(lp, lengths, odd)
    assert got.tokens == ref.tokens and torch.equal(got.scores, ref.scores)
    dec = CtcStreamingDecoder(cfg)
    state = dec.create_state(3, 300, device="cuda")
    for t0 in range(0, 900, 7):
        dec.decode_chunk(lp[:, t0:t0 + 7], state=state)
    streamed = dec.finalize(state)
    full = ctc_beam_search(lp, torch.tensor([900] * 3), cfg)
    assert streamed.tokens == full.tokens


@pytest.mark.parametrize("beam", [1, 10, 32])
def test_gpu_paged_smem_metadata_equals_flat(ops, beam, monkeypatch):
    """BEAMDEC_CTC_PAGED_SMEM=1 (page metadata in shared memory for the one-warp kernel) returns exactly the
    flat results, offline over several tiles and streaming in small chunks (metadata copied in and out per
    launch)."""
    monkeypatch.setenv("BEAMDEC_CTC_KERNEL", "warp")
    lp = random_log_probs(3, 400, 1025, seed=beam + 3, peaky=3.0).cuda()
    lengths = torch.tensor([400, 257, 0])
    base = dict(beam_size=beam, nbest=min(beam, 4), blank_skip_threshold=0.98)
    flat = ctc_beam_search(lp, lengths, CtcBeamSearchConfig(**base))
    monkeypatch.setenv("BEAMDEC_CTC_PAGED_SMEM", "1")
    for page_size in (1, 16):
        paged = ctc_beam_search(lp, lengths, CtcBeamSearchConfig(paged=True, page_size=page_size, **base))
        assert paged.tokens == flat.tokens and torch.equal(paged.scores, flat.scores)
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(paged=True, page_size=4, max_seq_len=420, **base))
    state = dec.create_state(3, 1025, device="cuda")
    for t0 in range(0, 400, 7):
        dec.decode_chunk(lp[:, t0:t0 + 7], state=state)
    full = ctc_beam_search(lp, torch.tensor([400] * 3), CtcBeamSearchConfig(**base))
    assert dec.finalize(state).tokens == full.tokens


@pytest.mark.parametrize("beam", [1, 10, 32, 33, 128])
@pytest.mark.parametrize("page_size", [1, 16])
def test_gpu_paged_equals_flat(ops, beam, page_size):
    """Paged token storage on the GPU returns exactly what flat storage returns (same selections; only the
    storage differs), and matches the CPU reference."""
    lp = random_log_probs(3, 400, 1025, seed=beam + page_size, peaky=3.0).cuda()
    lengths = torch.tensor([400, 257, 0])
    base = dict(beam_size=beam, nbest=min(beam, 4), blank_skip_threshold=0.98)
    flat = ctc_beam_search(lp, lengths, CtcBeamSearchConfig(**base))
    paged = ctc_beam_search(lp, lengths, CtcBeamSearchConfig(paged=True, page_size=page_size, **base))
    assert paged.tokens == flat.tokens
    assert torch.equal(paged.scores, flat.scores)
    assert not bool(paged.page_pool_exhausted.any())
    if beam <= 33:  # the CPU reference at beam 128 is slow; flat-vs-CPU at 128 is covered above
        assert_results_match(paged, ctc_beam_search(lp.cpu(), lengths, CtcBeamSearchConfig(paged=True, **base)))


def test_gpu_paged_small_pool_raises(ops):
    lp = random_log_probs(1, 80, 11, seed=8, peaky=3.0).cuda()
    cfg = dict(beam_size=8, nbest=8, blank_skip_threshold=1.0, paged=True, page_size=2)
    with pytest.raises(RuntimeError, match="num_pages"):
        ctc_beam_search(lp, torch.tensor([80]), CtcBeamSearchConfig(num_pages=6, **cfg))


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, 128])
def test_gpu_paged_streaming_equals_offline(ops, chunk, paged):
    lp = random_log_probs(3, 300, 1025, seed=chunk + 7).cuda()
    ref = ctc_beam_search(lp, torch.tensor([300] * 3), CtcBeamSearchConfig(beam_size=10, nbest=3,
                                                                         blank_skip_threshold=1.0))
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=10, nbest=3, paged=paged, page_size=4, max_seq_len=320))
    state = dec.create_state(3, 1025, device="cuda")
    for t0 in range(0, 300, chunk):
        dec.decode_chunk(lp[:, t0:t0 + chunk], state=state)
    got = dec.finalize(state)
    assert got.tokens == ref.tokens
    torch.testing.assert_close(got.scores, ref.scores)


@pytest.mark.parametrize("chunk", [1, 7, 128])
def test_gpu_streaming_equals_offline(ops, chunk):
    lp = random_log_probs(3, 300, 1025, seed=chunk).cuda()
    cfg = CtcBeamSearchConfig(beam_size=10, nbest=3, blank_skip_threshold=1.0)
    ref = ctc_beam_search(lp, torch.tensor([300] * 3), cfg)
    dec = CtcStreamingDecoder(cfg)
    state = dec.create_state(3, 1025, device="cuda")
    for t0 in range(0, 300, chunk):
        dec.decode_chunk(lp[:, t0:t0 + chunk], state=state)
    got = dec.finalize(state)
    assert got.tokens == ref.tokens
    torch.testing.assert_close(got.scores, ref.scores)
    assert_results_match(got, ctc_beam_search(lp.cpu(), torch.tensor([300] * 3), cfg))


@pytest.mark.parametrize("paged", [False, True])
def test_gpu_batched_streams_equal_per_stream_and_interleaved(ops, paged):
    N, V = 300, 500  # > 256: two launch groups
    lps = random_log_probs(N, 64, V, seed=5).cuda()
    cfg = CtcBeamSearchConfig(beam_size=8, nbest=2, paged=paged, page_size=4)
    dec = CtcStreamingDecoder(cfg)
    singles = [dec.create_state(1, V, device="cuda") for _ in range(N)]
    batched = [dec.create_state(1, V, device="cuda") for _ in range(N)]
    mask = lps[..., 0] < math.log(0.95)
    for t0 in range(0, 64, 16):
        for i in range(N):  # interleaved single-stream calls
            dec.decode_chunk(lps[i:i + 1, t0:t0 + 16], state=singles[i], speech_mask=mask[i:i + 1, t0:t0 + 16])
        dec.decode_chunk_batch([lps[i:i + 1, t0:t0 + 16] for i in range(N)], batched, speech_mask=mask[:, t0:t0 + 16])
    offline = ctc_beam_search(lps, torch.tensor([64] * N), CtcBeamSearchConfig(beam_size=8, nbest=2,
                                                                               blank_skip_threshold=0.95))
    for i in range(N):
        a, b = dec.finalize(singles[i]), dec.finalize(batched[i])
        assert a.tokens == b.tokens == [offline.tokens[i]]
        assert torch.equal(a.scores, b.scores)
        torch.testing.assert_close(a.scores[0], offline.scores[i])
    assert dec.state_bytes_per_stream <= 40 * 1024 or dec.config.beam_size != 10


@pytest.mark.parametrize("beam", [10, 24, 40])  # block kernel at 128 / 256 / 512 threads
def test_gpu_paged_block_kernel_under_contention_repeated(ops, beam, monkeypatch):
    """Issue 19: a shared-memory WAR race in the block kernel's paged step 4 (thread 0 stored s.pfresh /
    s.ptop while every thread still read the step's shared words) could corrupt the page pool under other
    timings. Many rows, 1-token pages and a pool at ~80 % of the never-exhausting default keep the free stack
    busy every frame; five runs must all equal the CPU reference."""
    monkeypatch.setenv("BEAMDEC_CTC_KERNEL", "block")
    g = torch.Generator().manual_seed(beam)
    lp = (torch.randn(96, 48, 20, generator=g) * 2).log_softmax(-1)
    lengths = torch.full((96,), 48)
    cfg = CtcBeamSearchConfig(beam_size=beam, nbest=2, paged=True, page_size=1, num_pages=beam * 40,
                              blank_skip_threshold=1.0)
    ref = ctc_beam_search(lp, lengths, cfg)
    assert not bool(ref.page_pool_exhausted.any())  # contention, not exhaustion
    lp_gpu = lp.cuda()
    for _ in range(5):
        got = ctc_beam_search(lp_gpu, lengths, cfg)
        assert_results_match(got, ref)
        assert not bool(got.page_pool_exhausted.any())


@pytest.mark.parametrize("check", ["separate", "fused"])
@pytest.mark.parametrize("paged", [False, True])
def test_gpu_corrupted_state_row_is_skipped_and_reported_at_finalize(ops, paged, check, monkeypatch):
    """Issue 11 on CUDA: a tampered header word (active beams = 100000) must not be read by any kernel, and a flipped
    token word (only the checksum sees it) must not be decoded on. The state check refuses the rows without a
    device->host sync: decode_chunk leaves them untouched, the other rows decode normally, finalize raises a one-line
    ValueError naming row and field. Both check forms: its own launch, and fused (BEAMDEC_CTC_CHECK=fused: the
    verdict formed by the decode kernel from the first tile's pre-pass launch, later tiles reading it)."""
    monkeypatch.setenv("BEAMDEC_CTC_CHECK", check)
    V = 50
    lp = random_log_probs(4, 200, V, seed=4).cuda()
    cfg = CtcBeamSearchConfig(beam_size=10, nbest=2, max_seq_len=256, paged=paged, page_size=4,
                              blank_skip_threshold=1.0)
    dec = CtcStreamingDecoder(cfg)
    st = dec.create_state(4, V, device="cuda")
    dec.decode_chunk(lp[:, :16], state=st)
    st.tensor[1, 3] = 100000
    st.tensor[2, st.tensor.shape[1] - 1] ^= 1
    before = st.tensor[1:3].clone()
    dec.decode_chunk(lp[:, 16:32], state=st)
    dec.decode_chunk(lp[:, 32:], state=st)  # 168 frames: two tiles
    assert torch.equal(st.tensor[1:3], before)
    with pytest.raises(ValueError, match=r"row 1: header word 3 \(active beams\) is 100000") as info:
        dec.finalize(st)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="row 0: .*checksum"):
        dec.finalize(CtcStreamState(tensor=st.tensor[[2]].clone(), vocab_size=V))
    good = CtcStreamState(tensor=st.tensor[[0, 3]].clone(), vocab_size=V)
    ref = ctc_beam_search(lp[[0, 3]].cpu(), torch.tensor([200, 200]), cfg)
    assert_results_match(dec.finalize(good), ref)


@pytest.mark.parametrize("first,second", [("256", "1024"), ("1024", "256")])
def test_gpu_state_check_forms_write_and_accept_the_same_checksums(ops, first, second, monkeypatch):
    """The state check / seal kernels at 1024 threads (default) and 256 (BEAMDEC_CTC_CHECK_THREADS=256, the earlier
    form) compute the same checksum: a row sealed by one form passes the other's check, the decode continues as if
    one form had run throughout, and a flipped word is refused by both."""
    V = 40
    lp = random_log_probs(2, 48, V, seed=9).cuda()
    cfg = CtcBeamSearchConfig(beam_size=6, nbest=2, max_seq_len=2048, blank_skip_threshold=1.0)
    dec = CtcStreamingDecoder(cfg)
    st = dec.create_state(2, V, device="cuda")
    for i, form in enumerate((first, second, first)):
        monkeypatch.setenv("BEAMDEC_CTC_CHECK_THREADS", form)
        dec.decode_chunk(lp[:, 16 * i:16 * (i + 1)], state=st)
    monkeypatch.setenv("BEAMDEC_CTC_CHECK_THREADS", second)
    assert_results_match(dec.finalize(st), ctc_beam_search(lp.cpu(), torch.tensor([48, 48]), cfg))
    st.tensor[0, st.tensor.shape[1] - 1] ^= 1  # a token word: only the checksum can see it
    for form in ("256", "1024"):
        monkeypatch.setenv("BEAMDEC_CTC_CHECK_THREADS", form)
        with pytest.raises(ValueError, match="row 0: .*checksum"):
            dec.finalize(st)


def test_gpu_state_stamp_refuses_cpu_state_and_same_state_twice(ops):
    """A CPU-made state (no prefix hashes) copied to the GPU is refused by name; decode_chunk_batch refuses
    one CUDA state passed twice (issue 11)."""
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=4, max_seq_len=32))
    cpu = dec.create_state(1, 7)
    dec.decode_chunk(random_log_probs(1, 5, 7), state=cpu)
    moved = CtcStreamState(tensor=cpu.tensor.cuda(), vocab_size=7)
    with pytest.raises(ValueError, match="made by the CPU decoder"):
        dec.finalize(moved)
    st = dec.create_state(1, 7, device="cuda")
    lp = random_log_probs(1, 4, 7).cuda()
    with pytest.raises(ValueError, match="same state"):
        dec.decode_chunk_batch([lp, lp], [st, st])


@pytest.mark.parametrize("name,bad", [("BEAMDEC_CTC_ROUNDS", "split"), ("BEAMDEC_CTC_KERNEL", "Warp"),
                                      ("BEAMDEC_CTC_PREPASS", "ranks"), ("BEAMDEC_CTC_PAGED_SMEM", "yes")])
def test_gpu_unknown_switch_values_are_one_line_errors(ops, name, bad, monkeypatch):
    """The CUDA CTC ops' A/B switches accept their listed values (or unset); any other value is a one-line
    ValueError naming the switch, offline and streaming, and the next call with a good value decodes (session 17:
    =split, reverted after its first GPU run hung, would otherwise have run the default silently)."""
    lp = torch.randn(2, 9, 7).log_softmax(-1).cuda()
    cfg = CtcBeamSearchConfig(beam_size=4, nbest=2)
    want = ctc_beam_search(lp, torch.tensor([9, 5]).cuda(), cfg)
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=f"{name} must be one of .*got '{bad}'") as e:
        ctc_beam_search(lp, torch.tensor([9, 5]).cuda(), cfg)
    assert len(str(e.value).strip().splitlines()) == 1
    dec = CtcStreamingDecoder(cfg)
    st = dec.create_state(2, 7, device="cuda")
    with pytest.raises(ValueError, match=f"{name} must be one of"):
        dec.decode_chunk(lp, state=st)
    monkeypatch.delenv(name)
    got = ctc_beam_search(lp, torch.tensor([9, 5]).cuda(), cfg)
    assert got.tokens == want.tokens and torch.equal(got.scores, want.scores)


def _streams_both_checks(monkeypatch, lp, mask, cfg, chunk, batched=False):
    """Decodes `lp` in chunks twice from fresh states, BEAMDEC_CTC_CHECK=separate and =fused, asserting the state
    tensors bit-equal after every chunk; returns (decoder, states) of both."""
    dec = CtcStreamingDecoder(cfg)
    B, T, V = lp.shape
    made = {}
    for form in ("separate", "fused"):
        monkeypatch.setenv("BEAMDEC_CTC_CHECK", form)
        made[form] = [dec.create_state(1, V, device="cuda") for _ in range(B)] if batched else \
            dec.create_state(B, V, device="cuda")
    for t0 in range(0, T, chunk):
        for form in ("separate", "fused"):
            monkeypatch.setenv("BEAMDEC_CTC_CHECK", form)
            m = None if mask is None else mask[:, t0:t0 + chunk]
            if batched:
                dec.decode_chunk_batch(lp[:, t0:t0 + chunk], made[form], speech_mask=m)
            else:
                dec.decode_chunk(lp[:, t0:t0 + chunk], state=made[form], speech_mask=m)
        if batched:
            for a, b in zip(made["separate"], made["fused"]):
                assert torch.equal(a.tensor, b.tensor), t0
        else:
            assert torch.equal(made["separate"].tensor, made["fused"].tensor), t0
    return dec, made


@pytest.mark.parametrize("rounds", ["multi", "select"])  # select: the launcher's separate-check fallback
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, 16, 200])  # 200: two tiles, the second reads the first's verdict
def test_gpu_fused_state_check_equals_separate(ops, rounds, paged, chunk, monkeypatch):
    """BEAMDEC_CTC_CHECK=fused (the state check's parts in the first tile's pre-pass launch, the verdict formed by the
    decode kernel) leaves every state word equal to the separate check's after every chunk: speech-masked frames,
    a chunk with no decoded frame, and both bad-value marks (a NaN in a decoded frame, +inf blank in a skipped one)
    set the same status bits; finalize reports the same rows."""
    monkeypatch.setenv("BEAMDEC_CTC_ROUNDS", rounds)
    V, T = 300, 230
    lp = random_log_probs(4, T, V, seed=chunk + 31 * paged).cuda()
    mask = lp[..., 0] < math.log(0.9)  # blank = column 0
    mask[2, 20:60] = False  # row 2: whole chunks with no decoded frame
    lp[1, 100, 5] = float("nan")  # row 1: a bad value in a decoded frame
    mask[1, 100] = True
    lp[3, 150, 0] = float("inf")  # row 3: +inf blank in a skipped frame
    mask[3, 150] = False
    cfg = CtcBeamSearchConfig(beam_size=10, nbest=3, paged=paged, page_size=4, max_seq_len=256)
    dec, made = _streams_both_checks(monkeypatch, lp, mask, cfg, chunk)
    for form in ("separate", "fused"):
        with pytest.raises(ValueError, match=r"NaN or \+inf \(rows \[1, 3\]\)"):
            dec.finalize(made[form])
    clean = random_log_probs(2, 64, V, seed=chunk).cuda()
    dec, made = _streams_both_checks(monkeypatch, clean, None, cfg, chunk)
    ref = ctc_beam_search(clean.cpu(), torch.tensor([64, 64]), CtcBeamSearchConfig(beam_size=10, nbest=3,
                                                                                  blank_skip_threshold=1.0))
    assert_results_match(dec.finalize(made["fused"]), ref)


@pytest.mark.parametrize("n", [5, 300])  # 300: a 256-row group on the block kernel (the launcher's own check) + 44
def test_gpu_fused_state_check_batched_streams(ops, n, monkeypatch):
    """decode_chunk_batch with the fused check: every separate state equal to the separate check's after every
    chunk, and to the offline decode at the end."""
    V = 200
    lp = random_log_probs(n, 48, V, seed=n).cuda()
    cfg = CtcBeamSearchConfig(beam_size=8, nbest=2, max_seq_len=64)
    dec, made = _streams_both_checks(monkeypatch, lp, None, cfg, 16, batched=True)
    offline = ctc_beam_search(lp, torch.tensor([48] * n).cuda(), CtcBeamSearchConfig(beam_size=8, nbest=2,
                                                                                     blank_skip_threshold=1.0))
    for i in (0, n // 2, n - 1):
        got = dec.finalize(made["fused"][i])
        assert got.tokens == [offline.tokens[i]]
        torch.testing.assert_close(got.scores[0], offline.scores[i])


def _launched(fn) -> list[str]:
    """The CUDA kernels and memsets `fn` enqueues (torch.profiler's CUDA activity), by name, in order."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]


def _short(name: str) -> str:
    """A kernel's name without its return type, namespaces and template arguments."""
    return name.split("(")[0].split("<")[0].replace("void ", "").split("::")[-1]


@pytest.mark.parametrize("earlier", [False, True])
def test_gpu_default_launches_are_the_fewer_ones(ops, earlier, monkeypatch):
    """What the defaults launch since session 28 (unset switches), and what the earlier forms add back: one stream's
    chunk call on the one-warp kernel runs pre-pass, decode, seal (=separate adds the check kernel first; the seal a
    cluster per row since session 30 on sm_90, =block one block per row); the raw offline op runs pre-pass, decode,
    finalize (=memset / =torch add a zeroing and a -1 fill before them)."""
    for k in ("BEAMDEC_CTC_CHECK", "BEAMDEC_CTC_FILL", "BEAMDEC_CTC_ZERO", "BEAMDEC_CTC_KERNEL", "BEAMDEC_CTC_ROUNDS",
              "BEAMDEC_CTC_SEAL", "BEAMDEC_CTC_CHECK_THREADS"):
        monkeypatch.delenv(k, raising=False)
    if earlier:
        for k, v in {**_EARLIER_LAUNCHES, "BEAMDEC_CTC_CHECK": "separate", "BEAMDEC_CTC_SEAL": "block"}.items():
            monkeypatch.setenv(k, v)
    V, beam = 50, 8
    lp = random_log_probs(2, 16, V, seed=5).cuda()
    cfg = CtcBeamSearchConfig(beam_size=beam, nbest=2, max_seq_len=64)
    dec = CtcStreamingDecoder(cfg)
    st = dec.create_state(1, V, device="cuda")
    dec.decode_chunk(lp[:1, :4], state=st)
    names = _launched(lambda: dec.decode_chunk(lp[:1, 4:], state=st))
    kernels = [_short(n) for n in names]
    cluster = torch.cuda.get_device_capability()[0] >= 9 and not earlier
    want = ["ctc_prepass_kernel", "ctc_decode_warp_kernel",
            "ctc_state_seal_cluster_kernel" if cluster else "ctc_state_seal_kernel"]
    assert kernels == (["ctc_state_check_kernel"] + want if earlier else want), names
    store = cfg.storage_args(16)
    lengths = torch.tensor([16, 9], dtype=torch.int32).cuda()  # copied before the profiled call
    names = _launched(lambda: ops.ctc_decode_offline(lp, lengths, beam, 0, 1.0, 2, 16, *store))
    ours = [n for n in names if "beamdec" in n or "ctc_" in n]
    assert [_short(n) for n in ours] == [
        "ctc_prepass_kernel", "ctc_decode_warp_kernel", "ctc_finalize_kernel"], names
    others = [n for n in names if n not in ours]  # the earlier forms' zeroing and -1 fill: torch fills or memsets
    if earlier:
        assert others and all("Fill" in n or "Memset" in n for n in others), names
    else:
        assert not others, names


def _states_equal_under_switch(monkeypatch, name, forms, dec, lp, chunk, batched):
    """Decodes `lp` (rows >= 4) chunk by chunk into one state per value of switch `name`, row 3 corrupted after two
    chunks (refused from then on: every form must leave it as it is), then for each n in `batched` n separate streams
    per form through decode_chunk_batch (48 frames of random input); every state word equal across the forms after
    every chunk."""
    V = lp.shape[2]
    made = {}
    for form in forms:
        monkeypatch.setenv(name, form)
        made[form] = dec.create_state(lp.shape[0], V, device="cuda")
    for t0 in range(0, lp.shape[1], chunk):
        if t0 == 2 * chunk:
            for form in forms:
                made[form].tensor[3, 3] = 100000
        for form in forms:
            monkeypatch.setenv(name, form)
            dec.decode_chunk(lp[:, t0:t0 + chunk], state=made[form])
        for form in forms[1:]:
            assert torch.equal(made[forms[0]].tensor, made[form].tensor), (form, lp.shape[0], t0)
    for n in batched:
        xs = random_log_probs(n, 48, V, seed=n).cuda()
        sep = {}
        for form in forms:
            monkeypatch.setenv(name, form)
            sep[form] = [dec.create_state(1, V, device="cuda") for _ in range(n)]
            for t0 in range(0, 48, 16):
                dec.decode_chunk_batch(xs[:, t0:t0 + 16], sep[form])
        for form in forms[1:]:
            for a, b in zip(sep[forms[0]], sep[form]):
                assert torch.equal(a.tensor, b.tensor), (form, n)


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, 16, 200])  # 200: two tiles in one call
def test_gpu_overlapped_launches_equal_plain_launches(ops, paged, chunk, monkeypatch):
    """BEAMDEC_CTC_PDL (=1: the pre-pass, one-warp decode and seal as overlapped launches, each waiting on the kernel
    before it in its first instruction; =0: plain launches; unset: the streaming ops overlapped, the offline ops
    plain, so both are covered by these two forms): every state word equal after every chunk, one
    state and separate states in one batched call (5 streams: the one-warp kernel; 70: the block kernel after an
    overlapped pre-pass), a corrupted row refused alike, and the offline raw and packed ops' outputs equal, float and
    half, the one-warp and the block kernel."""
    V, T = 120, 230
    lp = random_log_probs(5, T, V, seed=chunk + 7 * paged).cuda()
    cfg = CtcBeamSearchConfig(beam_size=10, nbest=3, paged=paged, page_size=4, max_seq_len=256)
    dec = CtcStreamingDecoder(cfg)
    _states_equal_under_switch(monkeypatch, "BEAMDEC_CTC_PDL", ("0", "1"), dec, lp, chunk, (5, 70))
    lengths = torch.tensor([T, 0, 1, T // 2, T], dtype=torch.int32).cuda()
    for beam, half in ((10, False), (10, True), (40, False)):
        c = CtcBeamSearchConfig(beam_size=beam, nbest=3, paged=paged, page_size=4, max_seq_len=T)
        args = (beam, 0, 0.95, 3, T, *c.storage_args(T))
        x = lp.half() if half else lp
        out = {}
        for form in ("0", "1"):
            monkeypatch.setenv("BEAMDEC_CTC_PDL", form)
            out[form] = [t.clone() for t in ops.ctc_decode_offline(x, lengths, *args)] + [
                ops.ctc_decode_offline_packed(x, lengths, *args, 4).clone()]
        for a, b in zip(out["0"], out["1"]):
            assert torch.equal(a, b), (beam, half)


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("chunk", [1, 16, 200])  # 200: two tiles in one call
def test_gpu_cluster_seal_equals_block_seal(ops, paged, chunk, monkeypatch):
    """BEAMDEC_CTC_SEAL (unset / =cluster: up to 16 rows sealed by a cluster of 8 blocks per row on sm_90; =block: one
    1,024-thread block per row) writes the same checksum words: every state word equal after every chunk for one state
    of 5 rows (clusters) and of 20 (one block per row either way), a corrupted row left alone by both, separate states
    in one batched call (5 streams: clusters; 20: blocks), rows sealed by one form decoded and finalized under the
    other, and a flipped token word (only the checksum sees it) refused after either form's seal."""
    V, T = 90, 230
    cfg = CtcBeamSearchConfig(beam_size=10, nbest=3, paged=paged, page_size=4, max_seq_len=256)
    dec = CtcStreamingDecoder(cfg)
    monkeypatch.delenv("BEAMDEC_CTC_CHECK_THREADS", raising=False)
    for rows, batched in ((5, (5,)), (20, (20,))):
        lp = random_log_probs(rows, T, V, seed=chunk + 3 * paged + rows).cuda()
        _states_equal_under_switch(monkeypatch, "BEAMDEC_CTC_SEAL", ("cluster", "block"), dec, lp, chunk, batched)
    lp = random_log_probs(2, 48, V, seed=9).cuda()
    mixed = CtcBeamSearchConfig(beam_size=6, nbest=2, max_seq_len=2048, blank_skip_threshold=1.0, paged=paged)
    mdec = CtcStreamingDecoder(mixed)
    st = mdec.create_state(2, V, device="cuda")
    for i, form in enumerate(("cluster", "block", "cluster")):
        monkeypatch.setenv("BEAMDEC_CTC_SEAL", form)
        mdec.decode_chunk(lp[:, 16 * i:16 * (i + 1)], state=st)
    assert_results_match(mdec.finalize(st), ctc_beam_search(lp.cpu(), torch.tensor([48, 48]), mixed))
    for form in ("cluster", "block"):
        monkeypatch.setenv("BEAMDEC_CTC_SEAL", form)
        st = mdec.create_state(2, V, device="cuda")
        mdec.decode_chunk(lp[:, :16], state=st)
        st.tensor[1, st.tensor.shape[1] - 1] ^= 1
        with pytest.raises(ValueError, match="row 1: .*checksum"):
            mdec.finalize(st)


@pytest.mark.parametrize("name,bad", [("BEAMDEC_CTC_CHECK", "fuse"), ("BEAMDEC_CTC_FILL", "kernel"),
                                      ("BEAMDEC_CTC_ZERO", "pre-pass"), ("BEAMDEC_CTC_READBACK", "pin"),
                                      ("BEAMDEC_CTC_PDL", "2"), ("BEAMDEC_CTC_SEAL", "blocks")])
def test_gpu_launch_saver_switches_are_checked(ops, name, bad, monkeypatch):
    """Session 27's switches take their listed values (or unset); anything else is a one-line error from the op that
    reads it (decode_chunk for the check, the offline call for the fill, the zeroing and the read-back)."""
    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=4, nbest=2))
    st = dec.create_state(1, 7, device="cuda")
    lp = torch.randn(1, 5, 7).log_softmax(-1).cuda()
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=f"{name} must be one of .*got '{bad}'") as e:
        if name in ("BEAMDEC_CTC_CHECK", "BEAMDEC_CTC_SEAL"):
            dec.decode_chunk(lp, state=st)
        else:
            ctc_beam_search(lp, torch.tensor([5]).cuda(), dec.config)
    assert len(str(e.value).strip().splitlines()) == 1


_POLLUTION = 123456789  # no token id, length, status word or plausible state word


def _pollute_allocator():
    """Leaves freed blocks of _POLLUTION in torch's caching allocator, small pool (< 1 MiB requests, 2 MiB segments)
    and large pool alike, so an output or state the op does not write in full shows it."""
    xs = [torch.full((1 << k,), _POLLUTION, dtype=torch.int32, device="cuda") for k in range(4, 23) for _ in range(3)]
    del xs


# the earlier launches (a fill, a memset), each saver alone, and both (unset: the defaults since session 28)
_EARLIER_LAUNCHES = {"BEAMDEC_CTC_FILL": "torch", "BEAMDEC_CTC_ZERO": "memset"}
_FEWER_LAUNCHES = ({"BEAMDEC_CTC_FILL": "finalize", "BEAMDEC_CTC_ZERO": "memset"},
                   {"BEAMDEC_CTC_FILL": "torch", "BEAMDEC_CTC_ZERO": "prepass"}, {})


@pytest.mark.parametrize("T", [0, 37, 150])  # 150: two tiles (the zeroing rides on the first)
@pytest.mark.parametrize("paged", [False, True])
def test_gpu_fewer_launch_forms_equal_the_earlier_launches(ops, paged, T, monkeypatch):
    """BEAMDEC_CTC_FILL=finalize (the finalize kernel writes the -1 padding of the token block itself) and
    BEAMDEC_CTC_ZERO=prepass (the offline rows zeroed by the first tile's pre-pass launch, not a memset before it),
    each alone and both (unset: the defaults), give the raw offline op, the packed op and the streaming finalize
    exactly the outputs of the earlier launches (=torch, =memset: a fill and a memset before the kernels), past every
    length too, over an allocator left full of a sentinel: empty rows (length 0: one live beam for nbest 4), T = 0, two
    tiles, the one-warp kernel and the block kernel (where the zeroing falls back to a memset), flat and paged."""
    lp = random_log_probs(5, max(T, 1), 23, seed=12 + T).cuda()[:, :T]
    lengths = torch.tensor([T, 0, min(T, 1), T // 2, T], dtype=torch.int32).cuda()
    for beam, nbest in ((4, 4), (40, 3)):
        cfg = CtcBeamSearchConfig(beam_size=beam, nbest=nbest, max_seq_len=T + 2 - T % 2, paged=paged, page_size=4)
        store = cfg.storage_args(cfg.max_seq_len)
        args = (beam, 0, 0.95, nbest, cfg.max_seq_len, *store)
        out = []
        for form in (_EARLIER_LAUNCHES,) + _FEWER_LAUNCHES:
            for k in ("BEAMDEC_CTC_FILL", "BEAMDEC_CTC_ZERO"):
                monkeypatch.delenv(k, raising=False)
            for k, v in form.items():
                monkeypatch.setenv(k, v)
            _pollute_allocator()
            got = [x.clone() for x in ops.ctc_decode_offline(lp, lengths, *args)]
            _pollute_allocator()
            got.append(ops.ctc_decode_offline_packed(lp, lengths, *args, 4).clone())
            if T:
                dec = CtcStreamingDecoder(cfg)
                st = dec.create_state(5, 23, device="cuda")
                dec.decode_chunk(lp[:, :9], state=st)
                _pollute_allocator()
                got += [x.clone() for x in ops.ctc_finalize(st.tensor, beam, 0, 23, nbest, cfg.max_seq_len, *store)]
            out.append([x.view(torch.int32) if x.dtype == torch.float32 else x for x in got])
        for form, got in zip(_FEWER_LAUNCHES, out[1:]):
            for a, b in zip(out[0], got):
                assert torch.equal(a, b), form
        assert int((out[3][0] == _POLLUTION).sum()) == 0 and int((out[3][0] == -1).sum()) > 0


def test_gpu_pinned_read_back_equals_pageable(ops, monkeypatch):
    """BEAMDEC_CTC_READBACK=pinned (the public call's one copy into a page-locked tensor, then a stream sync) returns
    the pageable copy's results; each call's result owns its buffer (an earlier result is unchanged by a later call)."""
    lp = random_log_probs(6, 50, 40, seed=21).cuda()
    lengths = torch.tensor([50, 0, 1, 30, 50, 7]).cuda()
    cfg = CtcBeamSearchConfig(beam_size=8, nbest=3, blank_skip_threshold=0.95)
    want = ctc_beam_search(lp, lengths, cfg)
    monkeypatch.setenv("BEAMDEC_CTC_READBACK", "pinned")
    got = ctc_beam_search(lp, lengths, cfg)
    kept = (got.scores.clone(), got.lengths.clone())
    ctc_beam_search(random_log_probs(6, 50, 40, seed=22).cuda(), lengths, cfg)
    assert got.tokens == want.tokens and torch.equal(got.scores, want.scores) and torch.equal(got.lengths, want.lengths)
    assert torch.equal(got.scores, kept[0]) and torch.equal(got.lengths, kept[1])
    assert torch.equal(got.hit_max_seq_len, want.hit_max_seq_len)
