"""A small end-to-end run of every CTC CUDA kernel variant, sized for `compute-sanitizer` on the GPU host:
the one-warp kernel and the block kernel at each width (128 / 256 / 512 threads: beam <= 16 / <= 32 / > 32),
flat and paged token storage (paged also under contention: many rows, page size 1, a pool far below the
default), float16 input, the opt-in shared-memory page metadata, streaming (single and batched streams) on
both kernels, and the streaming state check/seal kernels including a refused (corrupted) row, with the state check
fused (the default) and in its own launch (BEAMDEC_CTC_CHECK=separate), and the offline calls with the default
launches (the finalize kernel's own padding, the rows zeroed in the pre-pass launch) and the earlier ones
(BEAMDEC_CTC_FILL=torch BEAMDEC_CTC_ZERO=memset); the streaming calls with overlapped launches (the default) and plain
(BEAMDEC_CTC_PDL=0), the offline calls plain (the default) and overlapped (BEAMDEC_CTC_PDL=1); the streaming seal as
a cluster per row (the default on sm_90) and as one block per row (BEAMDEC_CTC_SEAL=block).
Every GPU result is compared with the CPU reference; any mismatch raises.

    compute-sanitizer --tool memcheck  python -m eval.bench.ctc_smoke
    compute-sanitizer --tool racecheck python -m eval.bench.ctc_smoke
    compute-sanitizer --tool synccheck python -m eval.bench.ctc_smoke
"""
from __future__ import annotations

import torch

from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder, ctc_beam_search
from eval.bench.common import environment

KERNELS = (("warp", 10), ("block", 10), ("block", 24), ("block", 40))  # one-warp; block 128 / 256 / 512


def _env(**kv):
    return environment(kv)


def _same(got, ref, what: str) -> None:
    """Top-1 tokens equal and every finite score within float tolerance (random inputs: no exact ties)."""
    top = [row[0] for row in got.tokens], [row[0] for row in ref.tokens]
    if top[0] != top[1]:
        raise AssertionError(f"{what}: top-1 tokens differ from the CPU reference: {top[0]} vs {top[1]}")
    g, r = got.scores.cpu().double(), ref.scores.cpu().double()
    fin = torch.isfinite(r)
    if not torch.equal(torch.isfinite(g), fin) or not torch.allclose(g[fin], r[fin], atol=1e-3, rtol=1e-5):
        raise AssertionError(f"{what}: scores differ from the CPU reference: {g} vs {r}")


def _streaming(lp, lp_cpu, check: str) -> None:
    """Single and batched streams on both kernels, flat and paged, against offline on the CPU; then a corrupted row
    refused by the state check (BEAMDEC_CTC_CHECK=`check`: its own launch, or fused into the first tile's pre-pass
    and decode): the decode kernels skip it, finalize names it."""
    for kernel in ("warp", "block"):
        for paged in (False, True):
            cfg = CtcBeamSearchConfig(beam_size=10, nbest=2, max_seq_len=64, paged=paged, page_size=4,
                                      blank_skip_threshold=1.0)
            ref = ctc_beam_search(lp_cpu, torch.tensor([40] * 3), cfg)
            dec = CtcStreamingDecoder(cfg)
            with _env(BEAMDEC_CTC_KERNEL=kernel, BEAMDEC_CTC_CHECK=check):
                st = dec.create_state(3, 50, device="cuda")
                singles = [dec.create_state(1, 50, device="cuda") for _ in range(3)]
                for t0 in range(0, 40, 16):
                    dec.decode_chunk(lp[:, t0:t0 + 16], state=st)
                    dec.decode_chunk_batch(lp[:, t0:t0 + 16], singles)
                _same(dec.finalize(st), ref, f"streaming {kernel} paged={paged} check={check}")
                for i, s in enumerate(singles):
                    got = dec.finalize(s)
                    if got.tokens[0] != ref.tokens[i]:
                        raise AssertionError(f"batched streaming {kernel} paged={paged} check={check} row {i} differs")
    print(f"streaming ok (check={check})")

    dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=10, nbest=2, max_seq_len=64))
    with _env(BEAMDEC_CTC_CHECK=check):
        st = dec.create_state(3, 50, device="cuda")
        dec.decode_chunk(lp[:, :16], state=st)
        st.tensor[1, 3] = 100000  # header word 3: active beams
        before = st.tensor[1].clone()
        dec.decode_chunk(lp[:, 16:32], state=st)
    if not torch.equal(st.tensor[1], before):
        raise AssertionError(f"a refused row was written (check={check})")
    try:
        dec.finalize(st)
    except ValueError as err:
        if "row 1" not in str(err) or "active beams" not in str(err):
            raise
        print("refused:", err)
    else:
        raise AssertionError("finalize accepted a corrupted state")


