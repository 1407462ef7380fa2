"""The fused CTC prefix beam search + token LM + phrase boosting kernel (decoders/include/ctc_lm_kernels.cuh,
`CtcLmConfig(kernel="fused")`) against the batched torch path and the reference: here its CPU op (the kernel's
own code, every phase's items run first-to-last and last-to-first), under the `gpu` marker the CUDA kernel; random
and adversarial inputs (odd sizes, beam > V, empty and long inputs, zero lengths, boosting, ties, random ARPAs with
positive back-offs and <unk> tokens, shared and global candidate buffers, block sizes)."""
from __future__ import annotations

import contextlib
import math
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decoders import ctc_lm as mod
from decoders.ctc_lm import (
    CtcLmConfig,
    LexiconWordLM,
    NgramLM,
    PhraseBoost,
    ctc_lm_beam_search,
    read_arpa,
    reference_prefix_beam_search,
)
from tests.ctc_helpers import random_log_probs
from tests.test_ctc_lm import _random_boost, char_lm, word_lm  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def fused_options(reverse: bool = False, threads: int = 0):
    old = mod._FUSED_REVERSE_ITEMS, mod._FUSED_BLOCK_THREADS
    mod._FUSED_REVERSE_ITEMS, mod._FUSED_BLOCK_THREADS = reverse, threads
    try:
        yield
    finally:
        mod._FUSED_REVERSE_ITEMS, mod._FUSED_BLOCK_THREADS = old


def fused(lp, lengths, cfg: CtcLmConfig, reverse=False, threads=0, **kw):
    cfg = CtcLmConfig(**{**cfg.__dict__, "kernel": "fused"})
    with fused_options(reverse, threads):
        return ctc_lm_beam_search(lp, lengths, cfg, **kw)


def torch_path(lp, lengths, cfg: CtcLmConfig, **kw):
    return ctc_lm_beam_search(lp, lengths, CtcLmConfig(**{**cfg.__dict__, "kernel": "torch"}), **kw)


def assert_same(got, want, atol=1e-4, what=""):
    assert got.tokens == want.tokens, what
    torch.testing.assert_close(got.scores, want.scores, atol=atol, rtol=1e-5, msg=lambda m: f"{what}: {m}")


