"""Shared helpers of the CTC tests: brute force over alignments, random/adversarial inputs, comparisons."""
from __future__ import annotations

import itertools
import math

import torch


def random_log_probs(B: int, T: int, V: int, *, seed: int = 0, peaky: float = 3.0, blank: int = 0) -> torch.Tensor:
    """(B, T, V) log-softmax of scaled Gaussians: peaky enough to look like a CTC model's output."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, V, generator=g) * peaky
    x[..., blank] += 1.5  # blank somewhat dominant, as in real models
    return x.log_softmax(-1)


def collapse(path, blank: int) -> tuple:
    out, prev = [], None
    for c in path:
        if c != prev and c != blank:
            out.append(c)
        prev = c
    return tuple(out)


def brute_force(lp: torch.Tensor, blank: int) -> list[tuple[tuple, float]]:
    """Every collapsed prefix with its exact log posterior (sum over all alignments), best first."""
    lp64 = lp.double().tolist()
    T = len(lp64)
    V = len(lp64[0]) if T else 0
    acc: dict[tuple, float] = {}
    if T == 0:
        return [((), 0.0)]
    for path in itertools.product(range(V), repeat=T):
        s = sum(lp64[t][c] for t, c in enumerate(path))
        if s == -math.inf:
            continue
        key = collapse(path, blank)
        a = acc.get(key, -math.inf)
        m = max(a, s)
        acc[key] = m + math.log(math.exp(a - m) + math.exp(s - m))
    return sorted(acc.items(), key=lambda kv: -kv[1])


def skipped_equivalent(lp: torch.Tensor, blank: int, threshold: float) -> torch.Tensor:
    """The frame sequence blank skipping decodes: each run of skipped frames becomes one certain blank."""
    log_thr = math.log(threshold) if threshold < 1.0 else math.inf
    frames, prev_skipped = [], False
    certain = torch.full((lp.shape[1],), -math.inf, dtype=lp.dtype)
    certain[blank] = 0.0
    for t in range(lp.shape[0]):
        if float(lp[t, blank]) > log_thr:
            if not prev_skipped:
                frames.append(certain)
            prev_skipped = True
        else:
            frames.append(lp[t])
            prev_skipped = False
    return torch.stack(frames) if frames else lp[:0]


def assert_results_match(got, ref, *, atol: float = 1e-4, rtol: float = 1e-5, top1_only: bool = False) -> None:
    """got vs ref CtcResult: scores equal within tolerance; tokens equal except between exact/near ties."""
    B = len(ref.tokens)
    assert len(got.tokens) == B
    for b in range(B):
        gs, rs = got.scores[b].double(), ref.scores[b].double()
        n = 1 if top1_only else len(gs)
        finite_g, finite_r = torch.isfinite(gs[:n]), torch.isfinite(rs[:n])
        assert torch.equal(finite_g, finite_r), f"row {b}: finite hypotheses differ {gs[:n]} vs {rs[:n]}"
        torch.testing.assert_close(gs[:n][finite_g], rs[:n][finite_r], atol=atol, rtol=rtol,
                                   msg=lambda m: f"row {b}: scores differ: {m}")
        for i in range(n):
            if not bool(finite_g[i]) or got.tokens[b][i] == ref.tokens[b][i]:
                continue
            # allowed only when tied: the same hypothesis appears in ref at an (almost) equal score
            tol = atol + rtol * abs(float(rs[i]))
            tied = [j for j in range(len(rs)) if abs(float(rs[j]) - float(gs[i])) <= tol]
            assert any(ref.tokens[b][j] == got.tokens[b][i] for j in tied) or len(tied) > 1, (
                f"row {b} rank {i}: tokens {got.tokens[b][i]} vs {ref.tokens[b][i]} (scores {gs[i]} / {rs[i]})"
            )
