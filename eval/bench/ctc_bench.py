"""CTC prefix beam search, ours vs the seed system's (OASR), on one GPU in one process: THE same-run side by side.

Inputs are OASR's own benchmark inputs: `randn` logits through `log_softmax` (fixed seed), blank 0, no blank
skipping. They have no references, so every row's `wer` is null. Audio seconds are frames x 0.04 s (one CTC
frame of a 4x-subsampled 10 ms feature stream), so RTFx reads as for a real model at that frame rate.

Per offline shape (B, T, V, beam), all calls interleaved per repeat after warm-up, each call inside its own
eval.metrics.Stopwatch (synchronise, CUDA events, synchronise: `decoder_cuda_seconds` is the event time,
`decoder_seconds` the synchronised wall time; both are means per call):
  boundary "kernel": our raw op `ctc_decode_offline` vs OASR's raw module call, inputs and (for OASR)
                     workspace and outputs already on the device;
  boundary "api":    our public `decoders.ctc.ctc_beam_search` vs OASR's public `ctc_beam_search_decode`. This
                     OASR tarball does not build its C++ token read-back (`oasr._C`); a Python `tolist` stand-in
                     replaces it (params["oasr_readback"] says which), so OASR's api time is an upper bound.
Our kernel row also records the agreement of the best hypothesis (decoder_stats: best_equal, max_dscore).
Streaming per (V, beam, streams), 2 chunks of 16 frames per stream per call: OASR decode_chunk per stream vs
ours per stream (params mode "per_stream": the pair) and ours with decode_chunk_batch (mode "batched").

Stream lengths (issue 16: cost per frame at every length up to 2,000 frames): per (V, beam, streams, length), each
stream is first brought to `length` frames (untimed), its state snapshotted, and every timed repeat restores the
snapshot (untimed) and decodes 2 chunks of 16 frames; one stream per call (ours and OASR, mode "per_stream") and,
for streams > 1, ours batched: one state of N rows (mode "batched_rows") and N single-row states through
decode_chunk_batch (mode "batched", a server's call); OASR has no batched call over separate states.

Rows go to one run directory (default runs/bench/ctc_vs_oasr/<timestamp>); ours and OASR in the same shape and
boundary name each other in `run_mate` and carry identical `params`, so
`reports.tables.side_by_side_table(rows, "ctc_beam", "oasr_ctc", by=[...])` forms the ratios. When OASR is not
importable (OASR_ROOT, default .anchors/oasr; see ../shared/anchors/README.md) its rows are unavailable rows with
the reason and ours is still measured. GPU only: without CUDA it exits with one line.

With --ab-env "BEAMDEC_X=a ...", our offline and fixed-length streaming calls are also timed under those switches
(read by the decoders on every call), interleaved per repeat with the default form in the same process: rows labelled
"[ab BEAMDEC_X=a]" with params["ab_env"]. An A/B of two processes run one after the other mixes in the host's drift.
Several arms, separated by ";" ("BEAMDEC_X=a;BEAMDEC_Y=b BEAMDEC_Z=c"), are each timed so, all interleaved per repeat,
so switches shipped together are also measured one by one in the same run.

    python -m eval.bench.ctc_bench [--repeats 30] [--oasr-root .anchors/oasr] [--run NAME] [--ab-env "K=V ..."]
"""
from __future__ import annotations

import argparse
import os
import sys
import types
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from eval.bench.common import BenchRun, describe_error, environment, print_rows
from eval.metrics import Stopwatch, WerStats

