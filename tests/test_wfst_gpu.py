"""CUDA WFST decoder vs the CPU reference (run on the GPU host: pytest -m gpu tests/test_wfst_gpu.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from decoders.wfst import WfstDecoder, WfstDecoderConfig
from wfst_testlib import compose_with_boosts, dip_case, random_batch, random_graph, random_log_probs

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("epsilon", [False, True])
@pytest.mark.parametrize("finals", ["some", "none", "all"])
def test_gpu_matches_cpu_reference(batch, epsilon, finals):
    rng = np.random.default_rng(100 + batch + 7 * epsilon + len(finals))
    n_words_diff = 0
    for gi in range(6):
        g = random_graph(rng, epsilon=epsilon, finals=finals, num_states=int(rng.integers(2, 300)),
                         num_tokens=int(rng.choice([2, 29, 33])))
        cfg = WfstDecoderConfig(search_beam=float(rng.choice([4.0, 12.0, 20.0])), min_active=int(rng.integers(1, 30)),
                                max_active=int(rng.choice([40, 10000])))
        lp, lengths = random_batch(rng, batch, g.num_tokens)
        for dtype in (torch.float32, torch.float16):
            x = lp.to(dtype)
            cpu = WfstDecoder(g, cfg, "cpu").decode(x, lengths)
            gpu = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths)
            assert all(o == 0 for o in gpu.overflow), gpu.overflow
            for b in range(batch):
                sg, sc = float(gpu.scores[b]), float(cpu.scores[b])
                assert gpu.has_path[b] == cpu.has_path[b], (gi, b)
                assert gpu.reached_final[b] == cpu.reached_final[b], (gi, b)
                if math.isinf(sc):
                    assert math.isinf(sg)
                    continue
                assert abs(sg - sc) <= 1e-4 * max(1.0, abs(sc)), (gi, b, sg, sc)
                if gpu.words[b] != cpu.words[b]:
                    n_words_diff += 1  # only allowed on exact ties: same score, different arcs
                    assert sg == sc, (gi, b, gpu.words[b], cpu.words[b])
    assert n_words_diff <= max(1, batch // 8)


def _assert_scores_near_cpu(cpu, res, lanes, key):
    """Each of `lanes` scores as the CPU reference did: both -inf, or within 1e-4 (relative above 1)."""
    for b in lanes:
        sc, sg = float(cpu.scores[b]), float(res.scores[b])
        assert (math.isinf(sc) and math.isinf(sg)) or abs(sg - sc) <= 1e-4 * max(1.0, abs(sc)), key + (b,)


def _rescue_case(rng, batch, epsilon, gi, wide=False, cycle_words=True):
    """One random case of the launch-form tests: a graph of up to 300 states (wide: up to 40 emitting arcs per state,
    no final state reachable when gi == 4, no word on an epsilon cycle), a beam and max_active, a 16-token frontier
    when gi == 3 (a capacity rescue), a batch with empty and one-frame utterances, and boosts on lane 0.
    cycle_words=False: no word on an epsilon cycle in any graph (lane 0's boost can make a cycle with a word gain
    score: the decoders' one-line error, raised before either form runs)."""
    num_states, num_tokens = int(rng.integers(2, 300)), int(rng.choice([2, 29]))
    extra = {} if cycle_words else dict(words_on_epsilon_cycles=False)
    if wide:
        extra = dict(max_emitting=int(rng.choice([8, 40])), finals="none" if gi == 4 else "some",
                     words_on_epsilon_cycles=False)
    g = random_graph(rng, epsilon=epsilon, num_states=num_states, num_tokens=num_tokens, **extra)
    cfg = WfstDecoderConfig(search_beam=float(rng.choice([4.0, 12.0])), max_active=int(rng.choice([40, 10000])),
                            frontier_capacity=16 if gi == 3 else None)
    lp, lengths = random_batch(rng, batch, g.num_tokens)
    return g, cfg, lp, lengths, [{1: 1.5}] + [{}] * (batch - 1)


@pytest.mark.parametrize("batch", [1, 3, 33])
@pytest.mark.parametrize("epsilon", [False, True])
def test_gpu_persistent_launch_equals_plain_launches_and_cpu(monkeypatch, batch, epsilon):
    """The default step loop is one cooperative kernel with grid barriers where the plain path
    (BEAMDEC_WFST_PERSISTENT=0) has kernel boundaries: the same step bodies, so the same scores as the plain
    launches and the CPU, on odd batch sizes, empty and one-frame utterances, fp16, boosts and a capacity rescue."""
    rng = np.random.default_rng(500 + batch + 7 * epsilon)
    for gi in range(4):
        g, cfg, lp, lengths, boosts = _rescue_case(rng, batch, epsilon, gi)
        for dtype in (torch.float32, torch.float16):
            x = lp.to(dtype)
            monkeypatch.setenv("BEAMDEC_WFST_PERSISTENT", "0")
            plain = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
            monkeypatch.setenv("BEAMDEC_WFST_PERSISTENT", "1")
            forced = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
            monkeypatch.delenv("BEAMDEC_WFST_PERSISTENT")
            pers = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
            assert pers.scores.tolist() == forced.scores.tolist() and pers.words == forced.words, (gi, str(dtype))
            cpu = WfstDecoder(g, cfg, "cpu").decode(x, lengths, boosts=boosts)
            assert pers.scores.tolist() == plain.scores.tolist(), (gi, str(dtype))
            assert pers.overflow == plain.overflow and pers.has_path == plain.has_path, (gi, str(dtype))
            assert sum(pers.words[b] != plain.words[b] for b in range(batch)) <= max(1, batch // 8)
            _assert_scores_near_cpu(cpu, pers, range(batch), (gi,))


_WALK_SWITCHES = ["BEAMDEC_WFST_ACQ_REL_ARRIVE=0", "BEAMDEC_WFST_EARLY_LOADS=1", "BEAMDEC_WFST_EARLY_LOADS=2",
                  "BEAMDEC_WFST_EARLY_LOADS=2,BEAMDEC_WFST_EMIT_SLOTS=0", "BEAMDEC_WFST_BOUND_MAX=1",
                  "BEAMDEC_WFST_BOUND_MAX=1,BEAMDEC_WFST_EMIT_SLOTS=0"]


@pytest.mark.parametrize("batch", [1, 3, 33])
@pytest.mark.parametrize("epsilon", [False, True])
@pytest.mark.parametrize("persistent", ["1", "0"])
@pytest.mark.parametrize("switch", _WALK_SWITCHES)
def test_walk_switch_equals_default_and_cpu(monkeypatch, batch, epsilon, persistent, switch):
    """A launcher switch of the 1-best walks against the default and the CPU, in the persistent kernel (both walk
    forms: the HLG one on wide epsilon-free states, with the spread walks and half the grid at these batches) and the
    plain launches (where the switch has nothing to change): BEAMDEC_WFST_ACQ_REL_ARRIVE=0, the fence.sc arrive
    counter where the default is one acq_rel atomic (wfst_kernels.cuh arrive_and_prepare: the last block must see
    every block's claims, candidates and counters, so a missed write shows as a lost token, a wrong count or a
    different score); BEAMDEC_WFST_EARLY_LOADS=1, the Resolve walk's early loads of a claimed token's state and
    bounds (resolve_step kEarly, the HLG form); BEAMDEC_WFST_EARLY_LOADS=2, those and the carried ranges (each token's
    emitting arc range written beside it and read by the next step's walks: a range written wrong or not at all walks
    other arcs), also with emit slots off (its Resolve writes through the candidate path); BEAMDEC_WFST_BOUND_MAX=1,
    the bound max at batches 1 and 3 (no Max walk: the Expand admits against the best token's best arc and finds the
    maximum itself, the Resolve drops the tokens the exact cutoff would not have admitted: one kept wrongly changes the
    dynamic beam where max_active is 40), also with emit slots off. Odd batches, empty and one-frame utterances,
    fp16, boosts, a capacity rescue (its lanes compared where neither form flagged them)."""
    settings = dict(kv.split("=") for kv in switch.split(","))
    draw = 2600 + batch + 7 * epsilon + 13 * (persistent == "1") + 101 * _WALK_SWITCHES.index(switch)
    rng = np.random.default_rng(draw)
    monkeypatch.setenv("BEAMDEC_WFST_PERSISTENT", persistent)
    for gi in range(5):
        g, cfg, lp, lengths, boosts = _rescue_case(rng, batch, epsilon, gi, wide=gi % 2 == 1, cycle_words=False)
        for dtype in (torch.float32, torch.float16):
            x = lp.to(dtype)
            for name, value in settings.items():
                monkeypatch.setenv(name, value)
            switched = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
            for name in settings:
                monkeypatch.delenv(name)
            default = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
            key = (switch, gi, str(dtype))
            exact = [b for b in range(batch) if switched.overflow[b] == 0 and default.overflow[b] == 0]
            if gi != 3:
                assert default.overflow == switched.overflow and len(exact) == batch, key
            assert [default.scores[b] for b in exact] == [switched.scores[b] for b in exact], key
            assert [default.has_path[b] for b in exact] == [switched.has_path[b] for b in exact], key
            assert sum(default.words[b] != switched.words[b] for b in exact) <= max(1, batch // 8), key
            cpu = WfstDecoder(g, cfg, "cpu").decode(x, lengths, boosts=boosts)
            _assert_scores_near_cpu(cpu, switched, exact, key)


@pytest.mark.parametrize("emit_slots", ["1", "0"])
def test_bound_max_leaves_dead_what_the_exact_cutoff_prunes(monkeypatch, emit_slots):
    """The bound max (BEAMDEC_WFST_BOUND_MAX=1) admits frame 1's arcs against the best token's only arc (-10 - beam,
    wfst_testlib.dip_case), so it claims state 4 (-9), which the exact cutoff (-1 - beam) prunes; its Resolve must
    leave state 4 dead, or state 4 wins the utterance (-9 instead of -21; tests/test_wfst_cpu.py checks that premise on
    the CPU reference). Batch 2 (both lanes the same utterance), fp32 and fp16, the default against the bound, with
    emit slots on (the Resolve's claims path) and off (its candidate path)."""
    g, lp = dip_case()
    cfg = WfstDecoderConfig(search_beam=4.0, min_active=1)
    x = lp.expand(2, -1, -1).contiguous()
    monkeypatch.setenv("BEAMDEC_WFST_EMIT_SLOTS", emit_slots)
    for dtype in (torch.float32, torch.float16):
        for bound in ("0", "1"):
            monkeypatch.setenv("BEAMDEC_WFST_BOUND_MAX", bound)
            res = WfstDecoder(g, cfg, "cuda").decode(x.to(dtype).cuda(), [3, 3])
            assert res.scores.tolist() == [-21.0, -21.0] and res.overflow == [0, 0], (bound, str(dtype))


@pytest.mark.parametrize("batch", [1, 3, 33])
@pytest.mark.parametrize("epsilon", [False, True])
@pytest.mark.parametrize("persistent", ["1", "0"])
def test_emit_slots_equal_the_candidate_form_and_cpu(monkeypatch, batch, epsilon, persistent):
    """Emit slots (the default; BEAMDEC_WFST_EMIT_SLOTS=0 selects the candidate form): the emitting step appends no
    candidates; each slot's packed value names its winner (source token, arc offset) and the step's Resolve walks the
    claimed tokens. Same scores as the candidate
    form and the CPU, in the persistent kernel and the plain launches, on odd batches, empty and one-frame utterances,
    fp16, boosts, epsilon closures (whose passes keep candidates), final and redirected steps, a frontier-capacity
    rescue, and with the fused max."""
    rng = np.random.default_rng(1300 + batch + 7 * epsilon + 31 * int(persistent))
    monkeypatch.setenv("BEAMDEC_WFST_PERSISTENT", persistent)
    for gi in range(5):
        g, cfg, lp, lengths, boosts = _rescue_case(rng, batch, epsilon, gi, wide=True)
        for dtype in (torch.float32, torch.float16):
            x = lp.to(dtype)
            cpu = WfstDecoder(g, cfg, "cpu").decode(x, lengths, boosts=boosts)
            for fused in (("0", "1") if persistent == "1" else ("0",)):
                monkeypatch.setenv("BEAMDEC_WFST_FUSED_MAX", fused)
                monkeypatch.setenv("BEAMDEC_WFST_EMIT_SLOTS", "0")
                cands = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
                monkeypatch.setenv("BEAMDEC_WFST_EMIT_SLOTS", "1")
                slots = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
                monkeypatch.delenv("BEAMDEC_WFST_EMIT_SLOTS")
                key = (gi, str(dtype), fused)
                # Overflow flags may differ: the slot form's emitting step appends no candidates, so it cannot overflow
                # the candidate capacity, where the candidate form can even after its rescues (session 22: gi 3's
                # 16-token frontier rescued to 1,024 tokens with 2,048 candidates for ~5,000 arcs; that lane is
                # flagged, and the slot form's unflagged score is the CPU's). Lanes the candidate form left flagged
                # are not compared with it.
                exact = [b for b in range(batch) if cands.overflow[b] == 0]
                assert all(slots.overflow[b] == 0 for b in exact), key
                assert [slots.scores[b] for b in exact] == [cands.scores[b] for b in exact], key
                assert [slots.has_path[b] for b in exact] == [cands.has_path[b] for b in exact], key
                assert [slots.reached_final[b] for b in exact] == [cands.reached_final[b] for b in exact], key
                # words may differ only between exactly tied paths (the slot's tie order differs)
                assert sum(slots.words[b] != cands.words[b] for b in exact) <= max(1, batch // 8), key
                # every fused setting's slot form against the CPU
                _assert_scores_near_cpu(cpu, slots, [b for b in range(batch) if not slots.overflow[b]], key)


@pytest.mark.parametrize("persistent", ["1", "0"])
def test_emit_slots_flag_an_understated_out_degree(monkeypatch, persistent):
    """The op sizes the emit slots' arc-offset bits by the largest out-degree its caller passes. A caller that
    understates it (here 1: zero offset bits) gets every arc whose offset does not fit dropped and its lane flagged
    (kOverflowCandidates), never an offset packed into the source token's bits: each lane is flagged or exact."""
    rng = np.random.default_rng(4242)
    monkeypatch.setenv("BEAMDEC_WFST_PERSISTENT", persistent)
    monkeypatch.setenv("BEAMDEC_WFST_EMIT_SLOTS", "1")
    flagged = 0
    for epsilon in (False, True):
        g = random_graph(rng, epsilon=epsilon, num_states=120, num_tokens=29, max_emitting=8)
        cfg = WfstDecoderConfig(search_beam=12.0, max_active=10000, max_rescues=0)
        lp, lengths = random_batch(rng, 9, g.num_tokens)
        cpu = WfstDecoder(g, cfg, "cpu").decode(lp, lengths)
        dec = WfstDecoder(g, cfg, "cuda")
        assert dec._graph["max_degree"] > 1
        dec._graph = dict(dec._graph, max_degree=1)  # a copy: the upload cache keeps the true degree
        res = dec.decode(lp.cuda(), lengths)
        for b in range(9):
            if res.overflow[b]:
                assert res.overflow[b] & 1, (epsilon, b, res.overflow[b])
                flagged += 1
        _assert_scores_near_cpu(cpu, res, [b for b in range(9) if not res.overflow[b]], (epsilon,))
    assert flagged > 0


@pytest.mark.parametrize("blocks", ["2", "5", "16"])
def test_single_cluster_launch_equals_the_cooperative_one_and_cpu(monkeypatch, capfd, blocks):
    """BEAMDEC_WFST_CLUSTER=N (opt-in, batches up to 8): the persistent kernel as ONE thread-block cluster of N blocks
    with hardware cluster barriers instead of every resident block with grid barriers. The walks' spans follow the
    grid, so the scores equal the cooperative launch's bit for bit and the CPU's, on odd batches, empty and one-frame
    utterances, fp16, boosts, epsilon closures and a capacity rescue. The launcher says on stderr when the device
    refuses the cluster launch (it then runs the cooperative one): that must not happen on an sm_90 GPU."""
    rng = np.random.default_rng(9100 + int(blocks))
    for batch in (1, 3, 8):
        for epsilon in (False, True):
            for gi in range(4):
                g, cfg, lp, lengths, boosts = _rescue_case(rng, batch, epsilon, gi)
                cpu = WfstDecoder(g, cfg, "cpu").decode(lp, lengths, boosts=boosts)
                for dtype in (torch.float32, torch.float16):
                    x = lp.to(dtype).cuda()
                    monkeypatch.delenv("BEAMDEC_WFST_CLUSTER", raising=False)
                    coop = WfstDecoder(g, cfg, "cuda").decode(x, lengths, boosts=boosts)
                    monkeypatch.setenv("BEAMDEC_WFST_CLUSTER", blocks)
                    clus = WfstDecoder(g, cfg, "cuda").decode(x, lengths, boosts=boosts)
                    monkeypatch.delenv("BEAMDEC_WFST_CLUSTER")
                    key = (batch, epsilon, gi, str(dtype))
                    assert clus.scores.tolist() == coop.scores.tolist(), key
                    assert clus.overflow == coop.overflow, key
                    assert clus.has_path == coop.has_path and clus.reached_final == coop.reached_final, key
                    assert sum(clus.words[b] != coop.words[b] for b in range(batch)) <= max(1, batch // 4), key
                    if dtype == torch.float32:
                        _assert_scores_near_cpu(cpu, clus, [b for b in range(batch) if not clus.overflow[b]], key)
    assert "single-cluster launch was refused" not in capfd.readouterr().err


@pytest.mark.parametrize("blocks_per_sm", ["1", "2"])
def test_gpu_results_do_not_depend_on_the_walk_grid(monkeypatch, blocks_per_sm):
    """BEAMDEC_WFST_BLOCKS_PER_SM shrinks the walk grids (an A/B knob for small batches): the warps' spans follow the
    grid, so every item is still visited once -- the scores equal the default grid's and the CPU's."""
    rng = np.random.default_rng(77)
    for epsilon in (False, True):
        g = random_graph(rng, epsilon=epsilon, num_states=250, num_tokens=29)
        cfg = WfstDecoderConfig(search_beam=14.0, max_active=10000)
        lp = random_log_probs(rng, 5, 37, g.num_tokens)
        lengths = torch.tensor([37, 0, 1, 20, 36])
        monkeypatch.delenv("BEAMDEC_WFST_BLOCKS_PER_SM", raising=False)
        default = WfstDecoder(g, cfg, "cuda").decode(lp.cuda(), lengths)
        monkeypatch.setenv("BEAMDEC_WFST_BLOCKS_PER_SM", blocks_per_sm)
        small = WfstDecoder(g, cfg, "cuda").decode(lp.cuda(), lengths)
        cpu = WfstDecoder(g, cfg, "cpu").decode(lp, lengths)
        assert small.scores.tolist() == default.scores.tolist()
        # words may differ only between exactly tied paths (which of them wins is the atomics' order)
        assert sum(small.words[b] != default.words[b] for b in range(5)) <= 1
        assert all(o == 0 for o in small.overflow), small.overflow
        for b in range(5):
            assert abs(float(small.scores[b]) - float(cpu.scores[b])) <= 1e-4 * max(1.0, abs(float(cpu.scores[b]))) \
                or (math.isinf(float(cpu.scores[b])) and math.isinf(float(small.scores[b])))


@pytest.mark.parametrize("epsilon", [False, True])
def test_gpu_boosting_equals_composition(epsilon):
    rng = np.random.default_rng(200 + epsilon)
    for _ in range(5):
        g = random_graph(rng, epsilon=epsilon, num_words=8, num_states=60)
        boosts = {int(w): float(rng.uniform(-3, 3)) for w in rng.choice(np.arange(1, 8), size=3, replace=False)}
        composed = compose_with_boosts(g, boosts)
        cfg = WfstDecoderConfig(search_beam=12.0, min_active=2, max_active=50, eps_iterations=32)
        lp = random_log_probs(rng, 3, 15, g.num_tokens)
        lengths = torch.tensor([15, 7, 0])
        got = WfstDecoder(g, cfg, "cuda").decode(lp.cuda(), lengths, boosts=[boosts] * 3)
        want = WfstDecoder(composed, cfg, "cpu").decode(lp, lengths)
        for b in range(3):
            assert float(got.scores[b]) == pytest.approx(float(want.scores[b]), rel=2e-5, abs=1e-4)
            assert got.words[b] == want.words[b]


def test_planted_tiny_capacities_flag_and_rescue_recovers():
    rng = np.random.default_rng(300)
    g = random_graph(rng, num_states=400, num_tokens=29, max_emitting=8, epsilon=True)
    lp = random_log_probs(rng, 8, 30, g.num_tokens, peaky=1.0)
    lengths = torch.full((8,), 30)
    big = WfstDecoderConfig(search_beam=20.0)
    ref = WfstDecoder(g, big, "cuda").decode(lp.cuda(), lengths)
    assert all(o == 0 for o in ref.overflow)
    tiny = dict(frontier_capacity=4, candidate_factor=1, arena_capacity=64, words_capacity=1, eps_iterations=1)
    flagged = WfstDecoder(g, WfstDecoderConfig(search_beam=20.0, max_rescues=0, **tiny), "cuda").decode(
        lp.cuda(), lengths)
    assert all(o != 0 for o in flagged.overflow)
    rescued = WfstDecoder(g, WfstDecoderConfig(search_beam=20.0, rescue_factor=64, max_rescues=3, **tiny),
                          "cuda").decode(lp.cuda(), lengths)
    assert rescued.rescued == list(range(8))
    assert all(o == 0 for o in rescued.overflow)
    assert rescued.words == ref.words
    assert torch.allclose(rescued.scores, ref.scores, rtol=1e-5)


def test_gpu_bad_inputs():
    rng = np.random.default_rng(400)
    g = random_graph(rng, num_tokens=5)
    dec = WfstDecoder(g, WfstDecoderConfig(), "cuda")
    lp = random_log_probs(rng, 2, 4, 5)
    with pytest.raises(ValueError, match="is on cpu"):
        dec.decode(lp, [4, 4])
    with pytest.raises(ValueError, match=r"NaN or \+inf"):
        bad = lp.clone()
        bad[0, 1, 2] = float("nan")
        dec.decode(bad.cuda(), [4, 4])
    with pytest.raises(ValueError, match="V="):
        dec.decode(lp[..., :4].contiguous().cuda(), [4, 4])


@pytest.mark.parametrize("epsilon", [False, True])
def test_launch_modes_agree(epsilon, monkeypatch):
    """CUDA-graph replay (cached executable, updated per call; it replays the per-kernel loop, so
    BEAMDEC_WFST_PERSISTENT=0) changes no result: it equals the plain launches, across repeated calls with new
    buffers and shapes, and both equal the CPU reference."""
    rng = np.random.default_rng(500 + epsilon)
    g = random_graph(rng, epsilon=epsilon, num_states=200, num_tokens=29, max_emitting=6)
    cfg = WfstDecoderConfig(search_beam=10.0, max_active=60)
    runs = []
    for batch, T in [(5, 33), (5, 40), (7, 12), (5, 33)]:  # same bucket twice: the exec-update path
        lp = random_log_probs(rng, batch, T, g.num_tokens).cuda()
        lengths = torch.from_numpy(rng.integers(0, T + 1, size=batch))
        runs.append((lp, lengths))
    results = {}
    monkeypatch.setenv("BEAMDEC_WFST_PERSISTENT", "0")
    for graph_mode in ["0", "1"]:
        monkeypatch.setenv("BEAMDEC_WFST_CUDA_GRAPH", graph_mode)
        dec = WfstDecoder(g, cfg, "cuda")
        results[graph_mode] = [dec.decode(lp, lengths) for lp, lengths in runs]
    ref = results["0"]
    cpu = [WfstDecoder(g, cfg, "cpu").decode(lp.cpu(), lengths) for lp, lengths in runs]
    for mode, res in results.items():
        for r, want, c in zip(res, ref, cpu):
            assert torch.equal(r.scores, want.scores), mode
            assert torch.allclose(r.scores, c.scores, rtol=1e-5, atol=1e-5), mode
            assert r.overflow == want.overflow and r.reached_final == want.reached_final, mode


def _workload_graph_case():
    """(graphs {name: WfstGraph}, log-probs, lengths) from the carried benchmark inputs
    (eval/bench/wfst_gpu_run.sh: data/graphs/tiny/char_blanklast/{compact,normal} + data/carry/lp_other_char.pt)."""
    from pathlib import Path

    from decoders.graph import WfstGraph

    root = Path("data/graphs/tiny/char_blanklast")
    lp_file = Path("data/carry/lp_other_char.pt")
    paths = {f"{t}/{g}": root / t / f"{g}.bin" for t in ("compact", "normal") for g in ("TLG", "HLG")}
    if not lp_file.is_file() or not all(p.is_file() for p in paths.values()):
        pytest.skip("needs the carried benchmark inputs (bash eval/bench/wfst_gpu_run.sh prepare / run)")
    data = torch.load(lp_file)
    return {k: WfstGraph.load(p) for k, p in paths.items()}, data["lp"][:24].contiguous(), data["len"][:24]


def compare_on_workload_graphs(device: str) -> dict:
    """Per graph: utterances whose words differ between `device` and the CPU reference, and the largest
    relative score difference (the CPU reference is the spec)."""
    graphs, lp, lengths = _workload_graph_case()
    out = {}
    for name, g in graphs.items():
        cfg = WfstDecoderConfig(search_beam=17.0)
        want = WfstDecoder(g, cfg, "cpu").decode(lp, lengths)
        got = WfstDecoder(g, cfg, device).decode(lp.to(device), lengths)
        assert got.has_path == want.has_path, name
        finite = torch.isfinite(want.scores)
        rel = ((got.scores - want.scores).abs() / want.scores.abs().clamp(min=1.0))[finite]
        # words may differ only on exact-score ties (the GPU resolves ties by atomic order)
        untied = sum(a != b and float(x) != float(y) for a, b, x, y in zip(got.words, want.words, got.scores,
                                                                          want.scores))
        out[name] = (untied, float(rel.max()) if rel.numel() else 0.0, got.overflow)
    return out


def test_gpu_matches_cpu_on_workload_graphs():
    """Real TLG (epsilons) and HLG of two topologies: same words (exact ties aside), scores <= 1e-4 relative."""
    for name, (untied, rel, overflow) in compare_on_workload_graphs("cuda").items():
        assert rel <= 1e-4, (name, rel)
        assert untied == 0, (name, untied)
        assert all(o == 0 for o in overflow), (name, overflow)


@pytest.mark.parametrize("epsilon", [False, True])
def test_gpu_neg_inf_log_probs_match_cpu(epsilon):
    """Regression (issue 11): -inf log-probs (log 0) are valid input; CUDA must agree with the CPU reference on
    them, including a frame that is -inf in every column (no path survives it)."""
    rng = np.random.default_rng(300 + epsilon)
    for gi in range(4):
        g = random_graph(rng, epsilon=epsilon, num_states=int(rng.integers(5, 120)), num_tokens=7)
        lp = random_log_probs(rng, 4, 20, 7)
        mask = torch.from_numpy(rng.random((4, 20, 7)) < 0.2)
        lp = lp.masked_fill(mask, float("-inf"))
        lp[3, 5] = float("-inf")  # a dead frame
        lengths = torch.tensor([20, 11, 1, 20])
        cfg = WfstDecoderConfig(search_beam=12.0)
        for dtype in (torch.float32, torch.float16):
            x = lp.to(dtype)
            cpu = WfstDecoder(g, cfg, "cpu").decode(x, lengths)
            gpu = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths)
            assert not cpu.has_path[3] and not gpu.has_path[3]
            assert gpu.has_path == cpu.has_path and gpu.reached_final == cpu.reached_final, gi
            for b in range(4):
                sg, sc = float(gpu.scores[b]), float(cpu.scores[b])
                if math.isinf(sc):
                    assert sg == sc
                    continue
                assert abs(sg - sc) <= 1e-4 * max(1.0, abs(sc)), (gi, b, sg, sc)
                assert gpu.words[b] == cpu.words[b] or sg == sc, (gi, b)


def test_gpu_workspace_keeps_one_size_across_batches_of_varying_lengths():
    """The arena grows only per batch size, with 25 % headroom (decoders/wfst.py _run): batches whose lengths
    vary within it reuse the first call's cached workspace segment (reserved memory does not grow; before, each
    larger request left the previous segment stale beside it), and the results are the CPU reference's."""
    rng = np.random.default_rng(5)
    g = random_graph(rng, num_states=40, num_tokens=9)
    lp = random_log_probs(rng, 2, 700, 9)
    cfg = WfstDecoderConfig(search_beam=8.0)
    dec, ref = WfstDecoder(g, cfg, "cuda"), WfstDecoder(g, cfg, "cpu")
    dec.decode(lp.cuda(), [600, 300])
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved()
    for lengths in ([620, 300], [650, 10], [500, 640]):
        got = dec.decode(lp.cuda(), lengths)
        want = ref.decode(lp, lengths)
        assert got.words == want.words and torch.allclose(got.scores, want.scores, atol=1e-4), lengths
        torch.cuda.synchronize()
        assert torch.cuda.memory_reserved() == reserved, (lengths, torch.cuda.memory_reserved(), reserved)


@pytest.mark.parametrize("epsilon", [False, True])
def test_gpu_multiword_arcs_with_boosts_match_cpu(epsilon):
    """Arcs with several words (the word-arc index's splits, not the one-word fast case), graphs of a few hundred arcs
    (many 32-arc index blocks), boosts on words that sit second on an arc: the kernels' word lookups (boost sums,
    the word links, the backtrack) against the CPU reference's aux CSR."""
    from wfst_testlib import with_multiword_arcs
    rng = np.random.default_rng(600 + epsilon)
    for gi in range(6):
        g = with_multiword_arcs(rng, random_graph(rng, epsilon=epsilon, num_states=int(rng.integers(20, 300)),
                                                  num_tokens=29))
        assert g.aux_splits is not None and g.num_arcs > 64
        cfg = WfstDecoderConfig(search_beam=12.0, max_active=int(rng.choice([40, 10000])))
        lp, lengths = random_batch(rng, 5, g.num_tokens)
        boosts = [{f"w{int(w)}": float(rng.uniform(-3, 3)) for w in rng.integers(1, 12, size=3)} if b % 2 else None
                  for b in range(5)]
        cpu = WfstDecoder(g, cfg, "cpu").decode(lp, lengths, boosts=boosts)
        gpu = WfstDecoder(g, cfg, "cuda").decode(lp.cuda(), lengths, boosts=boosts)
        assert all(o == 0 for o in gpu.overflow), gpu.overflow
        for b in range(5):
            sg, sc = float(gpu.scores[b]), float(cpu.scores[b])
            assert sg == sc or abs(sg - sc) <= 1e-4 * max(1.0, abs(sc)), (gi, b, sg, sc)
            assert gpu.words[b] == cpu.words[b] or sg == sc, (gi, b, gpu.words[b], cpu.words[b])


def test_gpu_graph_is_one_packed_allocation_in_the_device_layout():
    """graph_on_device uploads the kernels' layout (int16 ilabel, the word-arc index) as one allocation: the
    allocator's bytes grow by the packed size alone, below the int32 + aux-CSR layout's, and the CUDA op refuses
    the CPU layout with a one-line error."""
    from decoders.wfst import _graph_arrays, _ops, clear_graph_cache, device_graph_arrays, graph_on_device
    rng = np.random.default_rng(650)
    g = random_graph(rng, num_states=3000, num_tokens=29, max_emitting=6)
    clear_graph_cache()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    t = graph_on_device(g, "cuda")
    torch.cuda.synchronize()
    grew = torch.cuda.memory_allocated() - before
    dev = device_graph_arrays(_graph_arrays(g), g.num_tokens)
    packed = sum(-(-max(v.nbytes, 1) // 256) * 256 for v in dev.values())
    assert packed <= grew <= packed + 512, (grew, packed)  # the allocator rounds to 512 B
    assert packed < sum(v.nbytes for v in _graph_arrays(g).values())
    assert t["ilabel"].dtype == torch.int16 and len({x.untyped_storage().data_ptr() for x in t.values()
                                                      if isinstance(x, torch.Tensor)}) == 1
    cpu = graph_on_device(g, "cpu")
    lp = random_log_probs(rng, 1, 4, g.num_tokens).cuda()
    args = [lp, torch.tensor([4])] + [cpu[k].cuda() for k in ("row_splits", "eps_begin", "final_begin", "dest",
                                                              "ilabel", "aux_splits", "aux_words", "weight")]
    with pytest.raises(RuntimeError, match="ilabel must be contiguous int16"):
        _ops().wfst_decode(*args, g.start_state, g.final_state, torch.zeros(1, 0, dtype=torch.int32, device="cuda"),
                           torch.zeros(1, 0, device="cuda"), 10.0, 1, 100, True, 1.0, 0, 64, 64, 128, 1024, 16)


@pytest.mark.parametrize("batch", [1, 5, 40])
@pytest.mark.parametrize("epsilon", [False, True])
def test_fused_max_equals_the_max_walk_and_cpu(monkeypatch, batch, epsilon):
    """The persistent kernel's fused max (each step's maximum accumulated by the Resolves of the step before, tokens
    skipped by the frame-max bound; decoders/include/wfst_kernels.cuh "Fused max") against the Max walk
    (BEAMDEC_WFST_FUSED_MAX=0) and the CPU: bit-equal scores and equal words, on wide states (up to 40 emitting arcs),
    arc weights above 0 (the bound's max_emit_weight), peaky and flat frames, -inf log-probs, acoustic scales, a
    positive word bonus (which raises the bound), fp16 and boosts (no skipping: a boost can exceed the bound)."""
    rng = np.random.default_rng(900 + batch + 7 * epsilon)
    for gi in range(5):
        g = random_graph(rng, epsilon=epsilon, num_states=int(rng.integers(2, 200)),
                         num_tokens=int(rng.choice([3, 29, 40])), max_emitting=int(rng.choice([8, 40])))
        cfg = WfstDecoderConfig(search_beam=float(rng.choice([3.0, 10.0, 30.0])),
                                min_active=5, max_active=int(rng.choice([30, 10000])),
                                acoustic_scale=float(rng.choice([0.5, 1.0, 2.5])),
                                word_bonus=1.25 if gi == 2 else 0.0)
        T = int(rng.integers(1, 50))
        lp = random_log_probs(rng, batch, T, g.num_tokens, peaky=float(rng.choice([0.5, 3.0, 12.0])))
        if gi == 3:
            lp[:, ::3, 1:] = -math.inf  # frames where only the first column is possible
        lengths = torch.from_numpy(rng.integers(0, T + 1, size=batch))
        lengths[0] = T
        boosts = [{1: 2.0}] + [{}] * (batch - 1) if gi == 4 else None
        for dtype in (torch.float32, torch.float16):
            x = lp.to(dtype)
            monkeypatch.setenv("BEAMDEC_WFST_FUSED_MAX", "0")
            walk = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
            for variant in ("1", "2"):  # opt-in: lean, first arc
                monkeypatch.setenv("BEAMDEC_WFST_FUSED_MAX", variant)
                fused = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
                monkeypatch.delenv("BEAMDEC_WFST_FUSED_MAX")
                key = (gi, str(dtype), variant)
                assert fused.scores.tolist() == walk.scores.tolist(), key
                assert fused.words == walk.words and fused.overflow == walk.overflow, key
                assert fused.has_path == walk.has_path and fused.reached_final == walk.reached_final, key
            cpu = WfstDecoder(g, cfg, "cpu").decode(x, lengths, boosts=boosts)
            _assert_scores_near_cpu(cpu, fused, range(batch), (gi,))


@pytest.mark.parametrize("batch", [1, 5, 40])
@pytest.mark.parametrize("epsilon", [False, True])
def test_arc_rounds_ahead_equal_one_round_and_cpu(monkeypatch, batch, epsilon):
    """The persistent kernel's Max and Expand walks with 2 rounds of arcs scored ahead (BEAMDEC_WFST_ARC_AHEAD;
    decoders/include/wfst_kernels.cuh warp_arc_rounds_ahead) and the Expand walk's admitted-arc queue
    (BEAMDEC_WFST_ADMIT_QUEUE), alone and together (the default), against one round at a time without the queue and
    the CPU: bit-equal scores, equal flags, words equal up to exactly tied paths. States of up to 130 emitting arcs (a
    lone token walks 5 rounds: an odd count), arc counts that end mid-round, final and
    redirected steps, -inf log-probs, fp16, boosts and multi-word arcs (the boosts are added after the scoring), a
    frontier-capacity rescue, and the emit-slot and candidate forms. Lanes left flagged after the rescue (gi 3's
    candidate form) are not compared: which candidates a full buffer drops depends on timing."""
    from wfst_testlib import with_multiword_arcs
    rng = np.random.default_rng(1700 + batch + 7 * epsilon)
    # (rounds ahead, admitted-arc queue, spread walks); ("2", "1", "1") is the HLG default (with half the grid at
    # batch 1 and 5); the spread walks (BEAMDEC_WFST_SPREAD) take every step here: a test batch has far fewer tokens
    # than the grid has warps / 2
    forms = [("2", "0", "0"), ("1", "1", "0"), ("2", "1", "0"), ("2", "1", "1")]
    for gi in range(6):
        g = random_graph(rng, epsilon=epsilon, num_states=int(rng.integers(2, 250)),
                         num_tokens=int(rng.choice([3, 29])), max_emitting=int(rng.choice([8, 40, 130])),
                         finals="none" if gi == 4 else "some", words_on_epsilon_cycles=False)
        if gi == 5 and not epsilon:  # (extra words on an epsilon cycle could make it gain under the boosts)
            g = with_multiword_arcs(rng, g)
        cfg = WfstDecoderConfig(search_beam=float(rng.choice([4.0, 12.0, 30.0])),
                                max_active=int(rng.choice([40, 10000])), frontier_capacity=16 if gi == 3 else None)
        lp, lengths = random_batch(rng, batch, g.num_tokens)
        if gi == 2:
            lp[:, ::2, 1:] = -math.inf
        boosts = [{1: 1.5, 2: -0.75}] + [{}] * (batch - 1) if gi in (1, 5) else None
        for dtype in (torch.float32, torch.float16):
            x = lp.to(dtype)
            cpu = WfstDecoder(g, cfg, "cpu").decode(x, lengths, boosts=boosts)
            for slots in ("1", "0"):
                monkeypatch.setenv("BEAMDEC_WFST_EMIT_SLOTS", slots)
                monkeypatch.setenv("BEAMDEC_WFST_ARC_AHEAD", "1")
                monkeypatch.setenv("BEAMDEC_WFST_ADMIT_QUEUE", "0")
                one = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
                for ahead, queue, spread in forms:
                    monkeypatch.setenv("BEAMDEC_WFST_ARC_AHEAD", ahead)
                    monkeypatch.setenv("BEAMDEC_WFST_ADMIT_QUEUE", queue)
                    monkeypatch.setenv("BEAMDEC_WFST_SPREAD", spread)
                    res = WfstDecoder(g, cfg, "cuda").decode(x.cuda(), lengths, boosts=boosts)
                    key = (gi, str(dtype), slots, ahead, queue, spread)
                    exact = [b for b in range(batch) if one.overflow[b] == 0 and res.overflow[b] == 0]
                    if gi != 3:
                        assert res.overflow == one.overflow and len(exact) == batch, key
                    assert [res.scores[b] for b in exact] == [one.scores[b] for b in exact], key
                    assert [res.has_path[b] for b in exact] == [one.has_path[b] for b in exact], key
                    assert [res.reached_final[b] for b in exact] == [one.reached_final[b] for b in exact], key
                    assert sum(res.words[b] != one.words[b] for b in exact) <= max(1, batch // 8), key
                _assert_scores_near_cpu(cpu, one, [b for b in range(batch) if one.overflow[b] == 0], key)
            for name in ("BEAMDEC_WFST_ARC_AHEAD", "BEAMDEC_WFST_ADMIT_QUEUE", "BEAMDEC_WFST_SPREAD",
                         "BEAMDEC_WFST_EMIT_SLOTS"):
                monkeypatch.delenv(name)
