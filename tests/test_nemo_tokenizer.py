"""Tokenizer bridge: TokenSet from a .nemo (char / sentencepiece BPE, blank last) and the graph<->model
vocabulary check."""
from __future__ import annotations

import tarfile

import pytest

from recipes.nemo_tokenizer import check_vocab_matches, read_nemo_config, read_tokens_txt, token_set_from_nemo
from recipes.tokens import TokenSet

# ---- vocabulary agreement (no NeMo needed) ----


def test_check_vocab_matches_accepts_equal_sets_and_blank_spellings():
    a = TokenSet.from_chars(list("ab'"), blank="last")
    check_vocab_matches(a, a)
    check_vocab_matches(a, [" ", "a", "b", "'", "<blank>"])


def test_check_vocab_matches_names_the_difference():
    model = TokenSet.from_chars(list("abc"), blank="last")
    with pytest.raises(ValueError, match="graph reads 4 log-prob columns but the model outputs 5"):
        check_vocab_matches(TokenSet.from_chars(list("ab"), blank="last"), model)
    with pytest.raises(ValueError, match=r"column 3: graph 'd' vs model 'c'"):
        check_vocab_matches(TokenSet.from_chars(list("abd"), blank="last"), model)
    # same tokens, other blank position: every column differs
    with pytest.raises(ValueError, match="vocabulary mismatch in 5 of 5 columns"):
        check_vocab_matches(TokenSet.from_chars(list("abc"), blank="first"), model)


def test_check_vocab_matches_reads_graph_dirs_and_infos(tmp_path):
    model = TokenSet.from_chars(list("abc"), blank="last")
    model.write_tokens_txt(tmp_path / "tokens_k2.txt")
    assert read_tokens_txt(tmp_path / "tokens_k2.txt") == model.tokens  # "<space>" round trip
    check_vocab_matches(tmp_path, model)
    check_vocab_matches(tmp_path / "tokens_k2.txt", model)
    from recipes.nemo_tokenizer import describe

    info = {"vocab_size": model.vocab_size, "sources": {"tokens_sha256": describe(model)["tokens_sha256"]}}
    check_vocab_matches(info, model)
    other = TokenSet.from_chars(list("abd"), blank="last")
    with pytest.raises(ValueError, match="tokens sha256"):
        check_vocab_matches(info, other)
    with pytest.raises(ValueError, match="built for 5 columns"):
        check_vocab_matches({"vocab_size": 5}, TokenSet.from_chars(list("abcd"), blank="last"))


def test_read_nemo_config_rejects_non_nemo_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.nemo"):
        read_nemo_config(tmp_path / "missing.nemo")
    bad = tmp_path / "bad.nemo"
    bad.write_bytes(b"hello")
    with pytest.raises(ValueError, match="not a .nemo"):
        read_nemo_config(bad)
    empty = tmp_path / "empty.nemo"
    with tarfile.open(empty, "w"):
        pass
    with pytest.raises(ValueError, match="model_config.yaml"):
        read_nemo_config(empty)


# ---- from real .nemo files (needs NeMo to build them) ----


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    pytest.importorskip("nemo.collections.asr")
    from eval.bench.nemo_e2e import make_tiny_nemo_model

    d = tmp_path_factory.mktemp("nemo_tok")
    return {
        "bpe": make_tiny_nemo_model(d / "bpe.nemo", kind="bpe", vocab_size=32),
        "char": make_tiny_nemo_model(d / "char.nemo", kind="char"),
    }


def test_bpe_token_set_from_nemo_file(tiny_models, tmp_path):
    import sentencepiece as spm

    ts = token_set_from_nemo(tiny_models["bpe"], out_dir=tmp_path)
    sp = spm.SentencePieceProcessor(model_file=ts.sp_model_path)
    assert ts.kind == "bpe" and ts.vocab_size == 33 and ts.blank_id == 32
    assert ts.tokens[:-1] == [sp.id_to_piece(i) for i in range(32)]
    text = "the lazy dog sells shells"
    assert ts.decode(ts.encode(text)) == text
    assert max(ts.encode(text)) < ts.blank_id  # text never uses the blank column


def test_char_token_set_from_nemo_file(tiny_models):
    from eval.bench.nemo_e2e import CHAR_LABELS

    ts = token_set_from_nemo(tiny_models["char"])
    assert ts.kind == "char" and ts.tokens == CHAR_LABELS + ["<blk>"] and ts.blank_id == len(CHAR_LABELS)
    assert ts.decode(ts.encode("don't stop")) == "don't stop"


def test_token_set_from_loaded_model_equals_file(tiny_models, tmp_path):
    from nemo.collections.asr.models import ASRModel

    for path in tiny_models.values():
        model = ASRModel.restore_from(str(path), map_location="cpu")
        from_model = token_set_from_nemo(model, out_dir=tmp_path)
        from_file = token_set_from_nemo(path, out_dir=tmp_path)
        check_vocab_matches(from_file, from_model)
        assert from_model.vocab_size == model.decoder.num_classes_with_blank


def test_bpe_and_char_graphs_do_not_match(tiny_models, tmp_path):
    bpe = token_set_from_nemo(tiny_models["bpe"], out_dir=tmp_path)
    char = token_set_from_nemo(tiny_models["char"])
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        check_vocab_matches(char, bpe)


def test_pretrained_name_without_network_is_a_clear_error(monkeypatch):
    pytest.importorskip("nemo.collections.asr")
    from nemo.collections.asr.models import ASRModel

    def offline(*a, **k):
        raise ValueError("Not able to download url right now, please try again.")

    monkeypatch.setattr(ASRModel, "from_pretrained", offline)
    with pytest.raises(RuntimeError, match="stt_en_conformer_ctc_small.*download the .nemo file elsewhere"):
        token_set_from_nemo("stt_en_conformer_ctc_small")
