"""Streaming WFST decoding (decoders/wfst_stream.py, CPU reference decoders/csrc/wfst_stream_cpu.cpp) and the
offline decoder's `online` switch: k2 online semantics, chunking invariance, slots, bounded memory, bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from decoders.graph import FINAL
from decoders.wfst import WfstDecoder, WfstDecoderConfig
from decoders.wfst_stream import WfstStream, WfstStreamingDecoder, WfstStreamSlotsFull
from wfst_testlib import (
    k2_model_decode,
    k2py_final_column_emulation,
    random_graph,
    random_log_probs,
    to_k2_text,
)


def _tight_cases(seed: int, n: int, epsilon=None):
    """Random graphs + batches where pruning binds (beams 2-4, max_active 20 on every other graph)."""
    rng = np.random.default_rng(seed)
    for gi in range(n):
        eps = bool(gi % 2) if epsilon is None else epsilon
        g = random_graph(rng, epsilon=eps, finals=["some", "all", "none"][gi % 3])
        cfg = WfstDecoderConfig(search_beam=float(rng.choice([2.0, 3.0, 4.0, 20.0])), min_active=3,
                                max_active=20 if gi % 2 else 10000)
        T = int(rng.integers(1, 40))
        lp = random_log_probs(rng, 3, T, g.num_tokens)
        lengths = torch.tensor([T, int(rng.integers(1, T + 1)), 1])
        yield rng, g, cfg, lp, lengths


def _stream(dec: WfstStreamingDecoder, lp: torch.Tensor, lengths, chunk, rng=None, boosts=None, partial_every=0):
    """Decodes a batch as concurrent streams fed in chunks (`chunk`: an int, or "random" 1..60) and finalizes."""
    B = lp.shape[0]
    streams = [dec.create_stream(boosts[b] if boosts else None) for b in range(B)]
    pos = [0] * B
    calls = 0
    while True:
        live = [b for b in range(B) if pos[b] < int(lengths[b])]
        if not live:
            break
        c = int(rng.integers(1, 61)) if chunk == "random" else int(chunk)
        if chunk == "random" and len(live) > 1:  # any subset of the streams advances in one call
            live = [b for b in live if rng.random() < 0.7] or live[:1]
        n = [min(c, int(lengths[b]) - pos[b]) for b in live]
        # padding past lengths: never read
        x = torch.full((len(live), c, lp.shape[2]), float("nan"), dtype=lp.dtype, device=lp.device)
        for i, b in enumerate(live):
            x[i, : n[i]] = lp[b, pos[b] : pos[b] + n[i]]
        dec.decode_chunk([streams[b] for b in live], x, torch.tensor(n))
        for i, b in enumerate(live):
            pos[b] += n[i]
        calls += 1
        if partial_every and calls % partial_every == 0:
            dec.partial([streams[b] for b in live])  # must not change the search
    return dec.finalize(streams)


def _assert_same(got, want, tag=""):
    assert got.words == want.words, tag
    assert got.has_path == want.has_path and got.reached_final == want.reached_final, tag
    for a, b in zip(got.scores.tolist(), want.scores.tolist()):
        assert (a == b) or abs(a - b) <= 1e-4, (tag, a, b)


# ---- the offline decoder's online switch ----------------------------------------------------------------
def test_online_switch_equals_python_k2_online_model():
    """online=True is k2's online beam (no last-5-frames clauses; final step unchanged), checked against the
    independent Python statement of k2's pruning with the rule switched off; and the switch matters."""
    differs = 0
    for _, g, cfg, lp, lengths in _tight_cases(31, 40, epsilon=False):
        on = WfstDecoder(g, WfstDecoderConfig(**{**cfg.__dict__, "online": True})).decode(lp, lengths)
        off = WfstDecoder(g, cfg).decode(lp, lengths)
        for b in range(3):
            score, words, _ = k2_model_decode(g, lp[b].numpy(), int(lengths[b]), cfg.search_beam, cfg.min_active,
                                              cfg.max_active, last_frames_rule=False)
            assert words == on.words[b] and (score == float(on.scores[b]) or abs(score - float(on.scores[b])) <= 1e-5)
            differs += on.words[b] != off.words[b] or float(on.scores[b]) != float(off.scores[b])
    assert differs > 0  # the last-5-frames rule binds somewhere in these cases: the switch is not a no-op