FRAME_SECONDS = 0.04  # audio per CTC frame (10 ms features, 4x subsampling)
OFFLINE_SHAPES = [  # (B, T, V, beam): OASR's benchmark shapes
    (1, 200, 100, 10), (16, 200, 100, 10), (1, 200, 1000, 10), (16, 200, 1000, 10), (1, 200, 5000, 10),
    (4, 200, 5000, 10), (16, 200, 5000, 10), (64, 200, 5000, 10), (16, 50, 1000, 10), (16, 500, 1000, 10),
    (16, 200, 5000, 4), (16, 200, 5000, 20),
]
STREAMING = [(5000, 10, 1), (5000, 10, 8), (1000, 10, 8), (5000, 10, 64)]  # (V, beam, streams)
# issue 16's streaming goals at fixed stream lengths: one stream per call (ours and OASR) and 256 streams in one
# batched call (ours), each timed on 2 chunks decoded after the state was brought to `length` frames untimed
STREAM_LENGTHS = [32, 500, 1000, 2000]
STREAM_LENGTH_CONFIGS = [(5000, 10, 1), (5000, 10, 256)]  # (V, beam, streams)
CHUNK_FRAMES, CHUNKS = 16, 2
STREAM_MAX_SEQ_LEN = 2048  # at least every frame fed (warm-up + repeats): OASR decodes nothing past its cap
DATASET = "randn_log_softmax"
OURS, THEIRS = "ctc_beam", "oasr_ctc"


