"""LibriSpeech -> NeMo manifests (JSONL lines {"audio_filepath", "duration", "text"}).

Input: a local LibriSpeech directory as distributed by openslr.org (`LibriSpeech/<subset>/<speaker>/
<chapter>/<speaker>-<chapter>-<utt>.flac` plus one `<speaker>-<chapter>.trans.txt` per chapter with lines
"<utt-id> <UPPER CASE TEXT>"). Output: `<out_dir>/<subset>.json` per subset, one JSON object per line,
absolute audio paths, durations read from the FLAC headers, text lower-cased as NeMo's own
`get_librispeech_data.py` writes it (the harness WER normaliser, `eval.metrics.normalize_text`, lower-cases
and strips punctuation on both sides anyway).

The step is re-runnable: an existing manifest whose entry count matches the transcripts is kept unless
`overwrite=true`.

CLI (Hydra-style key=value overrides on `LibriSpeechPrepConfig`):
    python -m recipes.librispeech root=/data/LibriSpeech subsets=[test-clean,test-other] out_dir=data/librispeech
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Union

SUBSETS = (
    "dev-clean",
    "dev-other",
    "test-clean",
    "test-other",
    "train-clean-100",
    "train-clean-360",
    "train-other-500",
)


@dataclass
class LibriSpeechPrepConfig:
    root: Optional[str] = None  # the LibriSpeech directory holding the subset folders
    subsets: list[str] = field(default_factory=lambda: ["test-clean", "test-other"])
    out_dir: str = "data/librispeech"
    overwrite: bool = False
    progress: bool = True


def normalize_transcript(text: str) -> str:
    """LibriSpeech transcript -> manifest text (lower case, single spaces), like NeMo's data script."""
    return " ".join(text.lower().split())


def read_transcripts(subset_dir: Path) -> list[tuple[str, str, Path]]:
    """All (utterance id, raw text, flac path) of one subset directory, sorted by id."""
    items = []
    for trans in sorted(subset_dir.rglob("*.trans.txt")):
        for lineno, line in enumerate(trans.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            uid, _, text = line.strip().partition(" ")
            if not text:
                raise ValueError(f"{trans}:{lineno}: expected '<utt-id> <text>', got {line!r}")
            flac = trans.parent / f"{uid}.flac"
            if not flac.is_file():
                raise FileNotFoundError(f"{trans}:{lineno}: audio {flac} listed in the transcript is missing")
            items.append((uid, text, flac))
    items.sort(key=lambda x: x[0])
    return items


def flac_duration_s(path: Path) -> float:
    """Duration in seconds from the audio header (soundfile reads FLAC through libsndfile)."""
    try:
        import soundfile as sf
    except ImportError as e:
        raise RuntimeError("LibriSpeech preparation needs `soundfile` (pip install soundfile)") from e
    info = sf.info(str(path))
    return info.frames / float(info.samplerate)


def write_manifest(entries: Iterable[dict], path: Union[str, Path]) -> int:
    """Write JSONL atomically; returns the number of entries."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for e in entries:
            for key in ("audio_filepath", "duration", "text"):
                if key not in e:
                    raise ValueError(f"manifest entry {n} lacks {key!r}: {e}")
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(path)
    return n


def read_manifest(path: Union[str, Path]) -> list[dict]:
    """Read a NeMo manifest (JSONL); relative audio paths are resolved against the manifest's folder."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"manifest: no such file {str(path)!r}")
    entries = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not JSON: {err}") from None
            for key in ("audio_filepath", "duration", "text"):
                if key not in e:
                    raise ValueError(f"{path}:{lineno}: entry lacks {key!r} (NeMo manifests need audio_filepath, duration, text)")
            audio = Path(e["audio_filepath"])
            if not audio.is_absolute():
                e["audio_filepath"] = str((path.parent / audio).resolve())
            entries.append(e)
    return entries


def prepare_subset(root: Path, subset: str, out_dir: Path, overwrite: bool = False, progress: bool = True) -> Path:
    """One subset -> `<out_dir>/<subset>.json`; skipped when a complete manifest already exists."""
    from tqdm import tqdm

    subset_dir = root / subset
    if not subset_dir.is_dir():
        raise FileNotFoundError(
            f"subset {subset!r} not found under root={str(root)!r} (expected {subset_dir}; "
            f"subsets present: {sorted(p.name for p in root.iterdir() if p.is_dir())})"
        )
    items = read_transcripts(subset_dir)
    if not items:
        raise ValueError(f"{subset_dir}: no *.trans.txt transcripts found")
    out = out_dir / f"{subset}.json"
    if out.is_file() and not overwrite:
        with open(out, encoding="utf-8") as f:
            if sum(1 for line in f if line.strip()) == len(items):
                print(f"[librispeech] {out} exists with {len(items)} entries; skipping (overwrite=true to redo)")
                return out
    entries = []
    for uid, text, flac in tqdm(items, desc=f"librispeech {subset}", disable=not progress, unit="utt"):
        entries.append(
            {
                "audio_filepath": str(flac.resolve()),
                "duration": round(flac_duration_s(flac), 4),
                "text": normalize_transcript(text),
            }
        )
    n = write_manifest(entries, out)
    hours = sum(e["duration"] for e in entries) / 3600.0
    print(f"[librispeech] {subset}: {n} utterances, {hours:.2f} h -> {out}")
    return out


def prepare_librispeech(cfg: LibriSpeechPrepConfig) -> dict[str, Path]:
    if not cfg.root:
        raise ValueError("root=<path to the LibriSpeech directory> is required")
    root = Path(cfg.root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"root: no such directory {str(root)!r}")
    unknown = [s for s in cfg.subsets if s not in SUBSETS]
    if unknown:
        raise ValueError(f"unknown subsets {unknown}; valid choices: {list(SUBSETS)}")
    out_dir = Path(cfg.out_dir)
    return {s: prepare_subset(root, s, out_dir, cfg.overwrite, cfg.progress) for s in cfg.subsets}


def main(argv: Optional[list[str]] = None) -> dict[str, Path]:
    from omegaconf import OmegaConf

    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        print(OmegaConf.to_yaml(OmegaConf.structured(LibriSpeechPrepConfig)))
        return {}
    bad = [a for a in argv if "=" not in a]
    if bad:
        raise SystemExit(f"expected key=value overrides, got {bad}")
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(LibriSpeechPrepConfig), OmegaConf.from_dotlist(argv))
    except Exception as e:  # noqa: BLE001 - OmegaConf's validation errors: report and exit
        raise SystemExit(f"invalid arguments: {e}") from None
    return prepare_librispeech(OmegaConf.to_object(cfg))


if __name__ == "__main__":
    main()