# ---- streaming == offline online-mode ------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [1, 7, 50, "random"])
def test_streaming_equals_offline_online_mode(chunk):
    for gi, (rng, g, cfg, lp, lengths) in enumerate(_tight_cases(41, 24)):
        boosts = None
        if gi % 4 == 3:  # per-stream boosts, as offline
            boosts = [{f"w{int(w)}": float(rng.uniform(-3, 3))} for w in rng.integers(1, 12, size=3)]
        want = WfstDecoder(g, WfstDecoderConfig(**{**cfg.__dict__, "online": True})).decode(lp, lengths, boosts)
        dec = WfstStreamingDecoder(g, cfg, max_streams=4, compact_min_links=2)  # compact + drain every few steps
        got = _stream(dec, lp, lengths, chunk, rng, boosts, partial_every=3)
        _assert_same(got, want, (gi, chunk))
        assert dec.open_streams == 0


def test_streaming_float16_and_blank_skip_equal_offline():
    rng = np.random.default_rng(5)
    g = random_graph(rng, num_states=30, num_tokens=6, epsilon=True)
    lp = random_log_probs(rng, 2, 60, 6, peaky=4.0)
    lengths = torch.tensor([60, 33])
    for cfg, x in ((WfstDecoderConfig(search_beam=6.0), lp.half()),
                   (WfstDecoderConfig(search_beam=6.0, blank_skip_threshold=0.5, blank_id=5), lp)):
        want = WfstDecoder(g, WfstDecoderConfig(**{**cfg.__dict__, "online": True})).decode(x, lengths)
        got = _stream(WfstStreamingDecoder(g, cfg, max_streams=2), x, lengths, 7, rng)
        _assert_same(got, want)


def test_interleaved_streams_do_not_interfere():
    """Streams opened, advanced in random subsets, closed and re-opened in freed slots: each result is its own
    offline decode."""
    rng = np.random.default_rng(8)
    g = random_graph(rng, num_states=40, num_tokens=7, epsilon=True, finals="some")
    cfg = WfstDecoderConfig(search_beam=5.0, min_active=3, max_active=25)
    dec = WfstStreamingDecoder(g, cfg, max_streams=3, compact_min_links=4)
    lps = [random_log_probs(rng, 1, int(rng.integers(5, 80)), 7)[0] for _ in range(9)]
    want = [WfstDecoder(g, WfstDecoderConfig(**{**cfg.__dict__, "online": True})).decode(x[None], [x.shape[0]])
            for x in lps]
    pending = list(range(9))
    live: dict[int, tuple[WfstStream, int]] = {}  # utterance -> (stream, frames sent)
    done = 0
    while done < 9:
        while pending and dec.open_streams < dec.max_streams:
            u = pending.pop(0)
            live[u] = (dec.create_stream(), 0)
        if rng.random() < 0.05 and len(live) > 1:  # abandon one (closed without a result), redo it later
            u = int(rng.choice(list(live)))
            dec.close(live.pop(u)[0])
            pending.append(u)
            continue
        us = [u for u in live if rng.random() < 0.6] or list(live)[:1]
        c = int(rng.integers(1, 12))
        n = [min(c, lps[u].shape[0] - live[u][1]) for u in us]
        x = torch.zeros(len(us), c, 7)
        for i, u in enumerate(us):
            x[i, : n[i]] = lps[u][live[u][1] : live[u][1] + n[i]]
        dec.decode_chunk([live[u][0] for u in us], x, torch.tensor(n))
        for i, u in enumerate(us):
            live[u] = (live[u][0], live[u][1] + n[i])
        finished = [u for u in us if live[u][1] == lps[u].shape[0]]
        if finished:
            res = dec.finalize([live[u][0] for u in finished])
            for i, u in enumerate(finished):
                assert res.words[i] == want[u].words[0], u
                assert float(res.scores[i]) == float(want[u].scores[0]), u
                del live[u]
                done += 1


