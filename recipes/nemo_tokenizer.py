"""Tokenizer bridge: the `TokenSet` of a NeMo CTC model, read straight from its `.nemo` file or object.

Why: a decoding graph (T, L, G) spells words with the model's own tokens, and a decoder reads log-prob
column `c` as token `tokens[c]`. If the graph was built from a different tokenizer than the model that
produces the log-probs, every word silently decodes as garbage. Taking the tokenizer from the model (and
checking with `check_vocab_matches` wherever a graph meets a model) makes that mismatch impossible or loud.

NeMo conventions (nemo.collections.asr.models.ctc_models / ctc_bpe_models):
- char models (`EncDecCTCModel`): `cfg.decoder.vocabulary` (== `cfg.labels`) lists the characters in column
  order, " " included; the CTC blank is the extra LAST column (`num_classes_with_blank - 1`).
- BPE models (`EncDecCTCModelBPE`, `tokenizer.type: bpe`): a sentencepiece model stored inside the `.nemo`
  tar as `<hash>_tokenizer.model`, referenced by `cfg.tokenizer.model_path: "nemo:<hash>_tokenizer.model"`;
  columns 0..V-2 are the sentencepiece ids, blank LAST. WordPiece (`wpe`) tokenizers are not supported.
- Hybrid RNNT/CTC models keep the CTC head in `cfg.aux_ctc.decoder`; its vocabulary is the same tokenizer's.

Reading a `.nemo` needs only `tarfile` + OmegaConf (no NeMo import), so graph recipes work where NeMo is
not installed; an in-memory `ASRModel` is also accepted.
"""
from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from recipes.tokens import BLANK_SYMBOL, TokenSet

_CONFIG_NAMES = ("model_config.yaml", "./model_config.yaml")


def _tar_member(tar: tarfile.TarFile, name: str) -> Optional[tarfile.TarInfo]:
    """Find `name` in a .nemo tar whatever its prefix ("./x", "x")."""
    for member in tar.getmembers():
        if member.name.lstrip("./") == name.lstrip("./") or Path(member.name).name == name:
            return member
    return None


def read_nemo_config(nemo_path: Union[str, Path]) -> Any:
    """The model config (OmegaConf DictConfig) stored in a `.nemo` file, without importing NeMo."""
    from omegaconf import OmegaConf

    nemo_path = Path(nemo_path)
    if not nemo_path.is_file():
        raise FileNotFoundError(f"nemo_path: no such .nemo file {str(nemo_path)!r}")
    try:
        with tarfile.open(nemo_path, "r:*") as tar:
            member = _tar_member(tar, "model_config.yaml")
            if member is None:
                raise ValueError(f"nemo_path {str(nemo_path)!r} has no model_config.yaml: not a NeMo model file")
            text = tar.extractfile(member).read().decode("utf-8")
    except tarfile.TarError as e:
        raise ValueError(f"nemo_path {str(nemo_path)!r} is not a .nemo (tar) archive: {e}") from None
    return OmegaConf.create(text)


def _ctc_decoder_cfg(cfg: Any) -> Any:
    """The CTC head's config: `decoder` for CTC models, `aux_ctc.decoder` for hybrid RNNT/CTC models."""
    aux = cfg.get("aux_ctc") if hasattr(cfg, "get") else None
    if aux is not None and aux.get("decoder") is not None:
        return aux.decoder
    dec = cfg.get("decoder")
    if dec is None:
        raise ValueError("the NeMo model config has no `decoder` section: not a CTC model")
    return dec


