"""Typed schemas of the evaluation app, registered with Hydra's ConfigStore.

The YAML groups under `conf/` (data/, model/, graph/, decoder/, experiment/) fill these dataclasses;
OmegaConf checks every value against the field's type when the config is composed, so a typo such as
`model.token_kind=bep` fails at load with the list of allowed values (Enums), not deep inside a run.

Decoder configs are per decoder: each adapter module defines `CONFIG_SCHEMA` (a dataclass with a `name`
field; for our own decoders it is the decoder library's config dataclass plus adapter-only fields, see
`eval.adapters.base.adapter_schema`), and conf/decoder/<name>.yaml states every parameter of that schema with
the harness's value (tests/test_eval_config.py checks that the YAML, the schema and the library agree), so
`decoder.search_beam=8` needs no `+` and `--help` lists every parameter. `decoder_config` layers schema <- YAML
<- overrides; every path that builds a decoder goes through it.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"


class AcousticSourceKind(str, Enum):
    simulator = "simulator"  # CTC posterior simulator over the synthetic workload
    cache = "cache"  # log-probs cached on disk by an earlier run
    nemo = "nemo"  # a NeMo CTC model run on audio


class TokenKind(str, Enum):
    char = "char"
    bpe = "bpe"


class BlankPosition(str, Enum):
    first = "first"  # torchaudio / k2 recipes
    last = "last"  # NeMo


class Topology(str, Enum):
    normal = "normal"
    compact = "compact"
    minimal = "minimal"


class BoostMode(str, Enum):
    none = "none"
    words = "words"  # the same {word: value} for every utterance (words + words_file)
    test_set_words = "test_set_words"  # every word of the dataset's references ("accurate" scenario)
    per_utterance_file = "per_utterance_file"  # JSONL {"id": ..., "boosts": {word: value}}


@dataclass
class DataConfig:
    """Which utterances to decode."""

    scale: str = "tiny"  # workload scale (checked against recipes.workload's scales at run time)
    sets: list[str] = field(default_factory=lambda: ["clean", "other"])
    max_utterances: Optional[int] = None  # per set, >= 1; None = all
    workload_root: Optional[str] = None  # where the synthetic workload is generated/cached
    # set name -> NeMo manifest path; when non-empty these replace the workload's sets (e.g. LibriSpeech)
    manifests: dict[str, str] = field(default_factory=dict)
    arpa_path: Optional[str] = None  # LM for LM-fused decoders; default: the workload's ARPA
    words_path: Optional[str] = None  # word list ("word ..." per line); default: the workload's


@dataclass
class ModelConfig:
    """The acoustic source: what turns utterances into (B, T, V) log-probs, and its token set."""

    source: AcousticSourceKind = AcousticSourceKind.simulator
    token_kind: TokenKind = TokenKind.bpe
    blank: BlankPosition = BlankPosition.last
    cache_dir: Optional[str] = None  # for source=cache
    nemo_model: Optional[str] = None  # for source=nemo: pretrained name or .nemo path
    params: dict[str, Any] = field(default_factory=dict)  # source-specific extras


@dataclass
class GraphConfig:
    """Which decoding graph WFST decoders use; built by `recipes.build_graphs` when missing."""

    topology: Topology = Topology.compact
    root: str = "data/graphs"
    graph_dir: Optional[str] = None  # explicit directory; default <root>/<scale>/<kind>_blank<pos>/<topology>
    build_if_missing: bool = True


@dataclass
class BoostConfig:
    """Per-utterance word boosting (log-domain, positive favours the word) and boost sweeps."""

    mode: BoostMode = BoostMode.none
    words: list[str] = field(default_factory=list)
    words_file: Optional[str] = None  # one word per line (first column)
    value: float = 0.0
    sweep: list[float] = field(default_factory=list)  # non-empty: decode once per boost value
    per_utterance_file: Optional[str] = None


@dataclass
class ExperimentConfig:
    """How to run: which decoders, batch size, devices, where results go."""

    name: str = "default"
    run: Optional[str] = None  # run directory name; None = timestamp
    output_dir: str = "runs"
    # decoder labels "name" or "name@device" (e.g. "wfst@cuda"); empty = just the `decoder` group choice
    decoders: list[str] = field(default_factory=list)
    decoder_overrides: dict[str, Any] = field(default_factory=dict)  # {name: {param: value}}
    batch_size: int = 16
    warmup_batches: int = 1
    device: str = "cpu"  # default decoder device; "auto" = cuda when available
    skip_unavailable: bool = False  # True: a decoder that cannot be built here is listed with the reason
    progress: bool = True  # a progress bar on a terminal, one line per dataset elsewhere
    # 95 % bootstrap CIs of each decoder's WER (per dataset), and of its WER difference to this decoder's (paired, same
    # utterances) when set, e.g. ci_reference=wfst; ci_resamples=0 turns them off
    ci_reference: Optional[str] = None
    ci_resamples: int = 1000
    verbose: bool = False  # show third-party C++ output (KenLM's banner, kaldilm's parser log) as it happens
    gate_baseline: Optional[str] = None  # baseline JSON to gate the results against
    gate_metrics: list[str] = field(default_factory=lambda: ["wer"])


@dataclass
class EvalConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    decoder: Any = field(default_factory=lambda: {"name": "greedy"})
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    boost: BoostConfig = field(default_factory=BoostConfig)


def register_configs() -> None:
    """Store the schemas so `conf/config.yaml` can extend them (`defaults: [eval_schema, ...]`)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="eval_schema", node=EvalConfig)
    cs.store(group="data", name="data_schema", node=DataConfig)
    cs.store(group="model", name="model_schema", node=ModelConfig)
    cs.store(group="graph", name="graph_schema", node=GraphConfig)
    cs.store(group="experiment", name="experiment_schema", node=ExperimentConfig)


