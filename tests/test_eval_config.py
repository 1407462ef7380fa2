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


def test_missing_source_module_is_a_clear_error(monkeypatch):
    import eval.acoustic as acoustic

    monkeypatch.setitem(acoustic.ACOUSTIC_SOURCES, "later", "eval.acoustic.not_written_yet")
    with pytest.raises(RuntimeError, match="not available.*not_written_yet"):
        build_acoustic_source("later", None)


def test_demo_overrides_select_scale_experiment_and_baseline():
    from eval.demo import demo_overrides

    scale, ov = demo_overrides(["scale=tiny", "data.max_utterances=3"])
    assert scale == "tiny"
    assert "experiment=demo" in ov and "data=tiny" in ov and "experiment.run=tiny" in ov
    assert ov[-1] == "data.max_utterances=3"
    cfg = validate_config(compose_config(ov))
    assert cfg.experiment.skip_unavailable and "flashlight" in cfg.experiment.decoders
    with pytest.raises(ValueError, match="usage"):
        demo_overrides(["--fast"])


def test_unknown_scale_lists_valid_scales():
    with pytest.raises(ValueError, match=r"unknown data.scale 'huge'.*tiny"):
        validate_config(compose_config(["data.scale=huge"]))
