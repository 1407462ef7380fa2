"""A small end-to-end run of every CTC CUDA entry point (offline: the one-warp and block kernels, flat and
paged storage, float16; streaming, batched streams, finalize), sized for `compute-sanitizer` (memcheck /
racecheck) on the GPU host.

    compute-sanitizer --tool memcheck python -m eval.bench.ctc_smoke
"""
from __future__ import annotations

import os

import torch

from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder, ctc_beam_search


def main() -> None:
    g = torch.Generator().manual_seed(0)
    lp = (torch.randn(3, 40, 50, generator=g) * 3).log_softmax(-1).cuda()  # (B, T, V)
    lengths = torch.tensor([40, 13, 0])
    for beam in (1, 10, 40):
        r = ctc_beam_search(lp, lengths, CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 3)))
        print(beam, r.tokens[0][0][:10], r.scores[:, 0].tolist())
        rp = ctc_beam_search(lp, lengths, CtcBeamSearchConfig(beam_size=beam, nbest=min(beam, 3), paged=True,
                                                              page_size=4))
        assert rp.tokens == r.tokens, (beam, rp.tokens, r.tokens)
    os.environ["BEAMDEC_CTC_KERNEL"] = "block"  # the block kernel at beam <= 32 too
    ctc_beam_search(lp, lengths, CtcBeamSearchConfig(beam_size=10, nbest=3, paged=True, page_size=4))
    ctc_beam_search(lp, lengths, CtcBeamSearchConfig(beam_size=10, nbest=3))
    os.environ["BEAMDEC_CTC_KERNEL"] = "warp"  # the one-warp kernel, flat (lazy) storage with an odd slot stride
    rb = ctc_beam_search(lp, lengths, CtcBeamSearchConfig(beam_size=10, nbest=3, max_seq_len=lp.shape[1] + 1))
    os.environ["BEAMDEC_CTC_PAGED_SMEM"] = "1"  # the opt-in shared-memory page metadata
    rs = ctc_beam_search(lp, lengths, CtcBeamSearchConfig(beam_size=10, nbest=3, paged=True, page_size=4))
    os.environ.pop("BEAMDEC_CTC_PAGED_SMEM")
    assert rs.tokens == rb.tokens
    assert rb.tokens == ctc_beam_search(lp, lengths, CtcBeamSearchConfig(beam_size=10, nbest=3)).tokens
    os.environ.pop("BEAMDEC_CTC_KERNEL")
    ctc_beam_search(lp.half(), lengths, CtcBeamSearchConfig(beam_size=10, blank_skip_threshold=1.0))
    for paged in (False, True):
        dec = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=10, nbest=2, max_seq_len=64, paged=paged, page_size=4))
        st = dec.create_state(3, 50, device="cuda")
        singles = [dec.create_state(1, 50, device="cuda") for _ in range(3)]
        for t0 in range(0, 40, 16):
            dec.decode_chunk(lp[:, t0:t0 + 16], state=st)
            dec.decode_chunk_batch(lp[:, t0:t0 + 16], singles)
        print(paged, dec.finalize(st).tokens[0], [dec.finalize(s).scores.tolist() for s in singles])
    torch.cuda.synchronize()
    print("smoke ok")


if __name__ == "__main__":
    main()