def _extract_sentencepiece(nemo_path: Path, cfg: Any, out_dir: Path) -> Path:
    """Copy the sentencepiece model out of the .nemo tar into `out_dir` (named by content hash)."""
    tok_cfg = cfg.tokenizer
    ref = tok_cfg.get("model_path") or tok_cfg.get("model")
    if not ref:
        raise ValueError(f"{nemo_path}: tokenizer config has no model_path: {dict(tok_cfg)}")
    ref = str(ref)
    with tarfile.open(nemo_path, "r:*") as tar:
        if ref.startswith("nemo:"):
            member = _tar_member(tar, ref[len("nemo:"):])
        else:
            # older checkpoints stored a plain file name; fall back to any *tokenizer.model in the tar
            member = _tar_member(tar, Path(ref).name) or next(
                (m for m in tar.getmembers() if m.name.endswith("tokenizer.model")), None
            )
        if member is None:
            raise ValueError(f"{nemo_path}: tokenizer model {ref!r} is not inside the .nemo archive")
        data = tar.extractfile(member).read()
    out_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()[:16]
    path = out_dir / f"tokenizer_{digest}.model"
    if not path.is_file():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def token_set_from_nemo_config(
    cfg: Any, *, sp_model_path: Optional[Union[str, Path]] = None, source: str = "model"
) -> TokenSet:
    """TokenSet from a NeMo model config; BPE models need the extracted sentencepiece model path."""
    dec = _ctc_decoder_cfg(cfg)
    tok_cfg = cfg.get("tokenizer")
    num_classes = dec.get("num_classes")
    if tok_cfg is not None:
        tok_type = str(tok_cfg.get("type", "bpe"))
        if tok_type != "bpe":
            raise ValueError(
                f"{source}: tokenizer.type={tok_type!r} is not supported (only sentencepiece 'bpe' and char models)"
            )
        if sp_model_path is None:
            raise ValueError(f"{source}: a BPE model needs its sentencepiece model (sp_model_path)")
        tokens = TokenSet.from_sentencepiece(sp_model_path, blank="last")
    else:
        vocabulary = list(dec.get("vocabulary") or cfg.get("labels") or [])
        if not vocabulary:
            raise ValueError(f"{source}: char model without decoder.vocabulary / labels")
        if " " not in vocabulary:
            raise ValueError(f"{source}: char vocabulary has no space ' ' token; cannot separate words")
        tokens = TokenSet(tokens=vocabulary + [BLANK_SYMBOL], blank_id=len(vocabulary), kind="char")
    if num_classes is not None and int(num_classes) > 0 and int(num_classes) + 1 != tokens.vocab_size:
        raise ValueError(
            f"{source}: decoder.num_classes={num_classes} (+1 blank) disagrees with the tokenizer's "
            f"{tokens.vocab_size - 1} tokens"
        )
    return tokens


def token_set_from_nemo(
    model_or_path: Any, out_dir: Optional[Union[str, Path]] = None
) -> TokenSet:
    """The model's TokenSet (blank LAST, NeMo's layout) from a `.nemo` path, a pretrained model name (needs
    NeMo and network access once) or a loaded NeMo ASRModel.

    out_dir: where a BPE model's sentencepiece file is written (default: `<file>.tokenizer/` beside the
    .nemo for a path; a temporary-free cache dir under ~/.cache for an in-memory model).
    """
    if isinstance(model_or_path, str) and not model_or_path.endswith(".nemo") and not Path(model_or_path).exists():
        return _token_set_from_model(_pretrained(model_or_path), out_dir)
    if isinstance(model_or_path, (str, Path)):
        nemo_path = Path(model_or_path)
        cfg = read_nemo_config(nemo_path)
        sp_path = None
        if cfg.get("tokenizer") is not None:
            target = Path(out_dir) if out_dir is not None else _default_out_dir(nemo_path)
            sp_path = _extract_sentencepiece(nemo_path, cfg, target)
        return token_set_from_nemo_config(cfg, sp_model_path=sp_path, source=str(nemo_path))
    return _token_set_from_model(model_or_path, out_dir)


