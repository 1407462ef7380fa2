"""TLG/HLG build on the toy LM: layout, sizes, epsilon-freeness, TLG == HLG on sampled paths, back-off at
utterance start/end, staged re-runs, lexicon/disambiguation."""
import json
import os

import numpy as np
import pytest

from decoders.graph import WfstGraph
from recipes.graphs.build import GRAPH_FILES, build_token_set_graphs
from recipes.graphs.paths import ArcIndex, forced_best_path, sample_label_sequence
from recipes.graphs.toy import TOY_WORDS, toy_tokens, write_toy_arpa
from recipes.graphs.topologies import TOPOLOGIES
from recipes.lexicon import add_disambig_symbols, build_lexicon, read_lexicon, write_lexicon

BLANKS = ["first", "last"]


@pytest.fixture(scope="module", params=BLANKS)
def toy_graphs(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"graphs_{request.param}")
    arpa = write_toy_arpa(root / "toy.arpa")
    tokens = toy_tokens(request.param)
    infos = build_token_set_graphs(root / "out", tokens, TOY_WORDS + ["x9"], arpa)
    return root / "out", tokens, infos


def test_layout_and_sizes(toy_graphs):
    out, tokens, infos = toy_graphs
    assert set(infos) == set(TOPOLOGIES)
    for topo in TOPOLOGIES:
        for f in GRAPH_FILES:
            assert (out / topo / f).is_file(), f
        info = json.loads((out / topo / "graph_info.json").read_text())
        assert info["HLG"]["epsilon_arcs"] == 0
        assert info["TLG"]["epsilon_arcs"] > 0  # TLG keeps epsilons (#k consumed by T, back-off arcs)
        assert info["lang"]["lexicon"]["num_oov"] == 1  # "x9" cannot be spelled with {a, b, n}
        hlg = WfstGraph.load(out / topo / "HLG.bin")
        assert hlg.num_epsilon_arcs == 0 and hlg.num_tokens == tokens.vocab_size
    # compact's O(V) topology gives a smaller TLG; in the epsilon-free HLG its eps arcs are removed by
    # copying the blank state's arcs into every token state, so the HLGs end up of similar size
    assert infos["compact"]["TLG"]["arcs"] < infos["normal"]["TLG"]["arcs"]


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_tlg_and_hlg_accept_same_sequences(toy_graphs, topology):
    out, tokens, _ = toy_graphs
    tlg = WfstGraph.load(out / topology / "TLG.bin")
    hlg = WfstGraph.load(out / topology / "HLG.bin")
    rng = np.random.default_rng(0)
    ti, hi = ArcIndex(tlg), ArcIndex(hlg)
    lex = read_lexicon(out / topology / "lexicon.txt")

    def spelling(ws):
        return "".join("".join(lex[tlg.words[w]][0]) for w in ws)

    n = ties = 0
    for src in (tlg, hlg):
        for _ in range(60):
            labels = sample_label_sequence(src, rng, max_frames=14)
            if labels is None:
                continue
            pt = forced_best_path(tlg, labels, index=ti)
            ph = forced_best_path(hlg, labels, index=hi)
            assert pt.reached_final and ph.reached_final, labels
            assert pt.graph_score == pytest.approx(ph.graph_score, abs=1e-4)
            if pt.words != ph.words:
                # an exact tie of a back-off LM (e.g. "ba ba bab a" vs "ba bab a ba": the same n-gram terms in
                # another order); both must spell the same tokens with the same multiset of words
                assert spelling(pt.words) == spelling(ph.words) and sorted(pt.words) == sorted(ph.words)
                ties += 1
            n += 1
    assert n >= 60 and ties <= n // 10


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_backoff_at_start_and_end(toy_graphs, topology):
    """'nab' has no '<s> nab' / 'nab </s>' bigram: the sentence starts AND ends through back-off arcs."""
    out, tokens, _ = toy_graphs
    words = ["nab", "a", "nab"]
    cols = [c for w in words for c in tokens.encode(w)]
    labels = []
    for c in cols:
        labels += [c, tokens.blank_id]  # one frame per token, blank between: valid for every topology
    for kind in ("TLG", "HLG"):
        g = WfstGraph.load(out / topology / f"{kind}.bin")
        p = forced_best_path(g, labels)
        assert p.reached_final, kind
        assert [g.words[w] for w in p.words] == words, kind


