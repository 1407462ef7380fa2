"""Embedded workload generator: determinism (same seed -> same bytes), caching, manifest shape."""
import json

import pytest

from recipes.workload import SCALES, prepare_workload

DETERMINISTIC_FILES = ["words.txt", "corpus.txt", "lm_3gram.arpa", "bpe.model", "sets/clean.jsonl", "sets/other.jsonl"]


@pytest.fixture(scope="module")
def two_tiny(tmp_path_factory):
    a = prepare_workload("tiny", tmp_path_factory.getbasetemp() / "shared_workload", seed=0)
    b = prepare_workload("tiny", tmp_path_factory.mktemp("b"), seed=0)
    return a, b


def test_same_seed_same_bytes(two_tiny):
    a, b = two_tiny
    for name in DETERMINISTIC_FILES:
        assert (a.root / name).read_bytes() == (b.root / name).read_bytes(), name


def test_other_seed_differs(tmp_path, two_tiny):
    c = prepare_workload("tiny", tmp_path, seed=1)
    a = two_tiny[0]
    assert c.root != a.root
    assert c.words_path.read_bytes() != a.words_path.read_bytes()
    assert c.sets["clean"].read_bytes() != a.sets["clean"].read_bytes()


def test_cached_second_call_does_not_regenerate(two_tiny, capsys):
    a = two_tiny[0]
    before = {n: (a.root / n).stat().st_mtime_ns for n in DETERMINISTIC_FILES}
    again = prepare_workload("tiny", a.root.parent, seed=0)
    assert "[cached]" in capsys.readouterr().out
    assert {n: (again.root / n).stat().st_mtime_ns for n in DETERMINISTIC_FILES} == before
    assert again.stats == a.stats


def test_corrupt_cache_is_regenerated(tmp_path):
    wl = prepare_workload("tiny", tmp_path, seed=3)
    good = wl.arpa_path.read_bytes()
    params = json.loads((wl.root / "params.json").read_text())
    params["hash"] = "stale"
    (wl.root / "params.json").write_text(json.dumps(params))
    wl.arpa_path.write_text("garbage")
    wl2 = prepare_workload("tiny", tmp_path, seed=3)
    assert wl2.arpa_path.read_bytes() == good


def test_manifests_and_vocabulary_shape(two_tiny):
    wl = two_tiny[0]
    p = SCALES["tiny"]
    words = [line.split() for line in wl.words_path.read_text().splitlines()]
    assert len(words) == p.num_words
    counts = [int(c) for _, c in words]
    assert counts == sorted(counts, reverse=True)  # Zipf-ranked
    assert counts[0] > 20 * counts[len(counts) // 2]  # heavy head, long tail
    vocab = {w for w, _ in words}
    assert all(set(w) <= set("abcdefghijklmnopqrstuvwxyz'") for w in vocab)
    for name in ("clean", "other"):
        utts = wl.utterances(name)
        assert len(utts) == p.utterances[name]
        assert len({u["id"] for u in utts}) == len(utts)
        for u in utts:
            assert set(u) == {"id", "text", "duration", "audio_filepath"}
            assert u["audio_filepath"] is None and u["duration"] > 0
            assert set(u["text"].split()) <= vocab
    st = wl.stats
    assert st["ngrams"][0] == p.num_words + 3 and st["ngrams"][2] > 0
    assert st["sets"]["clean"]["utterances"] == p.utterances["clean"]


def test_bad_scale_names_choices(tmp_path):
    with pytest.raises(ValueError, match="valid choices"):
        prepare_workload("huge", tmp_path)


def test_cli_hydra_app_writes_only_the_workload(tmp_path, monkeypatch, two_tiny):
    from recipes.workload import main

    monkeypatch.chdir(tmp_path)
    main(["scale=tiny", f"root={tmp_path / 'wl'}", "seed=0"])
    assert (tmp_path / "wl" / "tiny" / "params.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wl"]  # no outputs/, .hydra/ or log files
    assert (tmp_path / "wl" / "tiny" / "lm_3gram.arpa").read_bytes() == two_tiny[0].arpa_path.read_bytes()