# ---- k2's own online decoder ----------------------------------------------------------------------------
def test_equals_k2py_online_intersecter_on_random_graphs():
    """Our streaming decode == k2py.OnlineDenseIntersecter fed the SAME chunks, at tight beams. k2py scores FINAL
    arcs 0 on real frames (wfst_testlib.k2_model_decode); decoding the graph that emulates exactly that
    (k2py_final_column_emulation, a zero column) makes the two searches the same."""
    import k2py

    rng = np.random.default_rng(61)
    agree = total = 0
    for gi in range(40):
        g = random_graph(rng, finals=["some", "all", "none"][gi % 3])
        beam, max_active = float(rng.choice([2.0, 3.0, 4.0])), 20 if gi % 2 else 10000
        kg = k2py.CreateFsaVecFromStr(to_k2_text(g), -1, False)
        T = int(rng.integers(1, 40))
        lp = random_log_probs(rng, 1, T, g.num_tokens)
        chunk = int(rng.choice([1, 3, 7, 50]))
        x = np.ascontiguousarray(lp[0].numpy())
        k2dec = k2py.OnlineDenseIntersecter(kg["fsa"], kg["aux_labels"], beam, 8.0, 3, max_active, True)
        for a in range(0, T, chunk):
            k2dec.decode(np.ascontiguousarray(x[a : a + chunk]), False)
        labels = [int(v) for v in k2dec.finish()[1][0]]
        padded = torch.cat([lp, torch.zeros(1, T, 1)], dim=2)
        dec = WfstStreamingDecoder(k2py_final_column_emulation(g), WfstDecoderConfig(search_beam=beam, min_active=3,
                                                                                     max_active=max_active))
        res = _stream(dec, padded, torch.tensor([T]), chunk, rng)
        total += 1
        if len(labels) != T:  # k2py found no complete path
            agree += not res.has_path[0]
            continue
        # k2py reports per-frame labels; several paths may read them (constrained_best's best one may have been
        # pruned): the check is that k2py's labels are read by a path with OUR words and OUR score
        score = _best_with_labels_and_words(g, x, labels, res.words[0])
        agree += abs(score - float(res.scores[0])) <= 1e-4
    assert agree == total


def _best_with_labels_and_words(g, lp: np.ndarray, labels, words) -> float:
    """Best score of a path reading exactly `labels` (one per frame), then a FINAL arc (or, with no FINAL arc
    reachable, any arc redirected: allow_partial), whose words are exactly `words` (-inf: no such path)."""
    rs, il, dst, wt, ol = g.row_splits, g.ilabel, g.dest, g.weight, g.olabel
    cur = {(g.start_state, 0): np.float32(0.0)}  # (state, words matched) -> score

    def extend(k, a):
        if not ol[a]:
            return k
        return k + 1 if k < len(words) and int(ol[a]) == words[k] else None

    for t, lab in enumerate(labels):
        nxt = {}
        for (s, k), sc in cur.items():
            for a in range(rs[s], rs[s + 1]):
                k2 = extend(k, a) if il[a] == lab else None
                if k2 is not None:
                    e = np.float32(sc + np.float32(np.float32(lp[t, lab]) + np.float32(wt[a])))
                    key = (int(dst[a]), k2)
                    if key not in nxt or e > nxt[key]:
                        nxt[key] = e
        cur = nxt
    has_final = any(il[a] == FINAL for (s, _) in cur for a in range(rs[s], rs[s + 1]))
    best = -math.inf
    for (s, k), sc in cur.items():
        for a in range(rs[s], rs[s + 1]):
            if (il[a] == FINAL or not has_final) and extend(k, a) == len(words):
                best = max(best, float(np.float32(sc + np.float32(wt[a]))))
    return best


