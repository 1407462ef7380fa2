"""Config errors are caught at load with the valid choices listed; decoder configs resolve per decoder."""
import pytest

from eval.acoustic import build_acoustic_source
from eval.config import compose_config, resolve_decoder_config, validate_config


def test_default_config_composes_and_validates():
    cfg = validate_config(compose_config([]))
    assert cfg.decoder.name == "greedy"
    assert cfg.model.token_kind.value == "bpe" and cfg.model.blank.value == "last"


def test_unknown_decoder_in_list_names_valid_choices():
    with pytest.raises(ValueError, match=r"unknown decoder 'foo'.*valid choices.*greedy"):
        validate_config(compose_config(["experiment.decoders=[greedy,foo]"]))


def test_unknown_decoder_group_choice_lists_options():
    with pytest.raises(ValueError, match=r"(?s)decoder/nope.*flashlight"):
        compose_config(["decoder=nope"])


def test_bad_enum_value_lists_allowed_values():
    with pytest.raises(ValueError, match=r"bep.*char, bpe"):
        compose_config(["model.token_kind=bep"])


def test_decoder_parameter_type_is_checked():
    cfg = compose_config(["decoder=flashlight", "decoder.beam_size=wide"])
    with pytest.raises(ValueError, match="beam_size"):
        resolve_decoder_config("flashlight", validate_config(cfg))


def test_decoder_overrides_apply_to_listed_decoders():
    cfg = validate_config(
        compose_config(["experiment.decoders=[greedy,flashlight]", "+experiment.decoder_overrides.flashlight.beam_size=7"])
    )
    fl = resolve_decoder_config("flashlight", cfg)
    assert fl.beam_size == 7 and fl.name == "flashlight"
    assert fl.lm_weight == pytest.approx(0.5)  # from conf/decoder/flashlight.yaml


def test_missing_boost_file_is_reported():
    cfg = compose_config(["boost.mode=words", "boost.words_file=/nonexistent/words.txt"])
    with pytest.raises(FileNotFoundError, match="boost.words_file"):
        validate_config(cfg)


def test_boost_words_mode_needs_words():
    with pytest.raises(ValueError, match="boost.mode=words needs"):
        validate_config(compose_config(["boost.mode=words"]))


def test_batch_size_must_be_positive():
    with pytest.raises(ValueError, match="batch_size"):
        validate_config(compose_config(["experiment.batch_size=0"]))


def test_unknown_acoustic_source_lists_choices():
    with pytest.raises(ValueError, match=r"unknown acoustic source 'wav2vec'.*simulator"):
        build_acoustic_source("wav2vec", None)


def test_missing_source_module_is_loud(monkeypatch):
    """Regression (issue 11): a missing source module was reported as "does not exist yet" scaffolding; a
    registered module that is not there is a plain import error naming it."""
    import eval.acoustic as acoustic

    monkeypatch.setitem(acoustic.ACOUSTIC_SOURCES, "later", "eval.acoustic.not_written_yet")
    with pytest.raises(ModuleNotFoundError, match="not_written_yet"):
        build_acoustic_source("later", None)


def test_every_source_takes_the_one_build_source_signature():
    """Regression (issue 11): `inspect.signature` sniffing passed each source only the arguments it named, so a
    renamed parameter was silently dropped. Every source now takes the same keyword arguments."""
    import importlib
    import inspect

    from eval.acoustic import ACOUSTIC_SOURCES

    want = {"workload", "dataset", "tokens", "device", "manifest_path"}
    for kind, module in ACOUSTIC_SOURCES.items():
        params = inspect.signature(importlib.import_module(module).build_source).parameters
        assert want <= set(params), kind
        assert not any(p.kind == p.VAR_KEYWORD for p in params.values()), kind


def test_demo_overrides_select_scale_experiment_and_baseline():
    from eval.demo import DemoOptions, demo_overrides

    ov = demo_overrides(DemoOptions(["scale=tiny", "data=simulator", "data.max_utterances=3"]))
    assert "experiment=demo" in ov and "data=tiny" in ov and "model=simulator_bpe" in ov
    assert "experiment.run=tiny_simulator" in ov and ov[-1] == "data.max_utterances=3"
    assert any(o.startswith("experiment.gate_baseline=") and o.endswith("demo_tiny_simulator.json") for o in ov)
    cfg = validate_config(compose_config(ov))
    assert cfg.experiment.skip_unavailable and "flashlight" in cfg.experiment.decoders
    # the default: the project's Conformer-CTC on the synthesized speech test sets, gated against demo_tiny.json
    ov = demo_overrides(DemoOptions(["scale=tiny"]), {"clean": "c.jsonl", "other": "o.jsonl"})
    assert {"experiment=demo_speech", "data=speech_tiny", "model=conformer_ctc_speech", "experiment.run=tiny"} <= set(ov)
    assert any(o.startswith("experiment.gate_baseline=") and o.endswith("demo_tiny.json") for o in ov)
    cfg = validate_config(compose_config(ov))
    assert dict(cfg.data.manifests) == {"clean": "c.jsonl", "other": "o.jsonl"} and cfg.model.source.value == "nemo"
    assert cfg.experiment.name == "demo" and "wfst" in cfg.experiment.decoders
    with pytest.raises(ValueError, match="usage"):
        DemoOptions(["--fast"])