def random_arpa(path: Path, V: int, blank: int, seed: int, n2: int, n3: int, unk_every: int = 0) -> NgramLM:
    """A random order-3 ARPA over columns t0..t{V-1} (blank excluded): random log-probs and back-offs (some
    positive), random bigrams and trigrams (each trigram's history a bigram); with `unk_every`, every such column
    has no unigram and scores as <unk>."""
    rng = random.Random(seed)
    sym = [None if c == blank else f"t{c}" for c in range(V)]
    words = [s for i, s in enumerate(sym) if s is not None and not (unk_every and i % unk_every == 1)]
    words = words or [s for s in sym if s is not None][:1]
    uni = words + ["<s>", "</s>"] + (["<unk>"] if unk_every else [])
    bi = set()
    n2 = min(n2, (len(words) + 1) ** 2)
    while len(bi) < n2:
        bi.add((rng.choice(words + ["<s>"]), rng.choice(words + ["</s>"])))
    bi = sorted(bi)
    hist = [b for b in bi if b[1] != "</s>"]
    tri = set()
    n3 = min(n3, len(hist) * (len(words) + 1))
    while hist and len(tri) < n3:
        h = rng.choice(hist)
        tri.add(h + (rng.choice(words + ["</s>"]),))
    tri = sorted(tri)

    def lp():
        return f"{rng.uniform(-4.0, -0.05):.4f}"

    def bow():
        return f"{rng.uniform(-1.0, 0.3):.4f}"

    lines = ["\\data\\", f"ngram 1={len(uni)}", f"ngram 2={len(bi)}", f"ngram 3={len(tri)}", "", "\\1-grams:"]
    for w in uni:
        lines.append(f"{'-99' if w == '<s>' else lp()}\t{w}" + ("" if w == "</s>" else f"\t{bow()}"))
    lines += ["", "\\2-grams:"] + [f"{lp()}\t{a} {b}" + ("" if b == "</s>" else f"\t{bow()}") for a, b in bi]
    lines += ["", "\\3-grams:"] + [f"{lp()}\t{' '.join(t)}" for t in tri] + ["", "\\end\\", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return NgramLM(read_arpa(path), sym)


def random_phrases(V: int, blank: int, rows: int, seed: int, max_len: int = 3) -> list:
    rng = random.Random(seed)
    ids = [c for c in range(V) if c != blank]
    out = []
    for _ in range(rows):
        d = {}
        for _ in range(rng.randint(0, 4)):
            d[tuple(rng.choice(ids) for _ in range(rng.randint(1, max_len)))] = round(rng.uniform(-1.0, 3.0), 2)
        out.append(d)
    return out


# ----------------------------------------------------------------------------------------------- CPU tests
@pytest.mark.parametrize("blank", ["first", "last"])
@pytest.mark.parametrize("beam", [1, 3, 6])
@pytest.mark.parametrize("threshold", [1.0, 0.6, 0.0])
def test_fused_equals_torch_path_and_reference(char_lm, blank, beam, threshold):
    """The kernel's code (CPU op, both item orders) equals the torch batched path and the reference, with the LM,
    boosting, both and neither, zero lengths and blank skipping (0.0: every frame skipped)."""
    tokens, _, lm = char_lm[blank]
    V, b = tokens.vocab_size, tokens.blank_id
    rng = random.Random(beam * 7 + int(threshold * 10))
    B, T = 3, 17
    lengths = torch.tensor([17, 9, 0])
    cfg = CtcLmConfig(beam_size=beam, lm_weight=0.8, insertion_bonus=0.4, blank_id=b, blank_skip_threshold=threshold,
                      nbest=min(2, beam))
    for seed in range(3):
        lp = random_log_probs(B, T, V, seed=seed + 10 * beam, peaky=2.5, blank=b)
        rows = _random_boost(tokens, rng, B)
        for kwargs in ({}, {"lm": lm}, {"boost": PhraseBoost(rows, V, b)},
                       {"lm": lm, "boost": PhraseBoost(rows, V, b)}):
            ref = reference_prefix_beam_search(lp, lengths, cfg, **kwargs)
            want = torch_path(lp, lengths, cfg, **kwargs)
            for reverse in (False, True):
                got = fused(lp, lengths, cfg, reverse=reverse, **kwargs)
                assert_same(got, want, what=f"torch path, {seed} {list(kwargs)} reverse={reverse}")
                assert got.tokens == ref.tokens, (seed, list(kwargs))
                torch.testing.assert_close(got.scores, ref.scores, atol=1e-3, rtol=1e-5)


@pytest.mark.parametrize("V,beam", [(29, 10), (2, 40), (3, 128), (57, 33)])
def test_fused_on_random_arpas_and_boosts_equals_torch_path(tmp_path, V, beam):
    """Random ARPAs (positive back-offs, <unk> columns), overlapping / negative phrase boosts, beam > V, beam
    > 32 (several merge-mask words), odd V; both item orders agree bitwise (no phase reads what another item of
    the same phase writes)."""
    for blank in (0, V - 1):
        lm = random_arpa(tmp_path / f"r{blank}.arpa", V, blank, seed=V + beam + blank, n2=4 * V, n3=8 * V,
                         unk_every=5)
        B, T = 3, 23
        lp = random_log_probs(B, T, V, seed=V * beam + blank, peaky=2.0, blank=blank)
        lengths = torch.tensor([23, 1, 14])
        rows = random_phrases(V, blank, B, seed=beam)
        cfg = CtcLmConfig(beam_size=beam, lm_weight=0.6, insertion_bonus=-0.3, blank_id=blank,
                          blank_skip_threshold=0.9, nbest=min(4, beam))
        for kwargs in ({"lm": lm}, {"lm": lm, "boost": PhraseBoost(rows, V, blank)}):
            want = torch_path(lp, lengths, cfg, **kwargs)
            got = fused(lp, lengths, cfg, **kwargs)
            back = fused(lp, lengths, cfg, reverse=True, **kwargs)
            assert got.tokens == back.tokens and torch.equal(got.scores, back.scores)
            assert_same(got, want, what=f"V={V} beam={beam} blank={blank} {list(kwargs)}")


def test_fused_config_variants_equal_torch_path(char_lm):
    """lm_weight 0 (the LM is left out), lm_eos off, a negative insertion bonus, nbest = beam, float16 and float64
    inputs, columns that are -inf everywhere."""
    tokens, _, lm = char_lm["last"]
    V, b = tokens.vocab_size, tokens.blank_id
    lp = random_log_probs(3, 30, V, seed=3, peaky=2.0, blank=b)
    lp_inf = lp.clone()
    lp_inf[:, :, 1] = -math.inf
    lengths = torch.tensor([30, 30, 12])
    rows = _random_boost(tokens, random.Random(1), 3)
    for cfg_kw in ({"lm_weight": 0.0}, {"lm_eos": False}, {"insertion_bonus": -2.0}, {"nbest": 5},
                   {"blank_skip_threshold": 0.5}):
        cfg = CtcLmConfig(**{"beam_size": 5, "blank_id": b, **cfg_kw})
        for x in (lp, lp_inf, lp.half(), lp.double()):
            for kwargs in ({"lm": lm}, {"lm": lm, "boost": PhraseBoost(rows, V, b)}):
                assert_same(fused(x, lengths, cfg, **kwargs), torch_path(x, lengths, cfg, **kwargs),
                            what=f"{cfg_kw} {x.dtype} {list(kwargs)}")


def test_fused_empty_inputs():
    """B = 0, T = 0, every length 0: the empty prefix with its final score (LM end + nothing else)."""
    V = 5
    lm_rows = [{(1, 2): 1.0}]
    cfg = CtcLmConfig(beam_size=3, nbest=2, blank_id=0)
    for B, T in ((0, 4), (1, 0), (2, 6)):
        lp = random_log_probs(B, T, V, seed=1) if B * T else torch.zeros(B, T, V)
        lengths = torch.zeros(B, dtype=torch.int64)
        boost = PhraseBoost(lm_rows * B, V, 0) if B else None
        want = torch_path(lp, lengths, cfg, boost=boost)
        got = fused(lp, lengths, cfg, boost=boost)
        assert_same(got, want, what=f"B={B} T={T}")
        assert all(r[0] == [] for r in got.tokens)


@pytest.mark.parametrize("levels", [1, 2, 3])
def test_fused_ties_follow_the_reference_order(char_lm, levels):
    """Log-probs on a few levels (levels = 1: every column equal): exact ties everywhere. The kernel ranks equal
    candidates as the reference does (stays before extensions, lower beam, lower token), so on rows whose ties
    are exact in float32 and float64 alike (all columns equal) it returns the reference's N-best exactly;
    torch.topk's order among ties is unspecified (the torch path may differ there)."""
    tokens, _, lm = char_lm["last"]
    V, b = tokens.vocab_size, tokens.blank_id
    g = torch.Generator().manual_seed(levels)
    lp = torch.randint(0, levels, (2, 12, V), generator=g).float().mul(-2.0)
    lp[0] = 0.0
    lp = lp - torch.logsumexp(lp, -1, keepdim=True)
    lengths = torch.tensor([12, 12])
    cfg = CtcLmConfig(beam_size=4, nbest=4, blank_id=b, insertion_bonus=0.0, lm_weight=0.5, blank_skip_threshold=1.0)
    for kwargs in ({}, {"lm": lm}):
        ref = reference_prefix_beam_search(lp, lengths, cfg, **kwargs)
        got = fused(lp, lengths, cfg, **kwargs)
        back = fused(lp, lengths, cfg, reverse=True, **kwargs)
        assert got.tokens == back.tokens and torch.equal(got.scores, back.scores)
        assert got.tokens[0] == ref.tokens[0], list(kwargs)
        torch.testing.assert_close(got.scores[0], ref.scores[0], atol=1e-3, rtol=1e-5)


def test_fused_long_input_equals_reference(char_lm):
    """T = 1000 frames (long prefixes, many merges), and a zero-length row beside it."""
    tokens, _, lm = char_lm["first"]
    V, b = tokens.vocab_size, tokens.blank_id
    lp = random_log_probs(2, 1000, V, seed=11, peaky=3.0, blank=b)
    lengths = torch.tensor([1000, 0])
    rows = [{(1, 2): 1.5, (2,): 0.5}, {(1,): 1.0}]
    cfg = CtcLmConfig(beam_size=4, lm_weight=0.5, insertion_bonus=0.5, blank_id=b, nbest=2)
    ref = reference_prefix_beam_search(lp, lengths, cfg, lm=lm, boost=PhraseBoost(rows, V, b))
    got = fused(lp, lengths, cfg, lm=lm, boost=PhraseBoost(rows, V, b))
    assert got.tokens == ref.tokens
    torch.testing.assert_close(got.scores, ref.scores, atol=2e-2, rtol=1e-5)


def test_kernel_dispatch_and_errors(char_lm, word_lm, monkeypatch):
    tokens, _, lm = char_lm["last"]
    V, b = tokens.vocab_size, tokens.blank_id
    lp = random_log_probs(1, 8, V, seed=0, blank=b)
    lengths = torch.tensor([8])
    with pytest.raises(ValueError, match="kernel must be one of"):
        CtcLmConfig(kernel="cuda")
    calls = []
    real = mod._fused_search
    monkeypatch.setattr(mod, "_fused_search", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    ctc_lm_beam_search(lp, lengths, CtcLmConfig(blank_id=b), lm=lm)  # auto on the CPU: the torch path
    assert not calls
    ctc_lm_beam_search(lp, lengths, CtcLmConfig(blank_id=b, kernel="fused"), lm=lm)
    assert calls == [1]
    from recipes.tokens import TokenSet

    arpa, words = word_lm
    wtokens = TokenSet.from_chars("ab", blank="last")
    wlm = LexiconWordLM.from_files(arpa, {w: [wtokens.encode(w)] for w in words}, wtokens.tokens, wtokens.blank_id,
                                   "char", lm_weight=0.9)
    wlp = random_log_probs(1, 8, wtokens.vocab_size, seed=0, blank=wtokens.blank_id)
    with pytest.raises(ValueError, match="does not cover LexiconWordLM"):
        ctc_lm_beam_search(wlp, lengths, CtcLmConfig(blank_id=wtokens.blank_id, kernel="fused"), lm=wlm)
    # auto with the word LM stays on the torch path (on any device)
    assert not mod._use_fused(CtcLmConfig(), wlm, None, torch.device("cuda"))
    assert mod._use_fused(CtcLmConfig(), lm, None, torch.device("cuda")) == mod.FUSED_VERIFIED_ON_GPU
    monkeypatch.setattr(mod, "FUSED_VERIFIED_ON_GPU", True)  # once verified: auto picks it for the token LM on CUDA
    assert mod._use_fused(CtcLmConfig(), lm, None, torch.device("cuda"))
    assert not mod._use_fused(CtcLmConfig(), lm, None, torch.device("cpu"))
    assert not mod._use_fused(CtcLmConfig(kernel="torch"), lm, None, torch.device("cuda"))
    with pytest.raises(ValueError, match="rows of phrases for a batch of 1"):
        fused(lp, lengths, CtcLmConfig(blank_id=b), boost=PhraseBoost([{}, {}], V, b))
    with pytest.raises(ValueError, match="NaN"):
        bad = lp.clone()
        bad[0, 3, 2] = math.nan
        fused(bad, lengths, CtcLmConfig(blank_id=b), lm=lm)


def test_op_rejects_bad_arguments():
    from decoders._ext import ops

    lp = torch.zeros(1, 3, 4)
    e_i, e_f = torch.zeros(0, dtype=torch.int32), torch.zeros(0)
    empty = [e_i, e_i, e_f, e_i, e_i, e_f, e_i, e_i, e_i, e_i, e_i, e_f, e_f, e_i]
    args = dict(beam=2, blank=0, skip_mode=0, log_thr=0.0, bonus=0.0, lm_weight_value=0.0, lm_eos=True,
                bos_state=0, eos_label=0, nbest=1, block_threads=0, reverse_items=False)
    lengths = torch.tensor([3])
    ops().ctc_lm_decode(lp, lengths, *empty, **args)
    for bad, match in (({"beam": 129}, "beam must be"), ({"nbest": 3}, "nbest must be"),
                       ({"blank": 4}, "blank must be"), ({"block_threads": 33}, "block_threads")):
        with pytest.raises(ValueError, match=match):
            ops().ctc_lm_decode(lp, lengths, *empty, **{**args, **bad})
    with pytest.raises(ValueError, match="lengths must be"):
        ops().ctc_lm_decode(lp, lengths.int(), *empty, **args)
    with pytest.raises(ValueError, match="log_probs must be contiguous float32"):
        ops().ctc_lm_decode(lp.double(), lengths, *empty, **args)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_fused_kernel_compiles_with_nvcc(tmp_path):
    """The torch-free launcher + kernel header build with plain nvcc for sm_90 (this machine has no GPU: the
    compile check catches what the CPU op cannot, e.g. device-only intrinsics)."""
    cmd = ["nvcc", "-std=c++17", "-arch=sm_90", "-O3", "--expt-relaxed-constexpr", "-Xptxas", "-warn-spills", "-c",
           str(REPO / "decoders/csrc/ctc_lm_launch.cu"), "-I", str(REPO / "decoders/include"),
           "-o", str(tmp_path / "ctc_lm_launch.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


# ----------------------------------------------------------------------------------------------- GPU tests
@pytest.mark.gpu
@pytest.mark.parametrize("blank", ["first", "last"])
def test_gpu_fused_equals_reference(char_lm, blank):
    tokens, _, lm = char_lm[blank]
    V, b = tokens.vocab_size, tokens.blank_id
    rng = random.Random(5)
    for beam, T, thr in ((1, 1, 1.0), (4, 17, 0.7), (7, 60, 1.0), (3, 200, 0.9), (12, 40, 0.0)):
        B = 3
        lp = random_log_probs(B, T, V, seed=beam + T, peaky=2.5, blank=b)
        lengths = torch.tensor([T, max(T // 2, 0), 0])
        rows = _random_boost(tokens, rng, B)
        cfg = CtcLmConfig(beam_size=beam, lm_weight=0.8, insertion_bonus=0.4, blank_id=b, blank_skip_threshold=thr,
                          nbest=min(beam, 3))
        for kwargs in ({}, {"lm": lm}, {"boost": PhraseBoost(rows, V, b)}, {"lm": lm, "boost": PhraseBoost(rows, V, b)}):
            ref = reference_prefix_beam_search(lp, lengths, cfg, **kwargs)
            got = fused(lp.cuda(), lengths.cuda(), cfg, **kwargs)
            assert got.tokens == ref.tokens, (beam, T, list(kwargs))
            torch.testing.assert_close(got.scores, ref.scores, atol=1e-3, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("V,beam", [(2, 1), (2, 128), (29, 10), (29, 33), (1025, 10), (1025, 33), (5000, 10),
                                    (5000, 128)])
def test_gpu_fused_equals_cpu_fused_and_torch_path(tmp_path, V, beam):
    """CUDA kernel == its CPU op (same code and float32 operations; exp/log may differ in the last bit) and ==
    the torch path on the GPU; V 1025 / 5000 and beam >= 33 put the candidates in global memory."""
    blank = V - 1 if V % 2 else 0
    lm = random_arpa(tmp_path / "r.arpa", V, blank, seed=V + beam, n2=min(4 * V, 6000), n3=min(8 * V, 12000),
                     unk_every=7)
    B, T = 3, 17
    lp = random_log_probs(B, T, V, seed=V * 1000 + beam, peaky=3.0, blank=blank)
    lengths = torch.tensor([T, 1, 11])
    rows = random_phrases(V, blank, B, seed=V + beam)
    cfg = CtcLmConfig(beam_size=beam, nbest=min(beam, 4), lm_weight=0.5, insertion_bonus=1.0, blank_id=blank,
                      blank_skip_threshold=0.9)
    for kwargs in ({"lm": lm}, {"lm": lm, "boost": PhraseBoost(rows, V, blank)}):
        cpu = fused(lp, lengths, cfg, **kwargs)
        gpu = fused(lp.cuda(), lengths.cuda(), cfg, **kwargs)
        assert_same(gpu, cpu, what=f"V={V} beam={beam} {list(kwargs)}")
        tp = torch_path(lp.cuda(), lengths.cuda(), cfg, **kwargs)
        assert_same(gpu, tp, atol=1e-3, what=f"torch path V={V} beam={beam} {list(kwargs)}")
        lm.to("cpu")


@pytest.mark.gpu
def test_gpu_block_sizes_give_identical_results(char_lm):
    """32..1024 threads per block: bitwise identical results (only the item-to-thread mapping changes; a race
    between items of one phase would show here)."""
    tokens, _, lm = char_lm["last"]
    V, b = tokens.vocab_size, tokens.blank_id
    lp = random_log_probs(5, 120, V, seed=8, peaky=2.0, blank=b).cuda()
    lengths = torch.tensor([120, 77, 0, 1, 120]).cuda()
    rows = _random_boost(tokens, random.Random(8), 5)
    for beam in (3, 10, 40, 128):
        cfg = CtcLmConfig(beam_size=beam, nbest=min(beam, 3), lm_weight=0.7, blank_id=b, blank_skip_threshold=0.95)
        base = fused(lp, lengths, cfg, lm=lm, boost=PhraseBoost(rows, V, b))
        for threads in (32, 64, 128, 512, 1024):
            got = fused(lp, lengths, cfg, threads=threads, lm=lm, boost=PhraseBoost(rows, V, b))
            assert got.tokens == base.tokens and torch.equal(got.scores, base.scores), (beam, threads)


@pytest.mark.gpu
def test_gpu_fused_long_and_large_batch_equal_cpu_fused(tmp_path):
    """T = 1500 (long prefixes), and B = 200 at V = 129 (the benchmark's shape): the GPU kernel equals its CPU op
    and, on all but a near-tie row or two, the torch path."""
    V, blank = 129, 128
    lm = random_arpa(tmp_path / "r.arpa", V, blank, seed=1, n2=2000, n3=4000)
    lp = random_log_probs(2, 1500, V, seed=2, peaky=4.0, blank=blank)
    lengths = torch.tensor([1500, 1333])
    cfg = CtcLmConfig(beam_size=10, lm_weight=0.5, insertion_bonus=1.0, blank_id=blank, nbest=1)
    assert_same(fused(lp.cuda(), lengths.cuda(), cfg, lm=lm), fused(lp, lengths, cfg, lm=lm), atol=1e-2)
    lp = random_log_probs(200, 150, V, seed=3, peaky=4.0, blank=blank)
    lengths = torch.randint(0, 151, (200,), generator=torch.Generator().manual_seed(0))
    gpu = fused(lp.cuda(), lengths.cuda(), cfg, lm=lm)
    cpu = fused(lp, lengths, cfg, lm=lm)
    assert sum(a == c for a, c in zip(gpu.tokens, cpu.tokens)) >= 199
    tp = torch_path(lp.cuda(), lengths.cuda(), cfg, lm=lm)
    lm.to("cpu")
    assert sum(a == c for a, c in zip(gpu.tokens, tp.tokens)) >= 198
    torch.testing.assert_close(gpu.scores, tp.scores, atol=1e-3, rtol=1e-5)


@pytest.mark.gpu
def test_gpu_fused_ties_and_empty_inputs(char_lm):
    tokens, _, lm = char_lm["last"]
    V, b = tokens.vocab_size, tokens.blank_id
    lp = torch.full((2, 12, V), -math.log(V))
    cfg = CtcLmConfig(beam_size=4, nbest=4, blank_id=b, insertion_bonus=0.0, blank_skip_threshold=1.0)
    for kwargs in ({}, {"lm": lm}):
        ref = reference_prefix_beam_search(lp, torch.tensor([12, 5]), cfg, **kwargs)
        got = fused(lp.cuda(), torch.tensor([12, 5]).cuda(), cfg, **kwargs)
        assert got.tokens == ref.tokens
    for B, T in ((0, 4), (1, 0), (2, 6)):
        x = random_log_probs(B, T, V, seed=1, blank=b) if B * T else torch.zeros(B, T, V)
        lengths = torch.zeros(B, dtype=torch.int64)
        assert_same(fused(x.cuda(), lengths.cuda(), cfg, lm=lm), fused(x, lengths, cfg, lm=lm), what=f"{B} {T}")


@pytest.mark.gpu
def test_gpu_auto_uses_the_fused_kernel_once_verified(char_lm, monkeypatch):
    """kernel='auto' on CUDA runs the fused kernel once FUSED_VERIFIED_ON_GPU is set (this file's gpu tests passed on
    a GPU); before that, the torch path."""
    tokens, _, lm = char_lm["last"]
    V, b = tokens.vocab_size, tokens.blank_id
    calls = []
    real = mod._fused_search
    monkeypatch.setattr(mod, "_fused_search", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    lp = random_log_probs(2, 30, V, seed=4, blank=b).cuda()
    ctc_lm_beam_search(lp, torch.tensor([30, 20]).cuda(), CtcLmConfig(blank_id=b), lm=lm)
    assert calls == ([1] if mod.FUSED_VERIFIED_ON_GPU else [])


SANITIZER_SCRIPT = """
import random, torch
from decoders.ctc_lm import CtcLmConfig, NgramLM, PhraseBoost, ctc_lm_beam_search
from tests.test_ctc_lm_fused import random_arpa, random_phrases
from tests.ctc_helpers import random_log_probs
from pathlib import Path
import tempfile
d = Path(tempfile.mkdtemp())
for V, beam in ((29, 5), (1025, 33)):
    blank = V - 1
    lm = random_arpa(d / "r.arpa", V, blank, seed=V, n2=3 * V, n3=6 * V, unk_every=5)
    lp = random_log_probs(3, 20, V, seed=V, peaky=2.0, blank=blank).cuda()
    boost = PhraseBoost(random_phrases(V, blank, 3, seed=V), V, blank)
    cfg = CtcLmConfig(beam_size=beam, nbest=2, blank_id=blank, blank_skip_threshold=0.9, kernel="fused")
    r = ctc_lm_beam_search(lp, torch.tensor([20, 7, 0]).cuda(), cfg, lm=lm, boost=boost)
    print(V, beam, r.scores.tolist())
torch.cuda.synchronize()
"""


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer not installed")
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_gpu_fused_kernel_is_clean_under_compute_sanitizer(tool):
    """memcheck: no out-of-bounds or misaligned access; racecheck: no shared-memory hazard between the kernel's
    phases (shared and global candidate buffers both run)."""
    from decoders._ext import load_extension

    load_extension()  # built outside the sanitizer
    proc = subprocess.run(["compute-sanitizer", "--tool", tool, "--error-exitcode", "3",
                           "--kernel-name", "kns=ctc_lm_decode_kernel", sys.executable, "-c", SANITIZER_SCRIPT],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "ERROR SUMMARY: 0 errors" in out or "RACECHECK SUMMARY: 0 hazards" in out, out[-2000:]