def main() -> None:
    g = torch.Generator().manual_seed(0)
    lp_cpu = (torch.randn(3, 40, 50, generator=g) * 3).log_softmax(-1)  # (B, T, V)
    lp = lp_cpu.cuda()
    lengths = torch.tensor([40, 13, 0])

    # offline: every kernel x storage
    for kernel, beam in KERNELS:
        with _env(BEAMDEC_CTC_KERNEL=kernel):
            for paged in (False, True):
                cfg = CtcBeamSearchConfig(beam_size=beam, nbest=3, paged=paged, page_size=4)
                got = ctc_beam_search(lp, lengths, cfg)
                _same(got, ctc_beam_search(lp_cpu, lengths, cfg), f"offline {kernel} beam {beam} paged={paged}")
                print(f"offline {kernel:5s} beam {beam:2d} paged={paged!s:5s}", got.tokens[0][0][:8])

    # paged under contention: many rows, 1-token pages, a pool well below the default (never exhausted here)
    lp_many_cpu = (torch.randn(96, 48, 20, generator=g) * 2).log_softmax(-1)
    lens_many = torch.full((96,), 48)
    for kernel, beam in KERNELS:
        cfg = CtcBeamSearchConfig(beam_size=beam, nbest=2, paged=True, page_size=1, num_pages=beam * 40,
                                  blank_skip_threshold=1.0)
        ref = ctc_beam_search(lp_many_cpu, lens_many, cfg)
        if bool(ref.page_pool_exhausted.any()):
            raise AssertionError("contention case sized wrong: the CPU reference ran out of pages")
        with _env(BEAMDEC_CTC_KERNEL=kernel):
            _same(ctc_beam_search(lp_many_cpu.cuda(), lens_many, cfg), ref, f"contention {kernel} beam {beam}")
    print("paged contention ok")

    # the select-form and multi-winner rounds and the warp-threshold pre-pass (V >= 256: the pre-pass fast path), both beside
    # their other forms, offline (flat, paged) and streamed
    lp_v_cpu = (torch.randn(2, 30, 300, generator=g) * 3).log_softmax(-1)
    for rounds, prepass in (("select", "warp"), ("branch", "rank"), ("multi", "warp")):
        with _env(BEAMDEC_CTC_KERNEL="warp", BEAMDEC_CTC_ROUNDS=rounds, BEAMDEC_CTC_PREPASS=prepass):
            for paged in (False, True):
                cfg = CtcBeamSearchConfig(beam_size=10, nbest=3, paged=paged, page_size=4, blank_skip_threshold=1.0)
                _same(ctc_beam_search(lp_v_cpu.cuda(), torch.tensor([30, 17]), cfg),
                      ctc_beam_search(lp_v_cpu, torch.tensor([30, 17]), cfg), f"{rounds}/{prepass} paged={paged}")
            dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=10, nbest=3, blank_skip_threshold=1.0))
            st = dec.create_state(2, 300, device="cuda")
            for t0 in range(0, 30, 8):
                dec.decode_chunk(lp_v_cpu[:, t0:t0 + 8].cuda(), state=st)
            _same(dec.finalize(st), ctc_beam_search(lp_v_cpu, torch.tensor([30, 30]), dec.config),
                  f"{rounds}/{prepass} streamed")
    print("rounds / pre-pass forms ok")

    with _env(BEAMDEC_CTC_KERNEL="warp", BEAMDEC_CTC_PAGED_SMEM="1"):  # opt-in shared-memory page metadata
        cfg = CtcBeamSearchConfig(beam_size=10, nbest=3, paged=True, page_size=4)
        _same(ctc_beam_search(lp, lengths, cfg), ctc_beam_search(lp_cpu, lengths, cfg), "paged smem")
    cfg = CtcBeamSearchConfig(beam_size=10, blank_skip_threshold=1.0)
    _same(ctc_beam_search(lp.half(), lengths, cfg), ctc_beam_search(lp_cpu.half(), lengths, cfg), "float16")

    # streaming with the state check fused (the default since session 28), then in its own launch
    for check in ("fused", "separate"):
        _streaming(lp, lp_cpu, check)
    # the earlier offline launches: a fill for the -1 padding and a memset of the rows before the decode (the defaults
    # above: the finalize kernel's own padding, the rows zeroed in the pre-pass launch)
    for kernel, beam in (("warp", 10), ("block", 40)):
        with _env(BEAMDEC_CTC_KERNEL=kernel, BEAMDEC_CTC_FILL="torch", BEAMDEC_CTC_ZERO="memset"):
            for paged in (False, True):
                cfg = CtcBeamSearchConfig(beam_size=beam, nbest=3, paged=paged, page_size=4)
                _same(ctc_beam_search(lp, lengths, cfg), ctc_beam_search(lp_cpu, lengths, cfg),
                      f"fill=torch zero=memset {kernel} paged={paged}")
    # the streaming calls with plain launches (their default is overlapped: the runs above), the offline calls
    # overlapped (their default is plain)
    with _env(BEAMDEC_CTC_PDL="0"):
        _streaming(lp, lp_cpu, "fused")
    # the seal as one block per row (the default since session 30 on sm_90: a cluster of 8 blocks per row up to 16 rows)
    with _env(BEAMDEC_CTC_SEAL="block"):
        _streaming(lp, lp_cpu, "fused")
    with _env(BEAMDEC_CTC_PDL="1"):
        for kernel, beam in (("warp", 10), ("block", 40)):
            with _env(BEAMDEC_CTC_KERNEL=kernel):
                cfg = CtcBeamSearchConfig(beam_size=beam, nbest=3)
                _same(ctc_beam_search(lp, lengths, cfg), ctc_beam_search(lp_cpu, lengths, cfg), f"pdl=1 {kernel}")

    torch.cuda.synchronize()
    print("smoke ok")


if __name__ == "__main__":
    main()
