"""Acoustic source `model.source=cache`: CTC log-probs computed once by an acoustic model, kept on disk.

Why: decoder sweeps (beams, LM scales, boosts) re-decode the same log-probs hundreds of times; re-running
a Conformer for each is wasted GPU time and makes decoder-only comparisons depend on acoustic-model
non-determinism. One cache directory per (model, dataset, precision):

    <root>/<model key>/<dataset>/<precision>/
        meta.json         format version, model + fingerprint, dataset, precision, token set (tokens, blank,
                          kind), frame_shift_s, vocab size, total frames, manifest_sha256, and per utterance:
                          id, frame offset, length, content digest
        log_probs.f16     float16 (total_frames, V), row-major, utterances back to back
        tokenizer.model   the sentencepiece model (BPE token sets), so the cache is self-contained

Integrity: every utterance's float16 bytes carry a sha256 (`data_sha256`, checked whenever the utterance is
read, so a bit flip or a same-size replacement of log_probs.f16 is refused), and `meta_sha256` covers every
other field of meta.json (a hand-edited length, offset or blank_id is refused at open). Errors are one-line
`StaleCacheError`s naming the cache; the remedy is always to delete the directory and rebuild.

Staleness: every utterance's digest covers (id, text, duration rounded to ms); `manifest_sha256` covers the
whole list. Reading a cache for utterances whose digest differs, or that it does not hold, raises
`StaleCacheError` naming them; a cache written for another model fingerprint (a different .nemo file) is
also refused. float16 keeps ~3 significant digits of a log-prob, far below any decoder's beam resolution
(the cache round-trip test bounds the error).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np
import torch

from eval.acoustic.base import AcousticBatch, Utterance
from eval.metrics import Stopwatch
from recipes.tokens import TokenSet

FORMAT_VERSION = 2  # 2: per-utterance data digests + a digest over the metadata
_PAD_LOGP = -30.0  # padded frames: certain blank (same convention as the other sources)


class StaleCacheError(RuntimeError):
    """The cache does not hold the requested utterances as they are now (or was built by another model)."""


def utterance_digest(u: Utterance) -> str:
    """Content digest of one manifest entry: what the log-probs depend on (audio path excluded, so a moved
    dataset directory does not invalidate the cache)."""
    key = json.dumps([u.id, u.text, round(float(u.duration), 3)], ensure_ascii=False)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def manifest_hash(utterances: Sequence[Utterance]) -> str:
    """Hash of a whole utterance list (order-independent: sorted by id)."""
    h = hashlib.sha256()
    for d in sorted(f"{u.id}\t{utterance_digest(u)}" for u in utterances):
        h.update(d.encode("utf-8") + b"\n")
    return h.hexdigest()


def model_fingerprint(model: str) -> str:
    """Identity of a model spec: a .nemo file by size + first/last MiB (cheap for 500 MB checkpoints), a
    pretrained name by itself."""
    path = Path(model).expanduser() if model else None
    if path is None or not path.is_file():
        return f"name:{model}"
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        if size > 2 << 20:
            f.seek(-(1 << 20), os.SEEK_END)
            h.update(f.read(1 << 20))
    return f"file:{h.hexdigest()[:24]}"


def model_key(model: str) -> str:
    """Directory name for a model spec: the .nemo file's stem or the pretrained name, filesystem-safe."""
    name = Path(model).stem if model.endswith(".nemo") else model
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "model"


def cache_dir_for(root: Union[str, Path], model: str, dataset: str, precision: str) -> Path:
    return Path(root) / model_key(model) / dataset / precision


# ---------------------------------------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------------------------------------