def inputs(B: int, T: int, V: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    lp = torch.log_softmax(torch.randn(B, T, V, device="cuda", generator=g), dim=-1)  # (B, T, V)
    return lp, torch.full((B,), T, dtype=torch.int32, device="cuda")


def load_oasr(root: Path) -> tuple[Optional[types.ModuleType], str, str]:
    """(oasr.functionals.ctc_decode or None, why not, read-back used). The read-back stand-in is marked."""
    if not (root / "oasr").is_dir():
        return None, f"OASR not found under {root} (unpack ../shared/anchors/oasr-*.tar.xz there)", ""
    sys.path.insert(0, str(root.resolve()))
    try:
        import oasr.functionals.ctc_decode as oc

        oc._get_ctc_decoder_module()  # JIT-builds its kernels (apache-tvm-ffi)
    except Exception as e:  # noqa: BLE001 - any failure to import or build makes OASR's rows unavailable
        return None, f"OASR not importable: {describe_error(e)}", ""
    readback = "oasr._C"
    if oc._CPP is None:
        def extract_beam_tokens(tok, lens, beam):
            t, ln = tok.tolist(), lens.tolist()
            return [[t[b][k][: ln[b][k]] for k in range(beam)] for b in range(len(t))]

        oc._CPP = types.SimpleNamespace(extract_beam_tokens=extract_beam_tokens)
        readback = "python tolist stand-in (oasr._C not built)"
    return oc, "", readback


def parse_ab_env(text: str) -> dict[str, str]:
    """`--ab-env "K=V K2=V2"` -> {K: V, K2: V2}; only the decoders' switches (BEAMDEC_*) are accepted."""
    out: dict[str, str] = {}
    for item in text.split():
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("BEAMDEC_") or not value:
            raise ValueError(f"--ab-env: expected BEAMDEC_NAME=value items, got {item!r}")
        out[key] = value
    return out


def parse_ab_arms(text: str) -> list[dict[str, str]]:
    """`--ab-env "K=V K2=V2;K3=V3"` -> one switch set per ';'-separated arm (each timed beside the defaults in the
    same process); empty arms are dropped, an arm twice is refused (its rows would share one label)."""
    arms = [parse_ab_env(part) for part in text.split(";")]
    arms = [a for a in arms if a]
    tags = [arm_tag(a) for a in arms]
    if len(set(tags)) != len(tags):
        raise ValueError(f"--ab-env: an arm is given twice in {text!r}")
    return arms


def arm_tag(env: dict[str, str]) -> str:
    """An arm's switches as its rows name them: "K=V K2=V2"."""
    return " ".join(f"{k}={v}" for k, v in env.items())


def arm_fns(fns: dict[str, Callable[[], object]], arms: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """Adds to `fns`, per arm i, "alt{i}_<mode>" = each "ours_<mode>" callable run under the arm's switches (so the
    arms interleave with the defaults and each other per repeat); returns {alt key: its arm's switches}."""
    keys: dict[str, dict[str, str]] = {}
    for i, env in enumerate(arms):
        for k in [k for k in fns if k.startswith("ours_")]:
            key = f"alt{i}_{k[5:]}"
            fns[key] = with_env(env, fns[k])
            keys[key] = env
    return keys


def with_env(env: dict[str, str], fn: Callable[[], object]) -> Callable[[], object]:
    """fn run with `env` set for the call (the decoders read their switches on every call), then restored."""
    def call():
        with environment(env):
            return fn()
    return call


def add_alt(run: BenchRun, watches: dict[str, Stopwatch], key: str, label: str, params: dict, boundary: str,
            utterances: int, frames: int, ab_env: dict[str, str]) -> None:
    """The row of our decoder under the A/B environment (interleaved with the default form in the same process)."""
    if key not in watches:
        return
    wall, cuda = per_call(watches[key])
    tag = arm_tag(ab_env)
    run.measured(decoder=f"{label} [ab {tag}]", decoder_name=OURS, device="cuda", dataset=DATASET,
                 wer=WerStats(utterances=utterances), references=False, audio_seconds=frames * FRAME_SECONDS,
                 decoder_seconds=wall, decoder_cuda_seconds=cuda, frames=frames, batch_size=utterances,
                 boundary=boundary, params={**params, "ab_env": tag}, warmup_batches=0)


def rotated(keys: list[str], i: int) -> list[str]:
    """The contenders' order in repeat i: rotated by one each repeat, so every contender runs in every position
    (first, after each other one) equally often. A fixed order biased the host-bound streaming rows (2026-12-06: the
    contender that always ran right after OASR, whose state grows with the stream, lost ~10 % at 2,000 frames)."""
    r = i % len(keys) if keys else 0
    return keys[r:] + keys[:r]


def interleaved(fns: dict[str, Callable[[], object]], warmup: int, repeats: int, device: str = "cuda",
                before: Optional[Callable[[str], object]] = None) -> dict[str, Stopwatch]:
    """One Stopwatch per callable; warm-up calls untimed, then per repeat each callable once (A/B interleaved,
    so clock drift and thermal state hit every contender alike; the order rotated per repeat, `rotated`).
    `before(key)`, when given, runs untimed before every call of that callable (e.g. restoring a state)."""
    def call(k: str) -> None:
        if before is not None:
            before(k)
        fns[k]()

    for i in range(warmup):
        for k in rotated(list(fns), i):
            call(k)
    watches = {k: Stopwatch(device) for k in fns}
    for i in range(repeats):
        for k in rotated(list(fns), i):
            if before is not None:
                before(k)
            with watches[k]:
                fns[k]()
    return watches


def per_call(w: Stopwatch) -> tuple[float, Optional[float]]:
    """Mean wall and CUDA-event seconds per timed call."""
    n = max(w.regions, 1)
    return w.wall_seconds / n, None if w.cuda_seconds is None else w.cuda_seconds / n


def add_pair(run: BenchRun, watches: dict[str, Stopwatch], keys: dict[str, tuple[str, str]], params: dict,
             boundary: str, utterances: int, frames: int, oasr_reason: str, stats: Optional[dict] = None) -> None:
    """Rows for ours and OASR (or OASR's unavailable row) of one configuration; keys: role -> (watch, label)."""
    labels = {role: lab for role, (_, lab) in keys.items()}
    for role, (key, lab) in keys.items():
        name = OURS if role.startswith("ours") else THEIRS
        mate = labels.get("theirs") if role.startswith("ours") else labels.get("ours")
        if key not in watches:
            run.unavailable(decoder=lab, decoder_name=name, device="cuda", reason=oasr_reason, params=params)
            continue
        wall, cuda = per_call(watches[key])
        run.measured(decoder=lab, decoder_name=name, device="cuda", dataset=DATASET, wer=WerStats(utterances=utterances),
                     references=False, audio_seconds=frames * FRAME_SECONDS,
                     decoder_seconds=wall, decoder_cuda_seconds=cuda,
                     frames=frames, batch_size=utterances, boundary=boundary, run_mate=mate, params=params,
                     stats=(stats if role == "ours" else None), warmup_batches=0)


def bench_offline(run: BenchRun, oc, oasr_reason: str, readback: str, warmup: int, repeats: int,
                  arms: Sequence[dict[str, str]] = ()) -> None:
    from decoders.ctc import CtcBeamSearchConfig, ctc_beam_search, load_ops

    ops = load_ops()
    for B, T, V, beam in OFFLINE_SHAPES:
        lp, lens = inputs(B, T, V)
        seq = T + (T & 1)  # our op stores token pairs: an even max_seq_len
        cfg = CtcBeamSearchConfig(beam_size=beam, blank_skip_threshold=1.0, max_seq_len=seq)
        store = cfg.storage_args(seq)
        fns = {"ours_kernel": lambda: ops.ctc_decode_offline(lp, lens, beam, 0, 1.0, 1, seq, *store),
               "ours_api": lambda: ctc_beam_search(lp, lens, cfg)}
        alt = arm_fns(fns, list(arms))  # the same calls under each A/B arm's switches, interleaved with the others
        stats: dict = {}
        if oc is not None:
            mod = oc._get_ctc_decoder_module()
            ws = torch.empty(int(mod.ctc_decoder_workspace_size(B, beam, V, T)), dtype=torch.uint8, device="cuda")
            ot = torch.empty(B, beam, T, dtype=torch.int32, device="cuda")
            ol = torch.empty(B, beam, dtype=torch.int32, device="cuda")
            osc = torch.empty(B, beam, dtype=torch.float32, device="cuda")
            fns["oasr_kernel"] = lambda: mod.ctc_beam_search_decode(ot, oc._NO_TIMES, ol, osc, lp, lens, ws, beam, 0,
                                                                    1.0)
            fns["oasr_api"] = lambda: oc.ctc_beam_search_decode(lp, lens, beam_size=beam, blank_id=0,
                                                                blank_threshold=1.0, max_seq_len=T)
            ours = ctc_beam_search(lp, lens, cfg)
            theirs = oc.ctc_beam_search_decode(lp, lens, beam_size=beam, blank_id=0, blank_threshold=1.0,
                                               max_seq_len=T)
            stats = {"best_equal": sum(ours.tokens[b][0] == theirs.tokens[b][0] for b in range(B)),
                     "max_dscore": float((ours.scores[:, 0] - theirs.scores[:, 0].cpu()).abs().max())}
        watches = interleaved(fns, warmup, repeats)
        shape = {"B": B, "T": T, "V": V, "beam": beam}
        tag = f"B={B} T={T} V={V} beam={beam}"
        add_pair(run, watches, {"ours": ("ours_kernel", f"{OURS}@cuda[kernel {tag}]"),
                                "theirs": ("oasr_kernel", f"{THEIRS}@cuda[kernel {tag}]")},
                 shape, "kernel", B, B * T, oasr_reason, stats)
        add_pair(run, watches, {"ours": ("ours_api", f"{OURS}@cuda[api {tag}]"),
                                "theirs": ("oasr_api", f"{THEIRS}@cuda[api {tag}]")},
                 {**shape, "oasr_readback": readback or "n/a"}, "api", B, B * T, oasr_reason)
        for key, env in alt.items():
            boundary = key.split("_", 1)[1]
            add_alt(run, watches, key, f"{OURS}@cuda[{boundary} {tag}]", shape, boundary, B, B * T, env)
        run.checkpoint()
        print(f"offline {tag}: " + ", ".join(f"{k} {1e3 * w.cuda_seconds / w.regions:.3f} ms"
                                              for k, w in watches.items()), flush=True)


def bench_streaming(run: BenchRun, oc, oasr_reason: str, warmup: int, repeats: int) -> None:
    from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder

    # each state keeps growing over warm-up and repeats; a cap below that would time decoding of nothing
    max_seq_len = max(STREAM_MAX_SEQ_LEN, (warmup + repeats) * CHUNKS * CHUNK_FRAMES)

    for V, beam, n in STREAMING:
        chunks = [inputs(1, CHUNK_FRAMES, V, seed=i)[0] for i in range(CHUNKS)]
        batched = [torch.cat([c] * n, 0) for c in chunks]
        ours = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=beam, blank_skip_threshold=1.0,
                                                       max_seq_len=max_seq_len))
        st = [ours.create_state(1, V, device="cuda") for _ in range(n)]
        st_b = [ours.create_state(1, V, device="cuda") for _ in range(n)]
        fns = {"ours_per_stream": lambda: [ours.decode_chunk(c, state=s) for s in st for c in chunks],
               "ours_batched": lambda: [ours.decode_chunk_batch(c, st_b) for c in batched]}
        if oc is not None:
            od = oc.GpuStreamingDecoder(oc.GpuDecoderConfig(beam_size=beam, blank_id=0, blank_threshold=1.0,
                                                            max_seq_len=max_seq_len))
            ost = [od.create_state(1, V) for _ in range(n)]
            fns["oasr_per_stream"] = lambda: [od.decode_chunk(c, state=s) for s in ost for c in chunks]
        watches = interleaved(fns, warmup, repeats)
        frames = n * CHUNKS * CHUNK_FRAMES
        base = {"V": V, "beam": beam, "streams": n, "chunk_frames": CHUNK_FRAMES, "max_seq_len": max_seq_len}
        tag = f"V={V} beam={beam} streams={n}"
        add_pair(run, watches, {"ours": ("ours_per_stream", f"{OURS}@cuda[stream {tag}]"),
                                "theirs": ("oasr_per_stream", f"{THEIRS}@cuda[stream {tag}]")},
                 {**base, "mode": "per_stream"}, "api", n, frames, oasr_reason)
        wall, cuda = per_call(watches["ours_batched"])
        run.measured(decoder=f"{OURS}@cuda[stream batched {tag}]", decoder_name=OURS, device="cuda", dataset=DATASET,
                     wer=WerStats(utterances=n), references=False, audio_seconds=frames * FRAME_SECONDS,
                     decoder_seconds=wall, decoder_cuda_seconds=cuda,
                     frames=frames, batch_size=n, boundary="api", params={**base, "mode": "batched"},
                     run_mate=f"{THEIRS}@cuda[stream {tag}]" if oc is not None else None)
        run.checkpoint()
        print(f"streaming {tag}: " + ", ".join(f"{k} {1e6 * w.cuda_seconds / w.regions / frames:.2f} us/stream-frame"
                                                for k, w in watches.items()), flush=True)