def _pretrained(name: str) -> Any:
    """A pretrained NeMo model by name (NeMo downloads it once into its cache)."""
    try:
        from nemo.collections.asr.models import ASRModel
    except ImportError as e:
        raise RuntimeError(
            f"{name!r} is not a .nemo file, and resolving a pretrained model name needs NeMo "
            f"(pip install -e '.[nemo]'): {e}"
        ) from e
    try:
        return ASRModel.from_pretrained(name, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - NeMo raises bare ValueError/Exception for network failures
        raise RuntimeError(
            f"could not get pretrained NeMo model {name!r} ({type(e).__name__}: {e}); without NGC / Hugging Face "
            "access, download the .nemo file elsewhere and pass its path"
        ) from e


def _default_out_dir(nemo_path: Path) -> Path:
    beside = nemo_path.parent / (nemo_path.name + ".tokenizer")
    try:
        beside.mkdir(parents=True, exist_ok=True)
        return beside
    except OSError:  # read-only checkpoint directory
        return Path.home() / ".cache" / "ctc-decoding-harness" / "nemo_tokenizers"


def _token_set_from_model(model: Any, out_dir: Optional[Union[str, Path]]) -> TokenSet:
    """TokenSet from an in-memory NeMo ASRModel (char or sentencepiece BPE)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None:
        raise ValueError(f"expected a .nemo path or a NeMo ASRModel, got {type(model).__name__}")
    head = getattr(model, "ctc_decoder", None) or getattr(model, "decoder", None)
    n_cols = getattr(head, "num_classes_with_blank", None)
    sp_path = None
    tokenizer = getattr(model, "tokenizer", None)
    if cfg.get("tokenizer") is not None:
        sp = getattr(tokenizer, "tokenizer", None)
        if sp is None or not hasattr(sp, "serialized_model_proto"):
            raise ValueError(
                f"model tokenizer {type(tokenizer).__name__} is not a sentencepiece tokenizer; "
                "only sentencepiece BPE and char models are supported"
            )
        data = sp.serialized_model_proto()
        target = Path(out_dir) if out_dir is not None else _default_out_dir_for_model()
        target.mkdir(parents=True, exist_ok=True)
        sp_path = target / f"tokenizer_{hashlib.sha256(data).hexdigest()[:16]}.model"
        if not sp_path.is_file():
            tmp = sp_path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(sp_path)
    tokens = token_set_from_nemo_config(cfg, sp_model_path=sp_path, source=type(model).__name__)
    if n_cols is not None and int(n_cols) != tokens.vocab_size:
        raise ValueError(f"model CTC head has {n_cols} columns but its tokenizer gives {tokens.vocab_size}")
    return tokens


def _default_out_dir_for_model() -> Path:
    return Path.home() / ".cache" / "ctc-decoding-harness" / "nemo_tokenizers"


# ---------------------------------------------------------------------------------------------------------
# Graph <-> model agreement
# ---------------------------------------------------------------------------------------------------------


def _token_list(obj: Any, what: str) -> list[str]:
    """Column-ordered token strings from a TokenSet, a list, a tokens.txt path, a graph info dict or a
    graph-like object (with `.info` / `.tokens`)."""
    if isinstance(obj, TokenSet):
        return list(obj.tokens)
    if isinstance(obj, (str, Path)):
        p = Path(obj)
        if p.is_dir():  # a graph directory (recipes.graphs.build layout)
            if (p / "tokens_k2.txt").is_file():  # column order (tokens.txt there is Kaldi-numbered)
                return read_tokens_txt(p / "tokens_k2.txt")
            if (p / "graph_info.json").is_file():
                import json

                return _token_list(json.loads((p / "graph_info.json").read_text()), what)
            raise ValueError(f"{what}: graph directory {p} has neither tokens_k2.txt nor graph_info.json")
        return read_tokens_txt(p)
    if isinstance(obj, dict):
        for key in ("tokens", "token_list", "vocabulary"):
            if key in obj and obj[key] is not None:
                return _token_list(obj[key], what)
        for key in ("tokens_txt", "tokens_path"):
            if key in obj and obj[key]:
                return read_tokens_txt(obj[key])
        sha = obj.get("tokens_sha256") or (obj.get("sources") or {}).get("tokens_sha256")
        size = obj.get("vocab_size", obj.get("num_tokens"))
        if size is not None:  # graph_info.json (hash under "sources") or a WfstGraph's info (size only)
            return _Digest(int(size), str(sha) if sha else None)
        raise ValueError(f"{what}: graph info has no 'tokens' (or tokens_sha256 + vocab_size); keys: {sorted(obj)}")
    if hasattr(obj, "tokens") and not isinstance(obj, (list, tuple)):
        return _token_list(obj.tokens, what)
    if hasattr(obj, "info") and isinstance(getattr(obj, "info"), dict):  # WfstGraph
        info = dict(obj.info)
        if hasattr(obj, "num_tokens"):
            info.setdefault("num_tokens", obj.num_tokens)
        return _token_list(info, what)
    if isinstance(obj, (list, tuple)):
        return [str(t) for t in obj]
    raise ValueError(f"{what}: cannot read a token list from {type(obj).__name__}")


def read_tokens_txt(path: Union[str, Path]) -> list[str]:
    """k2/icefall tokens.txt ("<symbol> <id>" per line; "<space>" stands for " ") -> list by id."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokens.txt: no such file {str(path)!r}")
    by_id: dict[int, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.rsplit(maxsplit=1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise ValueError(f"{path}:{lineno}: expected '<symbol> <id>', got {line!r}")
        sym = " " if parts[0] == "<space>" else parts[0]
        by_id[int(parts[1])] = sym
    if sorted(by_id) != list(range(len(by_id))):
        raise ValueError(f"{path}: token ids are not 0..{len(by_id) - 1}")
    return [by_id[i] for i in range(len(by_id))]


@dataclass(frozen=True)
class _Digest:
    """What a graph_info.json records about its token set when it does not list the tokens."""

    vocab_size: int
    tokens_sha256: Optional[str]  # None: only the size is known (the check is weaker)


def _tokens_sha256(tokens: list[str]) -> str:
    # same digest as recipes.graphs.build and `describe` below
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()[:16]


_BLANK_ALIASES = {BLANK_SYMBOL, "<blank>", "<blk>", "<b>", "<eps>"}


def check_vocab_matches(graph_tokens: Any, model_tokens: Any) -> None:
    """Raise ValueError when a graph and a model disagree on the vocabulary (column -> token).

    graph_tokens: what the graph was built from (TokenSet, token list, tokens.txt path, graph info dict or
    WfstGraph-like object with `.info`). model_tokens: the acoustic model's (TokenSet or token list).
    Blank spellings ("<blk>", "<blank>", ...) are treated as equal; everything else must match exactly,
    column by column, because a decoder reads column c as token c.
    """
    g = _token_list(graph_tokens, "graph_tokens")
    m = _token_list(model_tokens, "model_tokens")
    if isinstance(m, _Digest):
        g, m = m, g
    if isinstance(g, _Digest):
        if isinstance(m, _Digest):
            raise ValueError("check_vocab_matches: at least one side must list its tokens")
        if g.vocab_size != len(m) or (g.tokens_sha256 is not None and g.tokens_sha256 != _tokens_sha256(m)):
            raise ValueError(
                f"vocabulary mismatch: the graph was built for {g.vocab_size} columns (tokens sha256 "
                f"{g.tokens_sha256}) but the model outputs {len(m)} (sha256 {_tokens_sha256(m)}); rebuild the graph "
                "from this model's tokenizer (recipes.nemo_tokenizer.token_set_from_nemo)"
            )
        return
    norm = lambda t: BLANK_SYMBOL if t in _BLANK_ALIASES else t  # noqa: E731
    if len(g) != len(m):
        raise ValueError(
            f"vocabulary mismatch: the graph reads {len(g)} log-prob columns but the model outputs {len(m)}; "
            "rebuild the graph from this model's tokenizer (recipes.nemo_tokenizer.token_set_from_nemo)"
        )
    diffs = [(i, a, b) for i, (a, b) in enumerate(zip(g, m)) if norm(a) != norm(b)]
    if diffs:
        shown = ", ".join(f"column {i}: graph {a!r} vs model {b!r}" for i, a, b in diffs[:5])
        raise ValueError(
            f"vocabulary mismatch in {len(diffs)} of {len(g)} columns ({shown}{', ...' if len(diffs) > 5 else ''}); "
            "the graph was built from another tokenizer or blank position than the model's"
        )


def describe(tokens: TokenSet) -> dict:
    """Small provenance record for graph info / run configs."""
    return {
        "kind": tokens.kind,
        "vocab_size": tokens.vocab_size,
        "blank_id": tokens.blank_id,
        "sp_model_path": tokens.sp_model_path,
        "tokens_sha256": _tokens_sha256(list(tokens.tokens)),
    }


def write_nemo_vocab_txt(sp_model: Union[str, Path], out_path: Union[str, Path]) -> Path:
    """vocab.txt beside a sentencepiece model, as NeMo's process_asr_text_tokenizer.py writes it (word-initial pieces
    without the leading "\u2581", the others "##"-prefixed): what a NeMo `tokenizer: {dir, type: bpe}` folder holds."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    out_path = Path(out_path)
    with open(out_path, "w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            f.write((piece[1:] if piece.startswith("\u2581") else "##" + piece) + "\n")
    return out_path

