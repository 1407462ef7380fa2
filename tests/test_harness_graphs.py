"""Graph inputs the field's way (issue 13): a hand-written 20-word lexicon + token table + bigram ARPA, a character
model's token table, torchaudio's table format; options that would do nothing are refused with one line; kaldilm's
parser chatter stays off the terminal."""
import json

import pytest

from _eval_fakes import write_arpa
from recipes.build_graphs import main as build_main
from recipes.lexicon import read_lexicon
from recipes.tokens import TokenSet

WORDS20 = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "red", "green", "blue",
           "cat", "dog", "bird", "fish", "run", "sit", "stop"]
LETTERS = sorted({c for w in WORDS20 for c in w})


def _char_table(path, torchaudio=False):
    if torchaudio:  # one symbol per line, "-" blank first, "|" the word separator
        path.write_text("\n".join(["-", "|", *LETTERS]) + "\n", encoding="utf-8")
    else:  # k2/icefall: "symbol id", blank first, <space> separator, a disambiguation symbol to be skipped
        syms = ["<blk>", "<space>", *LETTERS]
        path.write_text("".join(f"{s} {i}\n" for i, s in enumerate(syms)) + f"#0 {len(syms)}\n", encoding="utf-8")
    return path


@pytest.fixture
def inputs(tmp_path):
    arpa = tmp_path / "lm.arpa"
    write_arpa(arpa, WORDS20)
    tokens = _char_table(tmp_path / "tokens.txt")
    lexicon = tmp_path / "lexicon.txt"
    # hand-written spellings: "two" spelled as it sounds, torchaudio-style trailing "|", a second spelling of "six"
    entries = {w: [list(w)] for w in WORDS20}
    entries["two"] = [list("too")]
    entries["six"] = [list("six"), list("sics")]
    lexicon.write_text("".join(f"{w} {' '.join(s)} |\n" for w, ss in entries.items() for s in ss), encoding="utf-8")
    return {"arpa": arpa, "tokens": tokens, "lexicon": lexicon, "root": tmp_path}


def test_token_tables_in_k2_and_torchaudio_formats(tmp_path):
    k2 = TokenSet.from_tokens_file(_char_table(tmp_path / "k2.txt"))
    ta = TokenSet.from_tokens_file(_char_table(tmp_path / "ta.txt", torchaudio=True))
    for ts in (k2, ta):
        assert ts.kind == "char" and ts.blank_id == 0 and ts.tokens[1] == " " and ts.vocab_size == len(LETTERS) + 2
    assert k2.tokens == ta.tokens
    bad = tmp_path / "bad.txt"
    bad.write_text("a 0\nb 2\n")
    with pytest.raises(ValueError, match="without gaps"):
        TokenSet.from_tokens_file(bad)
    bad.write_text("a 0\nb 1\n")
    with pytest.raises(ValueError, match="no blank symbol"):
        TokenSet.from_tokens_file(bad)


def test_graphs_from_a_hand_written_lexicon_token_table_and_bigram_arpa(inputs, capfd):
    out = inputs["root"] / "graphs"
    build_main([f"arpa={inputs['arpa']}", f"tokens={inputs['tokens']}", f"lexicon={inputs['lexicon']}",
                f"out_root={out}", "topologies=[compact]"])
    gdir = out / "char_blankfirst" / "compact"
    info = json.loads((gdir / "graph_info.json").read_text())
    assert info["token_kind"] == "char" and info["blank_id"] == 0
    lex = read_lexicon(gdir / "lexicon.txt")
    assert lex["two"] == [list("too")]  # the user's spelling, not the letters of the word
    assert lex["six"] == [list("six"), list("sics")]
    assert set(lex) == set(WORDS20)  # the ARPA's <unk> has no lexicon entry: left out, like any OOV
    err = capfd.readouterr().err
    assert "[I] Reading" not in err  # kaldilm's parser info lines are filtered ...
    assert "[W] " in err and "'<unk>' not in symbol table" in err  # ... its warnings are kept
    # another lexicon, same output folder: the stamp notices and the graphs are rebuilt
    inputs["lexicon"].write_text("".join(f"{w} {' '.join(w)}\n" for w in WORDS20), encoding="utf-8")
    build_main([f"arpa={inputs['arpa']}", f"tokens={inputs['tokens']}", f"lexicon={inputs['lexicon']}",
                f"out_root={out}", "topologies=[compact]"])
    assert read_lexicon(gdir / "lexicon.txt")["two"] == [list("two")]