# ---------------------------------------------------------------------------------------------------------
# Loading and validation outside Hydra (tests, demo, notebooks)
# ---------------------------------------------------------------------------------------------------------


# NeMo's speech_to_text_eval.py arguments, accepted as they are spelled there
NEMO_SHORTHANDS = ("model_path", "pretrained_name", "dataset_manifest")


def _is_model_file(value: str) -> bool:
    return value.endswith(".nemo") or Path(value).expanduser().is_file()


def expand_shorthands(overrides: Sequence[str]) -> list[str]:
    """NeMo-style arguments -> this harness's overrides, as NeMo's `speech_to_text_eval.py` takes them:

        model_path=/x.nemo | pretrained_name=stt_en_conformer_ctc_small  -> model=nemo_file model.nemo_model=...
        model=/x.nemo  (a .nemo path where a model config name is expected) -> the same
        dataset_manifest=/data/test.json  -> +data.manifests.test=/data/test.json (the set named by the file's stem)

    Everything else passes through unchanged. A relative .nemo path is made absolute (Hydra would otherwise take
    `model=x.nemo` for a config name and fail with "Could not find 'model/x.nemo'")."""
    out: list[str] = []
    for o in overrides:
        key, sep, value = str(o).partition("=")
        if not sep:
            out.append(o)
            continue
        if key in ("model_path", "pretrained_name") or (key == "model" and _is_model_file(value)):
            if not value:
                raise ValueError(f"{key}= needs a .nemo path or a pretrained NeMo model name")
            path = Path(value).expanduser()
            ref = str(path.resolve()) if key != "pretrained_name" and (value.endswith(".nemo") or path.exists()) \
                else value
            if "model=nemo_file" not in out and "model=nemo_file" not in overrides:
                out.append("model=nemo_file")
            out.append(f"model.nemo_model={ref}")
        elif key == "dataset_manifest":
            if not value:
                raise ValueError("dataset_manifest= needs a NeMo manifest (JSONL) path")
            name = re.sub(r"[^A-Za-z0-9_-]", "_", Path(value).stem) or "test"
            out.append(f"+data.manifests.{name}={value}")
        else:
            out.append(o)
    return out