def test_staged_rebuild_skips(toy_graphs, tmp_path):
    out, tokens, _ = toy_graphs
    before = {f: os.stat(out / "compact" / f).st_mtime_ns for f in GRAPH_FILES}
    arpa = write_toy_arpa(tmp_path / "toy.arpa")
    build_token_set_graphs(out, tokens, TOY_WORDS + ["x9"], arpa, topologies=["compact"])
    after = {f: os.stat(out / "compact" / f).st_mtime_ns for f in GRAPH_FILES}
    assert before == after


def test_stale_image_version_is_rebuilt_not_skipped(toy_graphs, tmp_path):
    """Issue 11 bumped the image version (header CRC): a staged re-run must rebuild an image of an older
    version (the loader refuses it) instead of skipping the stage because the files exist."""
    import struct

    from decoders.graph import IMAGE_VERSION, image_version

    out, tokens, _ = toy_graphs
    path = out / "normal" / "TLG.bin"
    raw = bytearray(path.read_bytes())
    struct.pack_into("<I", raw, 8, IMAGE_VERSION - 1)
    path.write_bytes(bytes(raw))
    assert image_version(path) == IMAGE_VERSION - 1
    build_token_set_graphs(out, tokens, TOY_WORDS + ["x9"], write_toy_arpa(tmp_path / "toy.arpa"),
                           topologies=["normal"])
    assert image_version(path) == IMAGE_VERSION
    WfstGraph.load(path)


def test_word_label_report(toy_graphs):
    _, _, infos = toy_graphs
    rep = infos["normal"]["word_label_position_LG"]
    assert rep["num_words"] > 0
    # words are output on their first token unless a prefix word delays them (a/ab, ba/bab)
    assert 0 <= rep["mean_offset_tokens"] <= 1.5


def test_lexicon_char_and_disambig(tmp_path):
    tokens = toy_tokens()
    lex = build_lexicon(["a", "ab", "ab", "<unk>", "x9", "<s>"], tokens)
    assert lex == {"a": [["a"]], "ab": [["a", "b"]]}
    entries, k = add_disambig_symbols({**lex, "ab2": [["a", "b"]]})
    assert k == 2 and entries[0] == ("a", ["a", "#1"]) and entries[2] == ("ab2", ["a", "b", "#2"])
    write_lexicon(lex, tmp_path / "l.txt")
    assert read_lexicon(tmp_path / "l.txt") == lex
    with pytest.raises(ValueError, match="x9"):
        build_lexicon(["x9"], tokens, oov="error")


def test_lexicon_bpe(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    from recipes.tokens import TokenSet

    text = tmp_path / "c.txt"
    text.write_text("\n".join(["the there then a ban nab bab"] * 50))
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "m"), vocab_size=20,
                                   model_type="bpe", minloglevel=2)
    ts = TokenSet.from_sentencepiece(tmp_path / "m.model", blank="first")
    lex = build_lexicon(["the", "there", "zzz"], ts)
    for w, (spell,) in lex.items():
        assert "".join(spell).replace("\u2581", "") == w and spell[0].startswith("\u2581")
        assert ts.encode(w) == [ts.tokens.index(p) for p in spell]
    assert "zzz" not in lex


def test_hlg_refused_when_too_big_and_inputs_change_rebuilds(tmp_path):
    tokens = toy_tokens()
    arpa = write_toy_arpa(tmp_path / "toy.arpa")
    infos = build_token_set_graphs(tmp_path / "out", tokens, TOY_WORDS, arpa, topologies=["compact"], max_hlg_arcs=5)
    info = infos["compact"]
    assert "skipped" in info["HLG"] and "max_hlg_arcs=5" in info["HLG"]["skipped"]
    assert (tmp_path / "out" / "compact" / "TLG.bin").is_file()
    assert not (tmp_path / "out" / "compact" / "HLG.bin").exists()
    # same inputs: skipped stage; changed word list: rebuilt (content hashes, not file existence)
    again = build_token_set_graphs(tmp_path / "out", tokens, TOY_WORDS, arpa, topologies=["compact"], max_hlg_arcs=5)
    assert again["compact"]["build_s"] == info["build_s"]
    changed = build_token_set_graphs(tmp_path / "out", tokens, TOY_WORDS + ["bb"], arpa, topologies=["compact"])
    assert changed["compact"]["num_words"] == len(TOY_WORDS) + 1 and "states" in changed["compact"]["HLG"]


