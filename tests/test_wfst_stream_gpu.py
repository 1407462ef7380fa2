"""CUDA streaming WFST decoder vs the CPU reference (run on the GPU host: pytest -m gpu tests/test_wfst_stream_gpu.py).

Same inputs, same chunks on both devices; words must match exactly except where the scores tie exactly (equal-score
paths may resolve differently: first met on the CPU, atomic order on the GPU -- as offline, tests/test_wfst_gpu.py).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from decoders.wfst import WfstDecoder, WfstDecoderConfig
from decoders.wfst_stream import WfstStreamingDecoder
from test_wfst_stream import _stream
from wfst_testlib import random_graph, random_log_probs

ROOT = Path(__file__).resolve().parents[1]


def _same(gpu, cpu, tag):
    assert gpu.has_path == cpu.has_path and gpu.reached_final == cpu.reached_final, tag
    for b in range(len(cpu.words)):
        sg, sc = float(gpu.scores[b]), float(cpu.scores[b])
        assert sg == sc or abs(sg - sc) <= 1e-4, (tag, b, sg, sc)
        if gpu.words[b] != cpu.words[b]:
            assert sg == sc, (tag, b, gpu.words[b], cpu.words[b])  # an exact tie, resolved differently


@pytest.mark.gpu
@pytest.mark.parametrize("chunk", [1, 7, 50, "random"])
@pytest.mark.parametrize("epsilon", [False, True])
def test_gpu_streaming_equals_cpu_streaming(chunk, epsilon):
    rng = np.random.default_rng(300 + epsilon)
    for gi in range(12):
        g = random_graph(rng, epsilon=epsilon, finals=["some", "all", "none"][gi % 3])
        cfg = WfstDecoderConfig(search_beam=float(rng.choice([3.0, 6.0, 20.0])), min_active=3,
                                max_active=20 if gi % 2 else 10000)
        T = int(rng.integers(1, 120))
        B = int(rng.choice([1, 3, 5]))
        lp = random_log_probs(rng, B, T, g.num_tokens)
        lengths = torch.from_numpy(rng.integers(1, T + 1, size=B))
        lengths[0] = T
        boosts = [{f"w{int(rng.integers(1, 12))}": float(rng.uniform(-3, 3))} if b % 2 else None for b in range(B)]
        seed = int(rng.integers(1 << 30))
        cpu = _stream(WfstStreamingDecoder(g, cfg, "cpu", max_streams=8), lp, lengths, chunk,
                      np.random.default_rng(seed), boosts)
        dec = WfstStreamingDecoder(g, cfg, "cuda", max_streams=8, max_chunk_frames=16)
        gpu = _stream(dec, lp.cuda(), lengths, chunk, np.random.default_rng(seed), boosts, partial_every=2)
        _same(gpu, cpu, (gi, chunk))
        # and the offline decoder in online mode, on the GPU too
        off = WfstDecoder(g, WfstDecoderConfig(**{**cfg.__dict__, "online": True}), "cuda").decode(lp.cuda(), lengths,
                                                                                                   boosts)
        _same(gpu, off, (gi, chunk, "offline"))


@pytest.mark.gpu
def test_gpu_online_switch_equals_cpu():
    rng = np.random.default_rng(310)
    for gi in range(16):
        g = random_graph(rng, epsilon=bool(gi % 2))
        cfg = WfstDecoderConfig(search_beam=3.0, min_active=3, max_active=20, online=True)
        lp = random_log_probs(rng, 4, 30, g.num_tokens)
        lengths = torch.tensor([30, 7, 1, 0])
        _same(WfstDecoder(g, cfg, "cuda").decode(lp.cuda(), lengths), WfstDecoder(g, cfg, "cpu").decode(lp, lengths), gi)


@pytest.mark.gpu
def test_gpu_interleaved_streams_and_slot_reuse():
    """Streams opened / closed / finalized in random order reuse slots: each result equals its CPU reference."""
    rng = np.random.default_rng(320)
    g = random_graph(rng, num_states=40, num_tokens=7, epsilon=True)
    cfg = WfstDecoderConfig(search_beam=6.0, min_active=3, max_active=40)
    dec = WfstStreamingDecoder(g, cfg, "cuda", max_streams=3, max_chunk_frames=8)
    ref = WfstStreamingDecoder(g, cfg, "cpu", max_streams=3)
    lps = [random_log_probs(rng, 1, int(rng.integers(5, 90)), 7)[0] for _ in range(10)]
    pending, live, done = list(range(10)), {}, 0
    while done < 10:
        while pending and dec.open_streams < 3:
            u = pending.pop(0)
            live[u] = [dec.create_stream(), ref.create_stream(), 0]
        if rng.random() < 0.05 and len(live) > 1:
            u = int(rng.choice(list(live)))
            s = live.pop(u)
            dec.close(s[0]), ref.close(s[1])
            pending.append(u)
            continue
        us = [u for u in live if rng.random() < 0.6] or list(live)[:1]
        c = int(rng.integers(1, 20))
        n = [min(c, lps[u].shape[0] - live[u][2]) for u in us]
        x = torch.zeros(len(us), c, 7)
        for i, u in enumerate(us):
            x[i, : n[i]] = lps[u][live[u][2] : live[u][2] + n[i]]
        dec.decode_chunk([live[u][0] for u in us], x.cuda(), torch.tensor(n))
        ref.decode_chunk([live[u][1] for u in us], x, torch.tensor(n))
        for i, u in enumerate(us):
            live[u][2] += n[i]
        fin = [u for u in us if live[u][2] == lps[u].shape[0]]
        if fin:
            _same(dec.finalize([live[u][0] for u in fin]), ref.finalize([live[u][1] for u in fin]), fin)
            for u in fin:
                del live[u]
                done += 1


@pytest.mark.gpu
def test_gpu_partial_scores_equal_cpu():
    rng = np.random.default_rng(330)
    g = random_graph(rng, num_states=30, num_tokens=6)
    cfg = WfstDecoderConfig(search_beam=8.0)
    lp = random_log_probs(rng, 2, 60, 6)
    dec, ref = (WfstStreamingDecoder(g, cfg, d, max_streams=2) for d in ("cuda", "cpu"))
    sd, sr = [dec.create_stream() for _ in range(2)], [ref.create_stream() for _ in range(2)]
    for a in range(0, 60, 6):
        dec.decode_chunk(sd, lp[:, a : a + 6].cuda(), torch.tensor([6, 6]))
        ref.decode_chunk(sr, lp[:, a : a + 6], torch.tensor([6, 6]))
        for hg, hc in zip(dec.partial(sd), ref.partial(sr)):
            assert hg.score == pytest.approx(hc.score, abs=1e-4)
            assert hg.words == hc.words or hg.score == hc.score
            assert hg.timesteps is None  # the GPU arena keeps no frames


@pytest.mark.gpu
def test_gpu_memory_is_flat_on_a_long_stream():
    """20k frames in 50-frame chunks with a small arena: garbage collection runs, the live links stay bounded, the
    decoder's device memory does not change after the first chunk, and the result is the CPU reference's."""
    rng = np.random.default_rng(103)
    g = random_graph(rng, num_states=60, num_tokens=6, max_emitting=5, finals="all")
    frames = 20000
    lp = random_log_probs(rng, 1, frames, 6, peaky=1.0)
    cfg = WfstDecoderConfig(search_beam=12.0, arena_capacity=1 << 16)
    dec = WfstStreamingDecoder(g, cfg, "cuda", max_streams=2, max_chunk_frames=50)
    s = dec.create_stream()
    allocated = []
    for a in range(0, frames, 50):
        dec.decode_chunk([s], lp[:, a : a + 50].cuda(), [50])
        if a // 50 in (4, 399):
            torch.cuda.synchronize()
            allocated.append(torch.cuda.memory_allocated())
    st = dec.memory_stats(s)
    res = dec.finalize([s])
    ref = _stream(WfstStreamingDecoder(g, cfg, "cpu", max_streams=1), lp, torch.tensor([frames]), 50)
    _same(res, ref, "long")
    assert res.overflow == [0]
    assert st["gc_runs"] >= 2 and st["peak_arena_links"] <= 1 << 16
    assert st["drained_words"] > 0.9 * len(res.words[0])
    assert allocated[1] <= allocated[0]  # nothing grows with the stream


@pytest.mark.gpu
def test_gpu_multiword_arcs_survive_the_drain():
    """A long stream on a graph with multi-word arcs and a small arena: the garbage collector drains converged word
    links to the host, which reads their words through the host copy of the device word-arc index; the transcript
    equals the CPU reference's (which reads the aux CSR), with and without boosts."""
    from wfst_testlib import with_multiword_arcs
    rng = np.random.default_rng(104)
    g = with_multiword_arcs(rng, random_graph(rng, num_states=60, num_tokens=6, max_emitting=5, finals="all"))
    frames = 6000
    lp = random_log_probs(rng, 2, frames, 6, peaky=1.0)
    cfg = WfstDecoderConfig(search_beam=12.0, arena_capacity=1 << 14)
    boosts = [None, {"w3": 2.0}]
    dec = WfstStreamingDecoder(g, cfg, "cuda", max_streams=2, max_chunk_frames=50)
    streams = [dec.create_stream(b) for b in boosts]
    x = lp.cuda()
    for a in range(0, frames, 50):
        dec.decode_chunk(streams, x[:, a: a + 50].contiguous(), [50, 50])
    stats = [dec.memory_stats(s) for s in streams]
    gpu = dec.finalize(streams)
    assert all(st["gc_runs"] >= 1 and st["drained_words"] > 0 for st in stats), stats
    cpu = _stream(WfstStreamingDecoder(g, cfg, "cpu", max_streams=2), lp, torch.tensor([frames, frames]), 50,
                  boosts=boosts)
    _same(gpu, cpu, "multiword drain")
    assert gpu.overflow == [0, 0] and all(len(w) > 0 for w in gpu.words)