def compose_config(overrides: Optional[list[str]] = None, config_name: str = "config") -> DictConfig:
    """Compose `conf/<config_name>.yaml` with command-line style overrides, exactly as `eval.run` does (NeMo-style
    shorthands included: `expand_shorthands`)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from hydra.errors import HydraException

    register_configs()
    try:
        if GlobalHydra.instance().is_initialized():
            return compose(config_name=config_name, overrides=expand_shorthands(overrides or []))
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            return compose(config_name=config_name, overrides=expand_shorthands(overrides or []))
    except HydraException as e:
        cause = f": {e.__cause__}" if e.__cause__ is not None else ""
        raise ValueError(f"{e}{cause}") from None


def validate_config(cfg: DictConfig) -> DictConfig:
    """Merge onto the schema (type/enum checks) and check cross-field rules; returns the typed config."""
    try:
        typed = OmegaConf.merge(OmegaConf.structured(EvalConfig), _strip_hydra(cfg))
    except OmegaConfBaseException as e:
        raise ValueError(f"invalid evaluation config: {e}") from None
    if typed.experiment.batch_size <= 0:
        raise ValueError(f"experiment.batch_size must be positive, got {typed.experiment.batch_size}")
    if typed.experiment.ci_resamples < 0:
        raise ValueError(f"experiment.ci_resamples must be >= 0 (0: no confidence intervals), got "
                         f"{typed.experiment.ci_resamples}")
    if typed.experiment.warmup_batches < 0:
        raise ValueError(f"experiment.warmup_batches must be >= 0, got {typed.experiment.warmup_batches}")
    if typed.data.max_utterances is not None and typed.data.max_utterances < 1:
        raise ValueError(f"data.max_utterances must be >= 1 or null (all), got {typed.data.max_utterances}")
    if not typed.data.manifests:
        from recipes.workload import SCALES

        if typed.data.scale not in SCALES:
            raise ValueError(f"unknown data.scale {typed.data.scale!r}; valid choices: {sorted(SCALES)}")
    for label in decoder_labels(typed):
        resolve_decoder_config(label, typed)  # unknown names and ill-typed parameters fail here, before any work
    if typed.boost.mode == BoostMode.words and not (typed.boost.words or typed.boost.words_file):
        raise ValueError("boost.mode=words needs boost.words=[...] or boost.words_file=<path>")
    if typed.boost.mode == BoostMode.per_utterance_file and not typed.boost.per_utterance_file:
        raise ValueError("boost.mode=per_utterance_file needs boost.per_utterance_file=<path>")
    for key in ("words_file", "per_utterance_file"):
        p = typed.boost.get(key)
        if p and not Path(p).is_file():
            raise FileNotFoundError(f"boost.{key}: no such file {p!r}")
    return typed


def _strip_hydra(cfg: DictConfig) -> DictConfig:
    c = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    if "hydra" in c:
        del c["hydra"]
    return c


def decoder_labels(cfg: DictConfig) -> list[str]:
    labels = list(cfg.experiment.decoders)
    if not labels:
        if "name" not in cfg.decoder:
            raise ValueError("decoder config has no `name`; pick one with decoder=<name>")
        labels = [str(cfg.decoder.name)]
    return labels


_LABEL_PARAMS = re.compile(r"\[([^\[\]]*)\]")


def split_decoder_label(label: str) -> tuple[str, Optional[str]]:
    """"wfst@cuda" -> ("wfst", "cuda"); "greedy" -> ("greedy", None); parameters in brackets are not part of the
    name or device: "wfst[output=mbr]@cuda" and "wfst@cuda[output=mbr]" -> ("wfst", "cuda") (label_overrides)."""
    base = _LABEL_PARAMS.sub("", str(label))
    if "[" in base or "]" in base:
        raise ValueError(f"decoder label {label!r}: unbalanced brackets (expected name[key=value,...]@device)")
    name, _, device = base.partition("@")
    return name, (device or None)


def label_overrides(label: str) -> dict:
    """The decoder parameters a label carries in brackets, so that one run compares one decoder under several
    settings: "wfst[output=lattice_rescore,rescore_lm_scale=0.5]" -> {"output": "lattice_rescore",
    "rescore_lm_scale": 0.5} (values read as YAML scalars; no commas inside values). They apply after the
    decoder group and experiment.decoder_overrides, to this label only; the label stays the row's name."""
    import yaml

    out: dict = {}
    for group in _LABEL_PARAMS.findall(str(label)):
        for item in (x.strip() for x in group.split(",")):
            key, eq, value = item.partition("=")
            if not item or not eq or not key.strip():
                raise ValueError(f"decoder label {label!r}: expected [key=value,...], got {item!r}")
            out[key.strip()] = yaml.safe_load(value.strip()) if value.strip() else ""
    return out


def check_decoder_name(name: str) -> None:
    from eval.adapters.base import ADAPTER_MODULES

    if name not in ADAPTER_MODULES:
        raise ValueError(f"unknown decoder {name!r}; valid choices: {sorted(ADAPTER_MODULES)}")


def decoder_yaml_path(name: str) -> Path:
    return CONF_DIR / "decoder" / f"{name}.yaml"


def decoder_config(name: str, *layers: Any) -> DictConfig:
    """Decoder `name`'s typed config: its adapter's CONFIG_SCHEMA <- conf/decoder/<name>.yaml <- `layers`
    (dicts, DictConfigs or dataclass instances, later wins). Unknown keys and ill-typed values raise a
    one-line ValueError naming the decoder."""
    schema = decoder_schema(name)
    path = decoder_yaml_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"decoder {name!r} has no config file {path}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.load(path),
                                 *[OmegaConf.structured(x) if is_dataclass(x) else (x or {}) for x in layers])
    except OmegaConfBaseException as e:
        raise ValueError(f"invalid config for decoder {name!r}: {_one_line(e)}") from None
    if merged.name != name:
        raise ValueError(f"decoder config for {name!r} has name {merged.name!r}")
    return merged


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def resolve_decoder_config(name: str, cfg: DictConfig) -> DictConfig:
    """Decoder `name`'s config in an evaluation config: the `decoder` group when it names this decoder (it
    holds the command-line overrides), then experiment.decoder_overrides[name], then, when `name` is a decoder
    label with parameters ("wfst[output=mbr]@cuda"), that label's (label_overrides)."""
    label, (name, _) = name, split_decoder_label(name)
    group = cfg.decoder if "name" in cfg.decoder and cfg.decoder.name == name else None
    overrides = (cfg.experiment.decoder_overrides or {}).get(name)
    return decoder_config(name, group, overrides, label_overrides(label))


def decoder_schema(name: str) -> type:
    """The CONFIG_SCHEMA dataclass of decoder `name`'s adapter module (which imports optional packages only
    when a decoder is built, so this works wherever the harness is installed)."""
    from eval.adapters.base import ADAPTER_MODULES

    check_decoder_name(name)
    module = importlib.import_module(ADAPTER_MODULES[name])
    schema = getattr(module, "CONFIG_SCHEMA", None)
    if schema is None or not is_dataclass(schema):
        raise RuntimeError(f"{ADAPTER_MODULES[name]} defines no CONFIG_SCHEMA dataclass")
    return schema
