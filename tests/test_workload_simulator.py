"""Posterior simulator: CTC-like statistics, greedy WER within the documented bands, determinism."""
import math

import jiwer
import numpy as np
import pytest

from recipes.simulator import (
    SimulatorConfig,
    blank_confident_ratio,
    greedy_columns,
    num_frames,
    required_frames,
    similar_tokens,
    simulate_utterance,
)
from recipes.workload import prepare_workload

# documented greedy-WER bands of the presets (recipes/simulator.py docstring)
BANDS = {"clean": (0.03, 0.06), "other": (0.08, 0.15)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # one tiny workload per test session, shared by the test_workload_* modules (cached on the 2nd call)
    return prepare_workload("tiny", tmp_path_factory.getbasetemp() / "shared_workload", seed=0)


def _run_set(wl, set_name, kind, blank="last", limit=None):
    ts = wl.token_set(kind, blank)
    cfg = wl.simulator_config(set_name)
    utts = wl.utterances(set_name)[:limit]
    refs, hyps, lps = [], [], []
    for u in utts:
        lp = simulate_utterance(u["text"], u["duration"], ts, cfg, key=u["id"])
        lps.append(lp)
        refs.append(u["text"])
        hyps.append(ts.decode(greedy_columns(lp, ts.blank_id)))
    return ts, utts, lps, jiwer.wer(refs, hyps)


@pytest.mark.parametrize("set_name", ["clean", "other"])
def test_bpe_greedy_wer_band_and_blank_ratio(tiny, set_name):
    ts, utts, lps, wer = _run_set(tiny, set_name, "bpe")
    lo, hi = BANDS[set_name]
    assert lo <= wer <= hi, f"{set_name} greedy WER {wer:.4f} outside [{lo}, {hi}]"
    frames = sum(lp.shape[0] for lp in lps)
    confident = sum(blank_confident_ratio(lp, ts.blank_id) * lp.shape[0] for lp in lps) / frames
    assert confident >= 0.60
    for u, lp in zip(utts, lps):
        assert lp.dtype == np.float32 and lp.shape == (num_frames(u["duration"], tiny.simulator_config(set_name)), ts.vocab_size)
        assert lp.shape[0] >= required_frames(ts.encode(u["text"]))
        np.testing.assert_allclose(np.exp(lp.astype(np.float64)).sum(axis=1), 1.0, atol=1e-5)


def test_knob_controls_wer(tiny):
    ts = tiny.token_set("bpe")
    utts = tiny.utterances("clean")[:120]
    wers = []
    for rate in (0.0, 0.05, 0.2):
        cfg = SimulatorConfig(word_error_rate=rate, ambiguity_rate=0.0, seed=3)
        hyps = [ts.decode(greedy_columns(simulate_utterance(u["text"], u["duration"], ts, cfg, u["id"]), ts.blank_id)) for u in utts]
        wers.append(jiwer.wer([u["text"] for u in utts], hyps))
    assert wers[0] == 0.0
    assert wers[0] < wers[1] < wers[2]
    assert 0.1 < wers[2] < 0.35


def test_char_tokens_blank_first_wer_and_more_nonblank(tiny):
    ts, utts, lps, wer = _run_set(tiny, "clean", "char", blank="first", limit=100)
    assert ts.blank_id == 0 and ts.tokens[1] == " "
    assert 0.015 <= wer <= 0.08  # per-word errors: roughly the same WER as BPE
    _, _, lps_bpe, _ = _run_set(tiny, "clean", "bpe", limit=100)
    nb_char = np.mean(np.concatenate([lp.argmax(1) != ts.blank_id for lp in lps]))
    nb_bpe = np.mean(np.concatenate([lp.argmax(1) != lp.shape[1] - 1 for lp in lps_bpe]))
    assert nb_char > 1.5 * nb_bpe  # chars need more frames


def test_deterministic_per_key_and_order_independent(tiny):
    ts = tiny.token_set("bpe")
    cfg = tiny.simulator_config("other")
    u1, u2 = tiny.utterances("other")[:2]
    a = simulate_utterance(u1["text"], u1["duration"], ts, cfg, key=u1["id"])
    simulate_utterance(u2["text"], u2["duration"], ts, cfg, key=u2["id"])
    b = simulate_utterance(u1["text"], u1["duration"], ts, cfg, key=u1["id"])
    assert np.array_equal(a, b)
    c = simulate_utterance(u1["text"], u1["duration"], ts, cfg.with_seed(cfg.seed + 1), key=u1["id"])
    assert not np.array_equal(a, c)


def test_spikes_are_single_frames_and_blank_frames_leak_to_neighbours(tiny):
    ts = tiny.token_set("bpe")
    cfg = SimulatorConfig(double_spike_prob=0.0, word_error_rate=0.0, ambiguity_rate=0.0)
    u = tiny.utterances("clean")[5]
    lp = simulate_utterance(u["text"], u["duration"], ts, cfg, key=u["id"])
    best = lp.argmax(1)
    spikes = np.nonzero(best != ts.blank_id)[0]
    assert len(spikes) == len(ts.encode(u["text"]))
    assert np.all(np.diff(spikes) >= 1) and not np.any(best[spikes[np.diff(spikes, append=-9) == 1]] == best[spikes[np.diff(spikes, append=-9) == 1] + 1])
    # on a spike, the runner-up non-blank token is one of the spike's similar tokens
    nbr, _ = similar_tokens(ts)
    hits = 0
    for f in spikes:
        row = lp[f].copy()
        top = int(row.argmax())
        row[[top, ts.blank_id]] = -np.inf
        hits += int(row.argmax()) in set(nbr[top, : cfg.num_competitors].tolist())
    assert hits >= 0.8 * len(spikes)
    # blank frame next to a spike carries more mass on that token than on unrelated tokens
    f = int(spikes[0]) + 1
    if f < lp.shape[0] and best[f] == ts.blank_id:
        assert lp[f, best[spikes[0]]] > np.median(lp[f])


def test_similar_tokens_char_groups(tiny):
    ts = tiny.token_set("char")
    nbr, w = similar_tokens(ts)
    b = ts.tokens.index("b")
    assert ts.tokens[nbr[b, 0]] == "p"
    a = ts.tokens.index("a")
    assert set(ts.tokens[i] for i in nbr[a, :5]) <= set("eiouy")
    assert ts.blank_id not in nbr
    np.testing.assert_allclose(w[a].sum(), 1.0)


def test_too_short_duration_raises(tiny):
    ts = tiny.token_set("char")
    with pytest.raises(ValueError, match="duration_s"):
        simulate_utterance("abcdefgh abcdefgh", 0.2, ts, SimulatorConfig(), key="x")
    with pytest.raises(ValueError, match="duration_s"):
        num_frames(0.0, SimulatorConfig())
    with pytest.raises(ValueError, match="preset"):
        SimulatorConfig.preset("noisy")


def test_num_frames_and_required_frames():
    cfg = SimulatorConfig(frame_shift_s=0.04)
    assert num_frames(0.04, cfg) == 1 and num_frames(1.0, cfg) == 25 and num_frames(1.01, cfg) == 26
    assert required_frames([1, 1, 2, 2, 2, 3]) == 9
    assert required_frames([]) == 0
    ts_empty = simulate_utterance("", 0.4, __import__("recipes.tokens", fromlist=["TokenSet"]).TokenSet.from_chars(list("ab")), cfg, "e")
    assert ts_empty.shape == (10, 4) and np.all(ts_empty.argmax(1) == 3)


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_blank_first_is_a_column_permutation_of_blank_last(tiny, kind):
    last, first = tiny.token_set(kind, "last"), tiny.token_set(kind, "first")
    perm = [last.vocab_size - 1] + list(range(last.vocab_size - 1))  # first-layout column -> last-layout column
    cfg = tiny.simulator_config("other")
    for u in tiny.utterances("other")[:10]:
        a = simulate_utterance(u["text"], u["duration"], last, cfg, key=u["id"])
        b = simulate_utterance(u["text"], u["duration"], first, cfg, key=u["id"])
        np.testing.assert_array_equal(b, a[:, perm])
        assert first.decode(greedy_columns(b, first.blank_id)) == last.decode(greedy_columns(a, last.blank_id))


def test_word_level_errors_are_real_words(tiny):
    """Word-level substitutions/insertions produce vocabulary words (a lexicon cannot repair them); token-level
    ones mostly produce non-words."""
    ts = tiny.token_set("bpe")
    vocab = set(tiny.words())
    utts = tiny.utterances("clean")[:80]
    frac_oov = []
    for share in (1.0, 0.0):
        cfg = SimulatorConfig(word_error_rate=0.3, ambiguity_rate=0.0, real_word_share=share, deletion_share=0.0,
                              words_path=str(tiny.words_path), seed=5)
        wrong = [w for u in utts
                 for w in ts.decode(greedy_columns(simulate_utterance(u["text"], u["duration"], ts, cfg, u["id"]), ts.blank_id)).split()
                 if w not in u["text"].split()]
        assert len(wrong) > 50
        frac_oov.append(sum(w not in vocab for w in wrong) / len(wrong))

    assert frac_oov[0] < 0.1 < 0.5 < frac_oov[1]


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_manifest_durations_leave_room_for_every_reference(tiny, kind):
    """The duration comes from the text (speaking rate), not the token set; even for chars, the frames always
    cover tokens + blanks between repeated tokens."""
    ts = tiny.token_set(kind)
    for name in ("clean", "other"):
        cfg = tiny.simulator_config(name)
        for u in tiny.utterances(name):
            assert num_frames(u["duration"], cfg) >= required_frames(ts.encode(u["text"])), u["id"]