@pytest.mark.gpu
def test_gpu_bad_input():
    rng = np.random.default_rng(340)
    g = random_graph(rng, num_states=10, num_tokens=4)
    dec = WfstStreamingDecoder(g, WfstDecoderConfig(), "cuda", max_streams=1)
    s = dec.create_stream()
    lp = random_log_probs(rng, 1, 5, 4)
    with pytest.raises(ValueError, match="is on cpu"):
        dec.decode_chunk([s], lp, [5])
    with pytest.raises(ValueError, match="lengths must be in"):
        dec.decode_chunk([s], lp.cuda(), [6])
    dec.finalize([s])
    with pytest.raises(ValueError, match="closed"):
        dec.finalize([s])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_stream_launcher_compiles_with_nvcc(tmp_path):
    """Compile-check of the streaming launcher + kernels, linked with the offline launcher (both include the
    offline kernels: internal linkage, no duplicate symbols). Runs without a GPU."""
    objs = []
    for name in ("wfst_launch.cu", "wfst_stream_launch.cu"):
        obj = tmp_path / (name + ".o")
        cmd = ["nvcc", "-std=c++17", "-arch=sm_90", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC", "-c",
               str(ROOT / "decoders/csrc" / name), "-I", str(ROOT / "decoders/include"), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        objs.append(str(obj))
    proc = subprocess.run(["nvcc", "-arch=sm_90", "-shared", "-o", str(tmp_path / "both.so"), *objs],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