@pytest.mark.slow
@pytest.mark.parametrize("set_name", ["clean", "other"])
def test_equals_k2py_online_on_embedded_sets(set_name):
    """The embedded tiny workload (char HLG, search_beam 20), streamed in 40-frame chunks (1.6 s), vs k2py's
    online intersecter fed the same chunks: identical words, scores within 1e-3 (k2py rescored by a forced pass)."""
    import os
    from pathlib import Path

    import k2py

    from decoders.graph import WfstGraph
    from eval.acoustic.base import Utterance
    from eval.acoustic.simulator import SimulatorSource
    from recipes.build_graphs import build_graphs
    from recipes.graphs.paths import ArcIndex, forced_best_path
    from recipes.workload import prepare_workload

    KIND, TOPOLOGY = "char", "minimal"  # as tests/test_wfst_agreement.py
    wl = prepare_workload("tiny")
    root = Path(os.environ.get("BEAMDEC_TEST_GRAPH_ROOT", "data/graphs"))
    gdir = root / "tiny" / f"{KIND}_blanklast" / TOPOLOGY
    build_graphs(workload=wl, token_kind=KIND, blank="last", topologies=[TOPOLOGY], out_root=root)
    tokens = wl.token_set(KIND, "last")
    utts = [Utterance(id=u["id"], text=u["text"], duration=float(u["duration"])) for u in wl.utterances(set_name)][:100]
    batch = next(iter(SimulatorSource(tokens, wl.simulator_config(set_name)).batches(utts, len(utts))))
    lp, lengths = batch.log_probs, batch.lengths
    hlg = WfstGraph.load(gdir / "HLG.bin")
    kg = k2py.CreateFsaVecFromStr((gdir / "HLG.k2.txt").read_text(encoding="utf-8"), -1, False)
    index = ArcIndex(hlg)
    dec = WfstStreamingDecoder(hlg, WfstDecoderConfig(search_beam=20.0), max_streams=len(utts))
    res = _stream(dec, lp, lengths, 40)
    same = 0
    for b in range(len(utts)):
        L = int(lengths[b])
        x = np.ascontiguousarray(lp[b, :L].numpy())
        k2dec = k2py.OnlineDenseIntersecter(kg["fsa"], kg["aux_labels"], 20.0, 8.0, 30, 10000, True)
        for a in range(0, L, 40):
            k2dec.decode(np.ascontiguousarray(x[a : a + 40]), False)
        labels = [int(v) for v in k2dec.finish()[1][0]]
        p = forced_best_path(hlg, labels, x, index=index)
        if list(p.words) == res.words[b]:
            same += 1
            assert abs(float(p.score) - float(res.scores[b])) <= 1e-3
    assert same == len(utts)


# ---- partial hypotheses -------------------------------------------------------------------------------
def _viterbi_no_final(g, lp: np.ndarray, frames: int):
    """(best score over every state after `frames` frames, its words, their frames): exhaustive, epsilon-free."""
    rs, il, dst, wt, ol = g.row_splits, g.ilabel, g.dest, g.weight, g.olabel
    cur = {g.start_state: (np.float32(0.0), (), ())}
    for t in range(frames):
        nxt = {}
        for s, (sc, ws, fs) in cur.items():
            for a in range(rs[s], rs[s + 1]):
                if il[a] >= 0:
                    e = np.float32(sc + np.float32(np.float32(lp[t, il[a]]) + np.float32(wt[a])))
                    d = int(dst[a])
                    if d not in nxt or e > nxt[d][0]:
                        nxt[d] = (e, ws + ((int(ol[a]),) if ol[a] else ()), fs + ((t,) if ol[a] else ()))
        cur = nxt
    if not cur:
        return -math.inf, [], []
    sc, ws, fs = max(cur.values(), key=lambda v: v[0])
    return float(sc), list(ws), list(fs)


def test_partial_is_the_best_path_so_far():
    """Without pruning, partial() after t frames is the exhaustive best path over every state (no FINAL arc
    required), with the frame of each word's arc; and asking for it changes nothing."""
    rng = np.random.default_rng(71)
    cfg = WfstDecoderConfig(search_beam=1e6, min_active=1, max_active=10**8)
    checked = 0
    for _ in range(15):
        g = random_graph(rng, num_states=12, num_tokens=5)
        T = int(rng.integers(2, 14))
        lp = random_log_probs(rng, 1, T, g.num_tokens)
        dec = WfstStreamingDecoder(g, cfg, max_streams=1, compact_min_links=1)
        s = dec.create_stream()
        for t in range(T):
            dec.decode_chunk([s], lp[:, t : t + 1], [1])
            (hyp,) = dec.partial([s])
            score, words, frames = _viterbi_no_final(g, lp[0].numpy(), t + 1)
            if score == -math.inf:
                assert hyp.score == -math.inf and list(hyp.words) == []
                continue
            assert hyp.score == pytest.approx(score, abs=1e-4)
            assert [int(w[1:]) for w in hyp.words] == words and list(hyp.timesteps) == frames
            checked += 1
        _assert_same(dec.finalize([s]), WfstDecoder(g, WfstDecoderConfig(**{**cfg.__dict__, "online": True}))
                     .decode(lp, [T]))
    assert checked > 30


