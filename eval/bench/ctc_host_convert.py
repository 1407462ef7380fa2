"""The CTC public call's host side after its one device->host copy (decoders.ctc._packed_result: the checks judged,
the n-best converted to Python lists and host tensors), timed alone on this machine's CPU: the CPU form of the packed
op makes the buffer, so no GPU is needed. A diagnostic of the API rows' overhead above the kernel rows (ctc_bench's
api vs kernel boundary), not a benchmark: it writes no result rows.

    python -m eval.bench.ctc_host_convert [--shapes 16:50:1 1:200:1 64:200:1 16:50:4] [--calls 1000] [--repeats 5]

`--chunk-path` times instead the Python a streaming `decode_chunk` call runs before its op (the argument checks and
the ops lookup; one 16-frame chunk of V 5,000, beam 10), with the op replaced by a no-op: on one CUDA stream that is
latency before the chunk's first launch, so in the one-stream rows it is paid once per timed region.
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from eval.bench.ctc_stream_profile import positive

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["16:50:1", "1:200:1", "64:200:1", "16:50:4"],
                   help="B:T:nbest (V 1000, beam 10)")
    p.add_argument("--calls", type=positive, default=1000)
    p.add_argument("--repeats", type=positive, default=5)
    p.add_argument("--chunk-path", action="store_true", help="time decode_chunk's Python path (op stubbed) instead")
    args = p.parse_args(argv)
    import torch

    import decoders.ctc as ctc
    from eval.metrics import clock_s  # the harness's clock (one measurement path)

    def best_us(fn) -> float:
        for _ in range(args.calls // 5):
            fn()
        best = float("inf")
        for _ in range(args.repeats):
            t0 = clock_s()
            for _ in range(args.calls):
                fn()
            best = min(best, (clock_s() - t0) / args.calls * 1e6)
        return best

    ops = ctc.load_ops()
    if args.chunk_path:
        dec = ctc.CtcStreamingDecoder(ctc.CtcBeamSearchConfig(beam_size=10))
        st = dec.create_state(1, 5000)
        lp = torch.randn(1, 16, 5000, generator=torch.Generator().manual_seed(0)).log_softmax(-1)

        class NoOp:  # the namespace's stand-in: the op call itself is not what this times
            def ctc_decode_chunk(self, *a):
                return None

        real, noop = ctc.load_ops, NoOp()
        ctc.load_ops = lambda: noop
        try:
            body = best_us(lambda: dec.decode_chunk(lp, state=st))
        finally:
            ctc.load_ops = real
        lookup = best_us(ctc.load_ops)
        print(f"decode_chunk's Python path (op stubbed): {body + lookup:.2f} us per call (checks and call "
              f"{body:.2f}, load_ops {lookup:.2f}; best of {args.repeats} x {args.calls})")
        return 0
    for spec in args.shapes:
        try:
            B, T, nbest = (positive(x) for x in spec.split(":"))
        except (ValueError, argparse.ArgumentTypeError):
            p.error(f"shape must be B:T:nbest (positive integers), got {spec!r}")
        V, beam = 1000, max(10, nbest)
        g = torch.Generator().manual_seed(0)
        lp = torch.randn(B, T, V, generator=g).log_softmax(-1)
        lens = torch.full((B,), T, dtype=torch.int32)
        cfg = ctc.CtcBeamSearchConfig(beam_size=beam, nbest=nbest, blank_skip_threshold=1.0)
        L = T + (T & 1)
        packed = ops.ctc_decode_offline_packed(lp, lens, beam, 0, 1.0, nbest, L, *cfg.storage_args(L),
                                               ctc._VALUE_SAMPLE_FRAMES)
        best = best_us(lambda: ctc._packed_result(packed, B, L, lens, T, V, cfg, 2))
        print(f"B={B} T={T} nbest={nbest}: {best:.1f} us per call (best of {args.repeats} x {args.calls})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