def test_push_labels_option(tmp_path):
    pytest.importorskip("pynini")
    tokens = toy_tokens()
    arpa = write_toy_arpa(tmp_path / "toy.arpa")
    plain = build_token_set_graphs(tmp_path / "a", tokens, TOY_WORDS, arpa, topologies=["normal"])["normal"]
    pushed = build_token_set_graphs(tmp_path / "b", tokens, TOY_WORDS, arpa, topologies=["normal"],
                                    push_labels=True)["normal"]
    assert pushed["sources"]["push_labels"] is True
    # pushing never delays words; our L already emits on the first token
    assert pushed["word_label_position_LG"]["mean_offset_tokens"] <= plain["word_label_position_LG"]["mean_offset_tokens"] + 1e-9
    tlg_a = WfstGraph.load(tmp_path / "a" / "normal" / "TLG.bin")
    tlg_b = WfstGraph.load(tmp_path / "b" / "normal" / "TLG.bin")
    rng = np.random.default_rng(1)
    for _ in range(30):
        labels = sample_label_sequence(tlg_a, rng, max_frames=12)
        if labels is None:
            continue
        pa, pb = forced_best_path(tlg_a, labels), forced_best_path(tlg_b, labels)
        assert pb.reached_final and pa.graph_score == pytest.approx(pb.graph_score, abs=1e-3)


def test_model_recipe_cli_with_sentencepiece(tmp_path):
    """LibriSpeech-style path (tokenizer model + ARPA) through the Hydra CLI, on the toy LM."""
    spm = pytest.importorskip("sentencepiece")
    from recipes.build_graphs import main

    (tmp_path / "c.txt").write_text("\n".join(["a ab ba bab nab", "nab a ab", "ba bab"] * 40))
    spm.SentencePieceTrainer.train(input=str(tmp_path / "c.txt"), model_prefix=str(tmp_path / "m"), vocab_size=12,
                                   model_type="bpe", minloglevel=2)
    arpa = write_toy_arpa(tmp_path / "toy.arpa")
    main([f"arpa={arpa}", f"sp_model={tmp_path / 'm.model'}", f"out_root={tmp_path / 'g'}", "topologies=[compact]"])
    info = json.loads((tmp_path / "g" / "bpe_blanklast" / "compact" / "graph_info.json").read_text())
    assert info["token_kind"] == "bpe" and info["num_words"] == len(TOY_WORDS) and info["HLG"]["epsilon_arcs"] == 0


def test_gzipped_arpa(tmp_path):
    import gzip

    from recipes.graphs.compile import compile_G
    from recipes.graphs.symbols import WordTable

    arpa = write_toy_arpa(tmp_path / "toy.arpa")
    gz = tmp_path / "toy.arpa.gz"
    gz.write_bytes(gzip.compress(arpa.read_bytes()))
    WordTable.from_words(TOY_WORDS).write(tmp_path / "words.txt")
    a, b = compile_G(arpa, tmp_path / "words.txt"), compile_G(gz, tmp_path / "words.txt")
    assert a.num_states == b.num_states and a.to_str() == b.to_str()


def test_k2_text_skipped_above_max_k2_text_arcs(tmp_path):
    """HLG.k2.txt (k2py's text, ~200 bytes of Python objects per arc while written) is left out above
    max_k2_text_arcs, with the reason in graph_info; the staged re-run does not ask for it; HLG.bin/.pt are
    written and record the build steps' times."""
    tokens = toy_tokens()
    arpa = write_toy_arpa(tmp_path / "toy.arpa")
    out = tmp_path / "out"
    info = build_token_set_graphs(out, tokens, TOY_WORDS, arpa, topologies=["compact"], max_k2_text_arcs=10)["compact"]
    assert "max_k2_text_arcs=10" in info["HLG"]["k2_text"] and info["HLG"]["arcs"] > 10
    assert not (out / "compact" / "HLG.k2.txt").exists() and (out / "compact" / "HLG.pt").is_file()
    assert set(info["HLG"]["steps_s"]) == {"compose_s", "to_graph_s", "write_HLG.bin_s", "write_HLG.pt_s"}
    again = build_token_set_graphs(out, tokens, TOY_WORDS, arpa, topologies=["compact"], max_k2_text_arcs=10)
    assert again["compact"]["build_s"] == info["build_s"]  # skipped, not rebuilt for the missing text file
    full = build_token_set_graphs(out, tokens, TOY_WORDS, arpa, topologies=["compact"])["compact"]
    assert full["HLG"]["k2_text"] is True and (out / "compact" / "HLG.k2.txt").is_file()
    assert "write_HLG.k2.txt_s" in full["HLG"]["steps_s"]