def test_unknown_scale_lists_valid_scales():
    with pytest.raises(ValueError, match=r"unknown data.scale 'huge'.*tiny"):
        validate_config(compose_config(["data.scale=huge"]))


# ---------------------------------------------------------------------------------------------------------
# Decoder configs declared once (issue 11)
# ---------------------------------------------------------------------------------------------------------

# YAML values that deliberately differ from the schema's (= the decoder library's) default, and why. Every
# other YAML value must equal the default; these must still have the schema's type.
DELIBERATE_DEPARTURES = {
    ("wfst", "search_beam"): "the paper's / Riva's default_beam 17 (library: k2's 20)",
    ("wfst", "acoustic_scale"): "LM weight 1/3, the same for every graph decoder",
    ("k2py", "acoustic_scale"): "LM weight 1/3",
    ("k2", "acoustic_scale"): "LM weight 1/3",
    ("kaldi", "acoustic_scale"): "LM weight 1/3",
    ("riva", "acoustic_scale"): "LM weight 1/3",
}


def _decoder_names():
    from eval.adapters.base import ADAPTER_MODULES

    return sorted(ADAPTER_MODULES)


@pytest.mark.parametrize("name", _decoder_names())
def test_decoder_yaml_schema_and_library_config_agree(name):
    """Regression (issue 11): decoder configs were declared three times with disagreeing defaults
    (WfstDecoderConfig.search_beam 20, WfstAdapterConfig 17, `cfg.get("search_beam", 17.0)`), and parameters that
    lived only in an adapter schema were missing from conf/decoder/*.yaml. Now: the YAML states every schema
    field; for our own decoders the schema is the library dataclass's fields (same types and defaults) minus
    the harness-filled CONTEXT_FIELDS plus the adapter-only fields."""
    import dataclasses
    import typing

    from omegaconf import OmegaConf

    from eval.adapters.base import CONTEXT_FIELDS
    from eval.config import decoder_schema, decoder_yaml_path

    schema = decoder_schema(name)
    yaml = OmegaConf.to_container(OmegaConf.load(decoder_yaml_path(name)))
    fields = {f.name: f for f in dataclasses.fields(schema)}
    assert list(yaml) == list(fields), f"{name}: conf/decoder/{name}.yaml keys differ from its schema's"
    typed = OmegaConf.merge(OmegaConf.structured(schema), yaml)  # every YAML value has the schema's type
    for key, f in fields.items():
        if (name, key) in DELIBERATE_DEPARTURES:
            assert typed[key] != f.default, f"{name}.{key} is listed as a departure but equals the default"
            continue
        assert yaml[key] == f.default, f"{name}.{key}: YAML {yaml[key]!r}, schema default {f.default!r}"
    library = getattr(schema, "library_config", None)
    if name in ("wfst", "ctc_beam"):  # our decoders: the schema is built from the library dataclass
        assert library is not None
    if library is None:
        assert name not in CONTEXT_FIELDS
        return
    lib_fields = {f.name: f for f in dataclasses.fields(library)}
    lib_types = typing.get_type_hints(library)
    context = set(CONTEXT_FIELDS.get(name, {}))
    assert context <= set(lib_fields)
    assert set(fields) - set(schema.adapter_fields) == set(lib_fields) - context
    schema_types = typing.get_type_hints(schema)
    for key in set(lib_fields) - context:
        assert fields[key].default == lib_fields[key].default, key
        assert schema_types[key] == lib_types[key], key


def test_adapters_read_no_hand_copied_defaults():
    """Regression (issue 11): adapters carried `cfg.get("search_beam", 17.0)`-style fallbacks that silently
    disagreed with the YAML and the library. The adapters now read the typed config's fields directly."""
    import re
    from pathlib import Path

    import eval.adapters

    for path in Path(eval.adapters.__file__).parent.glob("*.py"):
        assert not re.search(r"cfg\.get\(", path.read_text()), path.name


def test_decoder_parameter_typo_fails_at_validation():
    cfg = compose_config(["decoder=wfst", "decoder.search_beam=8"])
    assert resolve_decoder_config("wfst", validate_config(cfg)).search_beam == 8.0
    with pytest.raises(ValueError, match=r"(?s)serch_beam"):
        compose_config(["decoder=wfst", "decoder.serch_beam=8"])
    with pytest.raises(ValueError, match="invalid config for decoder 'wfst'.*search_beam"):
        validate_config(compose_config(["decoder=wfst", "decoder.search_beam=wide"]))