def bench_stream_lengths(run: BenchRun, oc, oasr_reason: str, warmup: int, repeats: int,
                         lengths: list[int], arms: Sequence[dict[str, str]] = ()) -> None:
    """Per-frame cost at fixed stream lengths: prefill to `length` frames, snapshot, then per repeat restore (untimed)
    and decode CHUNKS chunks (timed); the contenders interleaved per repeat."""
    from decoders.ctc import CtcBeamSearchConfig, CtcStreamingDecoder

    max_seq_len = max(STREAM_MAX_SEQ_LEN, max(lengths) + CHUNKS * CHUNK_FRAMES)
    for V, beam, n in STREAM_LENGTH_CONFIGS:
        chunks = [inputs(1, CHUNK_FRAMES, V, seed=100 + i)[0] for i in range(CHUNKS)]
        batched = [torch.cat([c] * n, 0) for c in chunks]
        ours = CtcStreamingDecoder(CtcBeamSearchConfig(beam_size=beam, blank_skip_threshold=1.0,
                                                       max_seq_len=max_seq_len))
        od = None
        if oc is not None and n == 1:  # OASR decodes one state per call: 256 of them is ours per_stream's job
            od = oc.GpuStreamingDecoder(oc.GpuDecoderConfig(beam_size=beam, blank_id=0, blank_threshold=1.0,
                                                            max_seq_len=max_seq_len))
        for length in lengths:
            pre = inputs(1, max(length, 1), V, seed=7)[0]
            st = ours.create_state(n, V, device="cuda")
            for f0 in range(0, length, 200):  # prefill in pieces: 256 x 2,000 x 5,000 floats would be 10 GB
                ours.decode_chunk(torch.cat([pre[:, f0:f0 + 200]] * n, 0), state=st)
            snap = st.tensor.clone()
            # n > 1: the same n streams also as n separate single-row states (decode_chunk_batch, a server's call)
            sep = [ours.create_state(1, V, device="cuda") for _ in range(n)] if n > 1 else []
            for s1 in sep:
                s1.tensor.copy_(snap[:1])

            def restore_ours():
                st.tensor.copy_(snap)
                for s1 in sep:
                    s1.tensor.copy_(snap[:1])

            restore = {"ours": restore_ours}
            fns = {}
            if n == 1:
                fns["ours_per_stream"] = lambda: [ours.decode_chunk(c, state=st) for c in chunks]
            else:
                fns["ours_rows"] = lambda: [ours.decode_chunk(c, state=st) for c in batched]
                fns["ours_batched"] = lambda: [ours.decode_chunk_batch(c, sep) for c in batched]
            alt = arm_fns(fns, list(arms))  # the same calls under each A/B arm (restored from the same snapshot)
            if od is not None:
                ost = od.create_state(1, V)
                if length > 0:
                    od.decode_chunk(pre, state=ost)
                osnap = (ost.buffer.clone(), ost.step, ost.actual_frame_idx)

                def oasr_restore(ost=ost, osnap=osnap):
                    ost.buffer.copy_(osnap[0])
                    ost.step, ost.actual_frame_idx = osnap[1], osnap[2]

                restore["oasr"] = oasr_restore
                fns["oasr_per_stream"] = lambda ost=ost: [od.decode_chunk(c, state=ost) for c in chunks]
            watches = interleaved(fns, warmup, repeats,
                                  before=lambda k: restore["oasr" if k.startswith("oasr") else "ours"]())
            frames = n * CHUNKS * CHUNK_FRAMES
            base = {"V": V, "beam": beam, "streams": n, "chunk_frames": CHUNK_FRAMES, "stream_len": length,
                    "max_seq_len": max_seq_len}
            tag = f"V={V} beam={beam} streams={n} len={length}"
            # each of our calls' mode and row label (an A/B arm's row is labelled after its default form's)
            modes = {"per_stream": "per_stream", "rows": "batched_rows", "batched": "batched"}
            label = {m: f"{OURS}@cuda[stream {tag}]" if m == "per_stream" else f"{OURS}@cuda[stream {m} {tag}]"
                     for m in modes.values()}
            if n == 1:
                add_pair(run, watches, {"ours": ("ours_per_stream", label["per_stream"]),
                                        "theirs": ("oasr_per_stream", f"{THEIRS}@cuda[stream {tag}]")},
                         {**base, "mode": "per_stream"}, "api", n, frames, oasr_reason)
            else:
                for key, mode in (("ours_rows", "batched_rows"), ("ours_batched", "batched")):
                    wall, cuda = per_call(watches[key])
                    run.measured(decoder=label[mode], decoder_name=OURS, device="cuda",
                                 dataset=DATASET, wer=WerStats(utterances=n), references=False,
                                 audio_seconds=frames * FRAME_SECONDS, decoder_seconds=wall,
                                 decoder_cuda_seconds=cuda, frames=frames, batch_size=n, boundary="api",
                                 params={**base, "mode": mode})
            for k, env in alt.items():
                mode = modes[k.split("_", 1)[1]]
                add_alt(run, watches, k, label[mode], {**base, "mode": mode}, "api", n, frames, env)
            run.checkpoint()
            print(f"stream length {tag}: " + ", ".join(
                f"{k} {1e6 * w.cuda_seconds / w.regions / frames:.3f} us/stream-frame" for k, w in watches.items()),
                flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--oasr-root", type=Path, default=Path(os.environ.get("OASR_ROOT", ".anchors/oasr")))
    p.add_argument("--no-streaming", action="store_true")
    p.add_argument("--no-offline", action="store_true")
    p.add_argument("--ab-env", default="",
                   help='A/B in this process: "BEAMDEC_X=a BEAMDEC_Y=b" -- our offline and fixed-length streaming '
                        'calls are also timed under these switches, interleaved per repeat with the default form; '
                        'several arms separated by ";" ("BEAMDEC_X=a;BEAMDEC_Y=b") are each timed so')
    p.add_argument("--stream-lengths", type=int, nargs="*", default=STREAM_LENGTHS,
                   help="stream lengths (frames) of the fixed-length streaming rows; none: skip them")
    p.add_argument("--output-dir", default="runs/bench")
    p.add_argument("--experiment", default="ctc_vs_oasr")
    p.add_argument("--run", default=None, help="run name (default: a timestamp)")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        p.error(f"--repeats must be >= 1 and --warmup >= 0, got {args.repeats} and {args.warmup}")
    try:
        arms = parse_ab_arms(args.ab_env)
    except ValueError as e:
        p.error(str(e))
    if not torch.cuda.is_available():
        print("ctc_bench: the CTC kernel benchmark needs a CUDA device; nothing run", file=sys.stderr)
        return 2
    oc, reason, readback = load_oasr(args.oasr_root)
    if oc is None:
        print(f"ctc_bench: {reason}; measuring ours only", file=sys.stderr)
    run = BenchRun(args.experiment, args.run, config={
        "benchmark": "eval.bench.ctc_bench", "inputs": "randn logits, log_softmax, seed 0 (OASR's benchmark inputs)",
        "frame_seconds": FRAME_SECONDS, "warmup": args.warmup, "repeats": args.repeats,
        "oasr_root": str(args.oasr_root), "oasr_available": oc is not None, "oasr_readback": readback,
        "offline_shapes": OFFLINE_SHAPES, "streaming": [] if args.no_streaming else STREAMING,
        "chunk_frames": CHUNK_FRAMES, "chunks_per_call": CHUNKS, "stream_max_seq_len": STREAM_MAX_SEQ_LEN,
        "stream_lengths": [] if args.no_streaming else args.stream_lengths,
        "stream_length_configs": STREAM_LENGTH_CONFIGS, "ab_arms": [arm_tag(a) for a in arms],
    }, output_dir=args.output_dir)
    if not args.no_offline:
        bench_offline(run, oc, reason, readback, args.warmup, args.repeats, arms)
    if not args.no_streaming:
        bench_streaming(run, oc, reason, args.warmup, args.repeats)
        if args.stream_lengths:
            bench_stream_lengths(run, oc, reason, args.warmup, args.repeats, args.stream_lengths, arms)
    run.close()
    print_rows(run.rows, pairs=[(OURS, THEIRS, ["B", "T", "V", "beam"]),
                                (OURS, THEIRS, ["V", "beam", "streams", "mode"]),
                                (OURS, THEIRS, ["V", "beam", "streams", "stream_len", "mode"])])
    return 0


if __name__ == "__main__":
    sys.exit(main())