# ---- bounded memory ------------------------------------------------------------------------------------
def test_link_store_does_not_grow_with_stream_length():
    """A stream's link store is bounded by compaction + draining, not by its length: 40x the frames, the same
    peak store (while the search created far more links than it holds), and the result is the offline one."""
    rng = np.random.default_rng(103)
    g = random_graph(rng, num_states=60, num_tokens=6, max_emitting=5, finals="all")
    lp = random_log_probs(rng, 1, 20000, 6, peaky=1.0)
    cfg = WfstDecoderConfig(search_beam=12.0)
    peaks = {}
    for frames in (500, 20000):
        dec = WfstStreamingDecoder(g, cfg, max_streams=1, compact_min_links=256)
        s = dec.create_stream()
        for a in range(0, frames, 50):
            dec.decode_chunk([s], lp[:, a : a + 50], [min(50, frames - a)])
        st = dec.memory_stats(s)
        peaks[frames] = st
        res = dec.finalize([s])
        if frames == 20000:
            want = WfstDecoder(g, WfstDecoderConfig(**{**cfg.__dict__, "online": True})).decode(lp, [frames])
            _assert_same(res, want)
            assert len(res.words[0]) > 1000 and st["drained_words"] > 0.9 * len(res.words[0])
    long, short = peaks[20000], peaks[500]
    assert long["links_created"] > 20 * short["peak_stored_links"]
    assert long["peak_stored_links"] <= short["peak_stored_links"] * 1.5 + 64
    assert long["stored_links"] <= 2 * 256 + 4 * long["frontier"]


# ---- bad input ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(3)
    g = random_graph(rng, num_states=10, num_tokens=4)
    return g, random_log_probs(rng, 2, 5, 4)


def test_bad_input_gives_one_line_errors(small):
    g, lp = small
    dec = WfstStreamingDecoder(g, WfstDecoderConfig(), max_streams=2)
    other = WfstStreamingDecoder(g, WfstDecoderConfig(), max_streams=1)
    a, b = dec.create_stream(), dec.create_stream()
    with pytest.raises(WfstStreamSlotsFull, match="all 2 stream slots"):
        dec.create_stream()
    foreign = other.create_stream()
    cases = [
        (lambda: dec.decode_chunk([foreign], lp[:1], [5]), ValueError, "another WfstStreamingDecoder"),
        (lambda: dec.decode_chunk([a], lp[:1, :0], [0]), ValueError, "0 frames"),
        (lambda: dec.decode_chunk([a], lp[:1], [0]), ValueError, "0 frames"),
        (lambda: dec.decode_chunk([a], lp[:1], [6]), ValueError, "lengths must be in"),
        (lambda: dec.decode_chunk([a], lp, [5, 5]), ValueError, "2 rows for 1 streams"),
        (lambda: dec.decode_chunk([a, a], lp, [5, 5]), ValueError, "appears twice"),
        (lambda: dec.decode_chunk([a], lp[:1, :, :3], [5]), ValueError, "V=3"),
        (lambda: dec.decode_chunk([a], lp[0], [5]), ValueError, r"shape \(B, T, V\)"),
        (lambda: dec.decode_chunk(a, lp[:1], [5]), TypeError, "list of WfstStream"),
        (lambda: dec.decode_chunk([a], lp[:1].double(), [5]), ValueError, "float32 or float16"),
        (lambda: dec.decode_chunk([a], torch.full_like(lp[:1], float("nan")), [5]), ValueError, "NaN"),
        (lambda: dec.create_stream(boosts=[{"w1": 1.0}]), TypeError, "dict"),
    ]
    for fn, exc, match in cases:
        with pytest.raises(exc, match=match) as info:
            fn()
        assert "\n" not in str(info.value)
    dec.decode_chunk([a, b], lp, [5, 3])
    dec.finalize([a])
    for fn in (lambda: dec.decode_chunk([a], lp[:1], [5]), lambda: dec.finalize([a]), lambda: dec.partial([a]),
               lambda: dec.close(a)):
        with pytest.raises(ValueError, match="closed"):
            fn()
    dec.close(b)
    with pytest.raises(ValueError, match="closed"):
        dec.finalize([b])
    c = dec.create_stream()  # freed slots are reused; the old handles stay dead
    assert c.slot in (a.slot, b.slot)
    with pytest.raises(ValueError, match="closed"):
        dec.partial([a if c.slot == a.slot else b])
    with pytest.raises(ValueError, match="max_streams"):
        WfstStreamingDecoder(g, WfstDecoderConfig(), max_streams=0)


def test_empty_stream_finalizes_like_an_empty_utterance(small):
    g, lp = small
    dec = WfstStreamingDecoder(g, WfstDecoderConfig())
    res = dec.finalize([dec.create_stream()])
    want = WfstDecoder(g, WfstDecoderConfig(online=True)).decode(lp[:1], [0])
    _assert_same(res, want)
    assert dec.finalize([]).words == []