def write_cache(
    source,
    utterances: Sequence[Utterance],
    cache_dir: Union[str, Path],
    *,
    model: str,
    dataset: str,
    precision: str,
    batch_size: int = 16,
    progress: bool = True,
) -> Path:
    """Run `source` (any AcousticSource) over `utterances` and store its log-probs in `cache_dir`.

    Written into a temporary sibling directory and renamed at the end, so a crash never leaves a cache
    that looks complete.
    """
    from tqdm import tqdm

    utts = list(utterances)
    if not utts:
        raise ValueError("write_cache: no utterances")
    ids = [u.id for u in utts]
    if len(set(ids)) != len(ids):
        raise ValueError("write_cache: duplicate utterance ids")
    cache_dir = Path(cache_dir)
    tmp = cache_dir.with_name(cache_dir.name + f".tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    tokens: TokenSet = source.tokens
    entries: dict[str, dict] = {}
    offset = 0
    vocab = tokens.vocab_size
    watch = Stopwatch("cpu")
    watch.__enter__()  # the whole fill (source + writes), read when meta.json is written
    with open(tmp / "log_probs.f16", "wb") as f, tqdm(
        total=len(utts), desc=f"caching log-probs {dataset}", disable=not progress, unit="utt"
    ) as bar:
        for batch in source.batches(utts, batch_size):
            lp = batch.log_probs.detach().to("cpu", torch.float16).numpy()  # (B, T, V)
            if lp.shape[-1] != vocab:
                raise ValueError(f"source produced {lp.shape[-1]} columns, its token set has {vocab}")
            lengths = batch.lengths.detach().cpu().tolist()
            for i, u in enumerate(batch.utterances):
                n = int(lengths[i])
                data = np.ascontiguousarray(lp[i, :n]).tobytes()
                f.write(data)
                entries[u.id] = {"id": u.id, "offset": offset, "length": n, "digest": utterance_digest(u),
                                 "data_sha256": _data_digest(data)}
                offset += n
            bar.update(len(batch.utterances))
    missing = [i for i in ids if i not in entries]
    if missing:
        raise RuntimeError(f"source did not return {len(missing)} utterances, e.g. {missing[:3]}")
    sp_name = None
    if tokens.sp_model_path:
        sp_name = "tokenizer.model"
        shutil.copyfile(tokens.sp_model_path, tmp / sp_name)
    meta = {
        "format_version": FORMAT_VERSION,
        "model": model,
        "model_fingerprint": model_fingerprint(model),
        "dataset": dataset,
        "precision": precision,
        "dtype": "float16",
        "vocab_size": vocab,
        "tokens": list(tokens.tokens),
        "blank_id": tokens.blank_id,
        "token_kind": tokens.kind,
        "sp_model": sp_name,
        "frame_shift_s": float(source.frame_shift_s),
        "total_frames": offset,
        "manifest_sha256": manifest_hash(utts),
        "num_utterances": len(utts),
        "audio_seconds": float(sum(u.duration for u in utts)),
        "acoustic_wall_seconds": _stop(watch),
        "source": source.describe() if hasattr(source, "describe") else type(source).__name__,
        "utterances": [entries[i] for i in ids],
    }
    meta["meta_sha256"] = _meta_digest(meta)
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
    if cache_dir.exists():
        shutil.rmtree(cache_dir)
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(cache_dir)
    return cache_dir


# ---------------------------------------------------------------------------------------------------------
# Reader
# ---------------------------------------------------------------------------------------------------------


def _data_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _meta_digest(meta: dict) -> str:
    """sha256 of meta.json's canonical form without its own digest field."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def read_meta(cache_dir: Union[str, Path]) -> dict:
    """meta.json of a cache, checked: parseable, this format version, its digest intact, and a consistent
    utterance table (offsets and lengths inside the data file, no overlaps)."""
    path = Path(cache_dir) / "meta.json"
    if not path.is_file():
        raise FileNotFoundError(f"no log-prob cache at {str(cache_dir)!r} (missing meta.json)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StaleCacheError(f"{path} is not valid JSON ({e}); delete the cache and rebuild") from None
    if not isinstance(meta, dict):
        raise StaleCacheError(f"{path} is not a JSON object; delete the cache and rebuild")
    if meta.get("format_version") != FORMAT_VERSION:
        raise StaleCacheError(
            f"{cache_dir}: cache format {meta.get('format_version')} != {FORMAT_VERSION}; delete it and rebuild"
        )
    if meta.get("meta_sha256") != _meta_digest(meta):
        raise StaleCacheError(f"{path} does not match its meta_sha256 (edited or corrupted); delete the cache and rebuild")
    try:
        _check_layout(meta)
    except (KeyError, TypeError, ValueError) as e:
        raise StaleCacheError(f"{path}: inconsistent utterance table ({e}); delete the cache and rebuild") from None
    return meta


def _check_layout(meta: dict) -> None:
    vocab, total, blank = int(meta["vocab_size"]), int(meta["total_frames"]), int(meta["blank_id"])
    if vocab != len(meta["tokens"]) or not 0 <= blank < vocab:
        raise ValueError(f"vocab_size {vocab}, {len(meta['tokens'])} tokens, blank_id {blank}")
    end = 0
    for e in sorted(meta["utterances"], key=lambda e: int(e["offset"])):
        off, n = int(e["offset"]), int(e["length"])
        if not isinstance(e.get("data_sha256"), str):
            raise ValueError(f"utterance {e['id']!r} has no data digest")
        if off != end or n < 0:
            raise ValueError(f"utterance {e['id']!r} at frames [{off}, {off + n}) after frame {end}")
        end = off + n
    if end != total:
        raise ValueError(f"utterances cover {end} frames, total_frames is {total}")


class CacheSource:
    """AcousticSource reading a log-prob cache (memory-mapped; only the requested frames are read)."""

    def __init__(self, cache_dir: Union[str, Path], device: str = "cpu", model: Optional[str] = None):
        self.cache_dir = Path(cache_dir)
        self.meta = read_meta(self.cache_dir)
        if model is not None and Path(model).expanduser().is_file():
            fp = model_fingerprint(model)
            if fp != self.meta["model_fingerprint"]:
                raise StaleCacheError(
                    f"{self.cache_dir}: cache was written by model {self.meta['model']!r} "
                    f"({self.meta['model_fingerprint']}), not by {model!r} ({fp}); rebuild it"
                )
        sp = self.meta.get("sp_model")
        self.tokens = TokenSet(
            tokens=list(self.meta["tokens"]),
            blank_id=int(self.meta["blank_id"]),
            kind=self.meta["token_kind"],
            sp_model_path=str(self.cache_dir / sp) if sp else None,
        )
        self.frame_shift_s = float(self.meta["frame_shift_s"])
        self.device = device
        self._index = {e["id"]: e for e in self.meta["utterances"]}
        vocab, total = int(self.meta["vocab_size"]), int(self.meta["total_frames"])
        data_path = self.cache_dir / "log_probs.f16"
        expected = vocab * total * 2
        if data_path.stat().st_size != expected:
            raise StaleCacheError(f"{data_path}: {data_path.stat().st_size} bytes, expected {expected}; rebuild")
        self._data = np.memmap(data_path, dtype=np.float16, mode="r", shape=(max(total, 1), vocab))

    def describe(self) -> dict:
        return {k: self.meta[k] for k in ("model", "dataset", "precision", "manifest_sha256", "frame_shift_s")} | {
            "source": "cache",
            "cache_dir": str(self.cache_dir),
        }

    def check(self, utterances: Sequence[Utterance]) -> None:
        """Raise StaleCacheError unless every utterance is cached with the same content digest."""
        missing, changed = [], []
        for u in utterances:
            e = self._index.get(u.id)
            if e is None:
                missing.append(u.id)
            elif e["digest"] != utterance_digest(u):
                changed.append(u.id)
        if missing or changed:
            raise StaleCacheError(
                f"log-prob cache {self.cache_dir} is stale for this manifest: {len(missing)} utterances missing "
                f"(e.g. {missing[:3]}), {len(changed)} changed text/duration (e.g. {changed[:3]}); "
                "rebuild it (delete the directory, or run with model.params.cache_rebuild=true)"
            )

    def batches(self, utterances: Sequence[Utterance], batch_size: int) -> Iterator[AcousticBatch]:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        utts = list(utterances)
        self.check(utts)
        vocab = self.tokens.vocab_size
        for start in range(0, len(utts), batch_size):
            chunk = utts[start : start + batch_size]
            watch = Stopwatch("cpu")
            watch.__enter__()
            lens = [int(self._index[u.id]["length"]) for u in chunk]
            out = np.full((len(chunk), max(max(lens), 1), vocab), _PAD_LOGP, dtype=np.float32)  # (B, T, V)
            out[:, :, self.tokens.blank_id] = 0.0
            for i, u in enumerate(chunk):
                e = self._index[u.id]
                off = int(e["offset"])
                seg = self._data[off : off + lens[i]]
                if _data_digest(np.ascontiguousarray(seg).tobytes()) != e["data_sha256"]:
                    raise StaleCacheError(
                        f"{self.cache_dir}/log_probs.f16: the frames of utterance {u.id!r} do not match their digest "
                        "(corrupted or replaced); delete the cache and rebuild"
                    )
                out[i, : lens[i]] = seg
            log_probs = torch.from_numpy(out)
            lengths = torch.tensor(lens, dtype=torch.int64)
            if self.device != "cpu":
                log_probs, lengths = log_probs.to(self.device), lengths.to(self.device)
            yield AcousticBatch(
                utterances=list(chunk), log_probs=log_probs, lengths=lengths, acoustic_seconds=_stop(watch)
            )


# ---------------------------------------------------------------------------------------------------------
# Registry entry point
# ---------------------------------------------------------------------------------------------------------


@dataclass
class CacheSourceConfig:
    root: str = "data/logprob_cache"  # model.cache_dir
    model: str = ""  # model.nemo_model: the model whose log-probs are cached
    precision: str = "fp32"  # model.params.precision
    cache_rebuild: bool = False  # rebuild even when a valid cache exists
    build_if_missing: bool = True  # run the NeMo source to fill a missing/stale cache (needs NeMo + audio)


def _config_from(cfg: Any) -> CacheSourceConfig:
    from omegaconf import OmegaConf

    if isinstance(cfg, CacheSourceConfig):
        return cfg
    if OmegaConf.is_config(cfg):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    cfg = dict(cfg or {})
    if "model" in cfg and isinstance(cfg["model"], dict):  # the whole evaluation config
        m = cfg["model"]
        params = dict(m.get("params") or {})
        return CacheSourceConfig(
            root=m.get("cache_dir") or CacheSourceConfig.root,
            model=m.get("nemo_model") or params.get("model") or "",
            precision=params.get("precision", "fp32"),
            cache_rebuild=bool(params.get("cache_rebuild", False)),
            build_if_missing=bool(params.get("build_if_missing", True)),
        )
    known = set(CacheSourceConfig.__dataclass_fields__)
    return CacheSourceConfig(**{k: v for k, v in cfg.items() if k in known})


class _LazyCacheSource:
    """Cache source that fills (or refills) its cache with the NeMo model on first use when needed."""

    def __init__(self, cfg: CacheSourceConfig, full_cfg: Any, dataset: str, device: str):
        self.cfg, self.full_cfg, self.dataset, self.device = cfg, full_cfg, dataset, device
        self.cache_dir = cache_dir_for(cfg.root, cfg.model, dataset, cfg.precision)
        self._inner: Optional[CacheSource] = None
        self._nemo = None
        if (self.cache_dir / "meta.json").is_file() and not cfg.cache_rebuild:
            try:
                self._inner = CacheSource(self.cache_dir, device=device, model=cfg.model)
            except StaleCacheError:
                if not cfg.build_if_missing:
                    raise
        if self._inner is None:
            if not cfg.build_if_missing:
                raise FileNotFoundError(f"no log-prob cache at {self.cache_dir} and build_if_missing=false")
            from eval.acoustic.nemo import build_source as build_nemo

            self._nemo = build_nemo(full_cfg)
        src = self._inner or self._nemo
        self.tokens, self.frame_shift_s = src.tokens, src.frame_shift_s

    def batches(self, utterances: Sequence[Utterance], batch_size: int) -> Iterator[AcousticBatch]:
        if self._inner is not None:
            try:
                self._inner.check(utterances)
            except StaleCacheError:
                if not self.cfg.build_if_missing:
                    raise
                self._inner = None
        if self._inner is None:
            if self._nemo is None:
                from eval.acoustic.nemo import build_source as build_nemo

                self._nemo = build_nemo(self.full_cfg)
            write_cache(
                self._nemo, utterances, self.cache_dir, model=self.cfg.model, dataset=self.dataset,
                precision=self.cfg.precision, batch_size=batch_size,
            )
            self._inner = CacheSource(self.cache_dir, device=self.device, model=self.cfg.model)
        yield from self._inner.batches(utterances, batch_size)


def build_source(cfg: Any, *, dataset: Optional[str] = None, device: str = "cpu", tokens: Optional[TokenSet] = None,
                 workload: Any = None, manifest_path: Any = None):
    """The cache source for `dataset`. `cfg`: the whole eval config (`model.cache_dir` = cache root,
    `model.nemo_model` = model, `model.params.precision`), a CacheSourceConfig, or a dict with `cache_dir`
    pointing straight at one cache directory (holding meta.json)."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
    if isinstance(plain, dict) and "cache_dir" in plain and (Path(plain["cache_dir"]) / "meta.json").is_file():
        src = CacheSource(plain["cache_dir"], device=device, model=plain.get("model"))
    else:
        if not dataset:
            raise ValueError("the cache source needs the dataset name (dataset=...)")
        ccfg = _config_from(cfg)
        if not ccfg.model:
            raise ValueError("the cache source needs model.nemo_model (the model whose log-probs are cached)")
        src = _LazyCacheSource(ccfg, cfg, dataset, device)
    if tokens is not None:
        from recipes.nemo_tokenizer import check_vocab_matches

        check_vocab_matches(tokens, src.tokens)
    return src


def _stop(watch: Stopwatch) -> float:
    """Close a Stopwatch region opened across a loop or `with` block and return its wall seconds."""
    watch.__exit__(None, None, None)
    return watch.wall_seconds
