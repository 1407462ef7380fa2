"""LibriSpeech preparation (-> NeMo manifests) and audio loading; no NeMo needed, soundfile is."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

sf = pytest.importorskip("soundfile")

from eval.audio import load_audio, pad_waveforms, resample  # noqa: E402
from recipes.librispeech import main as librispeech_main  # noqa: E402
from recipes.librispeech import normalize_transcript, read_manifest  # noqa: E402

SR = 16000


def make_fake_librispeech(root: Path, subsets=("test-clean", "test-other"), seed: int = 0) -> dict:
    """LibriSpeech layout: <subset>/<spk>/<chapter>/<spk>-<chapter>-<utt>.flac + <spk>-<chapter>.trans.txt."""
    rng = np.random.default_rng(seed)
    expected = {}
    for s_i, subset in enumerate(subsets):
        rows = []
        for spk, chapter in ((1089 + s_i, 134686), (121 + s_i, 121726)):
            d = root / subset / str(spk) / str(chapter)
            d.mkdir(parents=True)
            lines = []
            for utt in range(3):
                uid = f"{spk}-{chapter}-{utt:04d}"
                n = int(rng.integers(4000, 40000))
                sf.write(d / f"{uid}.flac", (0.1 * rng.standard_normal(n)).astype(np.float32), SR)
                text = f"HELLO WORLD'S  NUMBER {utt} FROM {spk}"
                lines.append(f"{uid} {text}")
                rows.append((uid, n / SR, text))
            (d / f"{spk}-{chapter}.trans.txt").write_text("\n".join(lines) + "\n")
        expected[subset] = sorted(rows)
    return expected


def test_prepare_librispeech_writes_nemo_manifests(tmp_path):
    expected = make_fake_librispeech(tmp_path / "LibriSpeech")
    out = tmp_path / "manifests"
    paths = librispeech_main([f"root={tmp_path / 'LibriSpeech'}", f"out_dir={out}", "progress=false"])
    assert set(paths) == {"test-clean", "test-other"}
    for subset, rows in expected.items():
        entries = read_manifest(out / f"{subset}.json")
        assert [Path(e["audio_filepath"]).stem for e in entries] == [r[0] for r in rows]
        for e, (uid, dur, text) in zip(entries, rows):
            assert set(e) == {"audio_filepath", "duration", "text"}
            assert Path(e["audio_filepath"]).is_absolute() and Path(e["audio_filepath"]).is_file()
            assert e["duration"] == pytest.approx(dur, abs=1e-4)
            assert e["text"] == normalize_transcript(text) == " ".join(text.lower().split())


def test_prepare_librispeech_is_rerunnable_and_overwrites_on_request(tmp_path):
    make_fake_librispeech(tmp_path / "LS", subsets=("dev-clean",))
    args = [f"root={tmp_path / 'LS'}", f"out_dir={tmp_path / 'm'}", "subsets=[dev-clean]", "progress=false"]
    path = librispeech_main(args)["dev-clean"]
    path.write_text(path.read_text().replace("hello", "HELLO"))  # same count: kept as is
    librispeech_main(args)
    assert "HELLO" in path.read_text()
    librispeech_main(args + ["overwrite=true"])
    assert "HELLO" not in path.read_text()


def test_manifest_is_read_by_the_harness(tmp_path):
    from eval.runner import load_manifest

    make_fake_librispeech(tmp_path / "LS", subsets=("test-clean",))
    path = librispeech_main([f"root={tmp_path / 'LS'}", f"out_dir={tmp_path / 'm'}", "subsets=[test-clean]",
                             "progress=false"])["test-clean"]
    utts = load_manifest(path)
    assert len(utts) == 6 and utts[0].id == "1089-134686-0000"
    assert utts[0].audio_filepath and utts[0].duration > 0


def test_prepare_librispeech_errors_name_the_problem(tmp_path):
    make_fake_librispeech(tmp_path / "LS", subsets=("test-clean",))
    with pytest.raises(FileNotFoundError, match="test-other"):
        librispeech_main([f"root={tmp_path / 'LS'}", f"out_dir={tmp_path / 'm'}", "subsets=[test-other]"])
    with pytest.raises(ValueError, match="unknown subsets"):
        librispeech_main([f"root={tmp_path / 'LS'}", "subsets=[test-cleen]"])
    with pytest.raises(ValueError, match="root="):
        librispeech_main([])
    flac = next((tmp_path / "LS").rglob("*.flac"))
    flac.unlink()
    with pytest.raises(FileNotFoundError, match=flac.stem):
        librispeech_main([f"root={tmp_path / 'LS'}", f"out_dir={tmp_path / 'm'}", "subsets=[test-clean]"])


def test_read_manifest_resolves_relative_paths_and_rejects_bad_lines(tmp_path):
    (tmp_path / "a.wav").write_bytes(b"")
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"audio_filepath": "a.wav", "duration": 1.0, "text": "x"}) + "\n")
    assert read_manifest(m)[0]["audio_filepath"] == str((tmp_path / "a.wav").resolve())
    m.write_text(json.dumps({"audio_filepath": "a.wav", "text": "x"}) + "\n")
    with pytest.raises(ValueError, match="duration"):
        read_manifest(m)


def test_load_audio_mixes_down_and_resamples(tmp_path):
    t = np.arange(8000) / 8000.0
    left = 0.5 * np.sin(2 * np.pi * 440 * t)
    right = 0.1 * np.sin(2 * np.pi * 440 * t)
    sf.write(tmp_path / "st.wav", np.stack([left, right], axis=1).astype(np.float32), 8000)
    same = load_audio(tmp_path / "st.wav", sample_rate=8000)
    assert same.dtype == np.float32 and same.shape == (8000,)
    np.testing.assert_allclose(same, (left + right) / 2, atol=1e-4)
    up = load_audio(tmp_path / "st.wav", sample_rate=16000)
    assert abs(len(up) - 16000) <= 1
    spectrum = np.abs(np.fft.rfft(up))
    assert np.argmax(spectrum) * 16000 / len(up) == pytest.approx(440, abs=2)  # pitch survives resampling


def test_audio_errors_and_padding(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.flac"):
        load_audio(tmp_path / "nope.flac")
    (tmp_path / "bad.flac").write_bytes(b"not audio at all")
    with pytest.raises(RuntimeError, match="cannot read audio"):
        load_audio(tmp_path / "bad.flac")
    with pytest.raises(ValueError, match="sample rates"):
        resample(np.zeros(4, np.float32), 0, 16000)
    batch, lengths = pad_waveforms([np.ones(3, np.float32), np.ones(5, np.float32)])
    assert batch.shape == (2, 5) and lengths.tolist() == [3, 5] and batch[0, 3:].sum() == 0