def test_character_model_route_spells_words_letter_by_letter(inputs):
    out = inputs["root"] / "chars"
    ta = _char_table(inputs["root"] / "ta.txt", torchaudio=True)
    build_main([f"arpa={inputs['arpa']}", f"tokens={ta}", f"out_root={out}", "topologies=[normal]"])
    lex = read_lexicon(out / "char_blankfirst" / "normal" / "lexicon.txt")
    assert lex["three"] == [list("three")] and len(lex) == len(WORDS20)


@pytest.mark.parametrize("args, needle", [
    (["arpa={arpa}"], "also give nemo_model="),
    (["arpa={arpa}", "tokens={tokens}", "token_kinds=[char]"], "token_kinds picks the embedded workload"),
    (["arpa={arpa}", "tokens={tokens}", "workload.scale=small"], "workload.* selects the embedded workload"),
    (["arpa={arpa}", "tokens={tokens}", "blanks=[first]"], "applies to sp_model= only"),
    (["lexicon={lexicon}"], "lexicon= needs arpa="),
    (["arpa={arpa}", "tokens={root}/nope.txt"], "token table not found"),
    (["arpa={arpa}", "tokens={tokens}", "lexicon={root}/nope.txt"], "lexicon not found"),
    (["arpa={arpa}", "tokens={tokens}", "topologies=[compcat]"], "topologies must be"),
    (["arpa={arpa}", "nemo_model=x.nemo", "tokens={tokens}"], "exactly one of"),
    (["lexcon=x"], "lexcon"),
])
def test_options_that_would_do_nothing_or_bad_paths_are_one_line_errors(inputs, capsys, args, needle):
    """Regression: `lexicon=` was `Key 'lexicon' not in 'BuildGraphsConfig'`, `token_kinds=[char]` was silently
    ignored with arpa=, and `arpa=` alone ended in a traceback."""
    argv = [a.format(**inputs) for a in args] + [f"out_root={inputs['root'] / 'g'}"]
    with pytest.raises(SystemExit) as ex:
        build_main(argv)
    assert ex.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err


def test_a_lexicon_symbol_outside_the_token_table_is_named(inputs, capsys):
    inputs["lexicon"].write_text("cat k a t\n", encoding="utf-8")  # no "k" among the letters
    with pytest.raises(SystemExit):
        build_main([f"arpa={inputs['arpa']}", f"tokens={inputs['tokens']}", f"lexicon={inputs['lexicon']}",
                    f"out_root={inputs['root'] / 'g'}"])
    assert "word 'cat' is spelled with 'k'" in capsys.readouterr().err


def test_a_graph_file_the_build_skipped_names_the_builds_reason(tmp_path):
    """A graph directory built with an HLG skipped by max_hlg_arcs: the adapter's missing-file error repeats the
    build's recorded reason and how to rebuild; a directory without graph_info.json names the recipe."""
    from eval.adapters.base import load_graph_cached

    (tmp_path / "graph_info.json").write_text(json.dumps(
        {"HLG": {"skipped": "epsilon-free LG would have ~9 arcs (> max_hlg_arcs=0): HLG not built"}}))
    with pytest.raises(FileNotFoundError, match=r"HLG.k2.txt not found \(this graph directory was built without it: "
                                                r"epsilon-free LG .*max_hlg_arcs=0.*force=true"):
        load_graph_cached("k2py", tmp_path, "HLG.k2.txt", lambda p: None)
    (tmp_path / "graph_info.json").write_text("{not json")
    with pytest.raises(FileNotFoundError, match="build graphs with recipes.build_graphs"):
        load_graph_cached("k2py", tmp_path, "HLG.k2.txt", lambda p: None)
