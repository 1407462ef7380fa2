"""WER (hand-worked cases, empty edge cases, corpus summation), RTFx, stopwatch and memory probe."""
import time

import numpy as np
import pytest

from eval.metrics import (
    MemoryProbe,
    Stopwatch,
    WerStats,
    normalize_text,
    rtfx,
    word_error_rate,
    word_error_stats,
)


def test_wer_substitution_and_insertion_hand_worked():
    # ref: a b c d ; hyp: a x c d e  -> b->x (S), e inserted (I); 4 reference words
    s = word_error_stats(["a b c d"], ["a x c d e"])
    assert (s.substitutions, s.deletions, s.insertions, s.hits) == (1, 0, 1, 3)
    assert s.wer == pytest.approx(2 / 4)
    assert s.sentence_errors == 1


def test_wer_deletion_hand_worked():
    s = word_error_stats(["the cat sat"], ["cat sat"])
    assert (s.substitutions, s.deletions, s.insertions) == (0, 1, 0)
    assert s.wer == pytest.approx(1 / 3)


def test_wer_empty_reference_counts_insertions_with_denominator_clamped():
    s = word_error_stats([""], ["a b"])
    assert (s.insertions, s.ref_words) == (2, 0)
    assert s.wer == pytest.approx(2.0)


def test_wer_empty_hypothesis_is_all_deletions():
    s = word_error_stats(["a b"], [""])
    assert (s.deletions, s.hits) == (2, 0)
    assert s.wer == pytest.approx(1.0)


def test_wer_both_empty_is_zero_and_no_utterances_is_zero():
    assert word_error_rate([""], [""]) == 0.0
    assert word_error_stats([], []).wer == 0.0


def test_wer_is_corpus_level_not_mean_of_utterances():
    # utterance WERs 1.0 and 0.0 (mean 0.5); corpus: 1 error / 5 words
    assert word_error_rate(["a", "a b c d"], ["b", "a b c d"]) == pytest.approx(0.2)


def test_wer_stats_add_up_like_a_joint_computation():
    refs, hyps = ["a b c", "d e", "f"], ["a c", "d x e", "g"]
    joint = word_error_stats(refs, hyps)
    parts = word_error_stats(refs[:2], hyps[:2]) + word_error_stats(refs[2:], hyps[2:])
    assert parts.as_dict() == joint.as_dict()


def test_normaliser_case_punctuation_apostrophes():
    assert normalize_text("  Hello,   World! ") == "hello world"
    assert word_error_rate(["Hello, World!"], ["hello world"]) == 0.0
    # apostrophes are part of words (LibriSpeech "don't")
    assert normalize_text("Don't stop") == "don't stop"
    assert word_error_rate(["don't"], ["dont"]) == pytest.approx(1.0)


def test_wer_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="same length"):
        word_error_stats(["a"], ["a", "b"])


def test_rtfx_definition():
    assert rtfx(10.0, 2.0) == pytest.approx(5.0)
    assert rtfx(0.0, 0.0) == 0.0


def test_stopwatch_accumulates_regions():
    sw = Stopwatch("cpu")
    for _ in range(2):
        with sw:
            time.sleep(0.01)
    assert sw.regions == 2
    assert sw.wall_seconds >= 0.015
    assert sw.cuda_seconds is None


def test_memory_probe_sees_an_allocation():
    probe = MemoryProbe("cpu", interval_s=0.001)
    with probe:
        block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
        time.sleep(0.02)
        del block
    assert probe.stats.rss_increase_bytes >= 32 * 2**20
    assert probe.stats.peak_rss_bytes >= probe.stats.rss_increase_bytes
    assert probe.stats.cuda_peak_bytes is None


def test_wer_stats_default_is_empty():
    assert WerStats().ref_words == 0 and WerStats().errors == 0


def test_environment_records_the_decoders_switches(monkeypatch):
    """An A/B arm's rows say which form they measured: every BEAMDEC_* variable of the process, and nothing else."""
    from eval.metrics import environment_info

    monkeypatch.setenv("BEAMDEC_CTC_ROUNDS", "select")
    monkeypatch.setenv("NOT_BEAMDEC_X", "1")
    env = environment_info()["beamdec_env"]
    assert env.get("BEAMDEC_CTC_ROUNDS") == "select" and "NOT_BEAMDEC_X" not in env
    monkeypatch.delenv("BEAMDEC_CTC_ROUNDS")
    assert "BEAMDEC_CTC_ROUNDS" not in environment_info()["beamdec_env"]
