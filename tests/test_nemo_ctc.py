"""NeMo's CTC decoders behind the adapter interface (eval/adapters/nemo_ctc.py), on CPU: greedy, beam search with
NeMo's NGramGPULanguageModel over the token ARPA built in NeMo's encoding, and NeMo's GPU boosting tree."""
from __future__ import annotations

import math
import random

import pytest
import torch

pytest.importorskip("nemo.collections.asr")

from decoders.ctc_lm import NgramLM  # noqa: E402
from eval.adapters.base import DecodingContext, build_decoder  # noqa: E402
from eval.adapters.greedy import greedy_ctc  # noqa: E402
from recipes.token_lm import build_token_arpa, nemo_token_ids, nemo_token_symbols  # noqa: E402
from recipes.tokens import TokenSet  # noqa: E402
from tests.ctc_helpers import random_log_probs  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "a", "mat", "hat", "that", "at"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("nemo")
    rng = random.Random(0)
    (d / "text.txt").write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(80)) + "\n")
    tokens = TokenSet.from_chars("abcdefghijklmnopqrstuvwxyz'", blank="last")
    arpa = build_token_arpa(d / "text.txt", tokens, d / "tok.arpa")
    return d, tokens, arpa


def _ctx(tokens):
    return DecodingContext(tokens=tokens)


@pytest.mark.parametrize("blank", ["first", "last"])
def test_nemo_greedy_equals_our_greedy(blank):
    tokens = TokenSet.from_chars("abc", blank=blank)
    dec = build_decoder("nemo_greedy", {}, _ctx(tokens))
    lp = random_log_probs(3, 23, tokens.vocab_size, seed=1, peaky=2.0, blank=tokens.blank_id)
    lengths = torch.tensor([23, 11, 0])
    ours, _, _ = greedy_ctc(lp, lengths, tokens.blank_id)
    hyps = dec.decode(lp, lengths)
    assert [list(h.tokens) for h in hyps] == ours
    assert any(ours)


def test_nemo_lm_reads_our_token_arpa_as_we_do(setup):
    """NeMo's NGramGPULanguageModel and our NgramLM score the same sentences of token ids equally: both read the
    ARPA in NeMo's encoding (chr(id + 100)), the LM the two beam searches fuse."""
    from nemo.collections.asr.parts.submodules.ngram_lm import NGramGPULanguageModel

    from eval.adapters.nemo_ctc import _quiet

    _, tokens, arpa = setup
    with _quiet():
        nlm = NGramGPULanguageModel.from_arpa(arpa, vocab_size=tokens.vocab_size - 1, normalize_unk=False)
    ours = NgramLM.from_arpa(arpa, nemo_token_symbols(tokens))
    ids = nemo_token_ids(tokens)
    rng = random.Random(2)
    for _ in range(10):
        cols = [rng.choice(tokens.non_blank_ids) for _ in range(rng.randint(1, 12))]
        labels = torch.tensor([[ids[c] for c in cols]])
        want = float(nlm.score_sentences(labels, eos=True).sum().detach())
        st, got = ours.bos_state, 0.0
        for c in cols:
            w, st = ours.score_one(st, c)
            got += w
        got += ours.final_one(st)
        assert got == pytest.approx(want, abs=1e-3)


@pytest.mark.parametrize("blank", ["first", "last"])
def test_nemo_beam_with_lm_runs_and_blank_position_does_not_matter(setup, blank):
    d, tokens_last, _ = setup
    tokens = TokenSet.from_chars("abcdefghijklmnopqrstuvwxyz'", blank=blank)
    cfg = {"lm_text": str(d / "text.txt"), "lm_cache_dir": str(d / "cache"), "beam_size": 4, "allow_cuda_graphs": False}
    dec = build_decoder("nemo_beam", cfg, _ctx(tokens))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 30, tokens_last.vocab_size, generator=g) * 3
    x[..., -1] += 2.0
    lp_last = x.log_softmax(-1)
    # the same model with its blank first: move the last column to the front
    lp = lp_last if blank == "last" else torch.cat([lp_last[..., -1:], lp_last[..., :-1]], -1)
    hyps = dec.decode(lp, torch.tensor([30, 19]))
    ref = build_decoder("nemo_beam", cfg, _ctx(tokens_last)).decode(lp_last, torch.tensor([30, 19]))
    shift = 1 if blank == "first" else 0
    assert [[t - shift for t in h.tokens] for h in hyps] == [list(h.tokens) for h in ref]
    assert [h.score for h in hyps] == pytest.approx([h.score for h in ref], abs=1e-4)
    assert all(math.isfinite(h.score) for h in hyps)


def test_nemo_beam_lm_changes_the_result_towards_the_lm(setup):
    """Ambiguous frames: with the LM the decoder picks the spelling the text supports (a sanity check that the
    fusion is active, not a copy of greedy)."""
    d, tokens, _ = setup
    V = tokens.vocab_size
    spell = tokens.encode("cat")
    z = tokens.encode("z")[0]
    p = torch.full((1, 7, V), 1e-4)
    for t in (1, 3, 5, 6):
        p[0, t, tokens.blank_id] = 1.0
    p[0, 0, spell[0]] = 1.0
    p[0, 2, spell[1]] = 1.0
    p[0, 4, spell[2]] = 0.45
    p[0, 4, z] = 0.55  # acoustically "caz" is (slightly) better
    lp = (p / p.sum(-1, keepdim=True)).log()
    base = {"lm_text": str(d / "text.txt"), "lm_cache_dir": str(d / "cache"), "beam_size": 4,
            "allow_cuda_graphs": False, "beam_beta": 0.0}
    no_lm = build_decoder("nemo_beam", {**base, "use_lm": False}, _ctx(tokens)).decode(lp, torch.tensor([7]))
    with_lm = build_decoder("nemo_beam", {**base, "ngram_lm_alpha": 1.0}, _ctx(tokens)).decode(lp, torch.tensor([7]))
    assert tokens.decode(no_lm[0].tokens) == "caz"
    assert tokens.decode(with_lm[0].tokens) == "cat"
    ours = build_decoder("ctc_lm", {"lm_text": str(d / "text.txt"), "lm_cache_dir": str(d / "cache"), "beam_size": 4,
                                    "lm_weight": 1.0, "insertion_bonus": 0.0, "blank_skip_threshold": 1.0},
                         _ctx(tokens)).decode(lp, torch.tensor([7]))
    assert tokens.decode(ours[0].tokens) == "cat"


def test_nemo_beam_boosting_tree_per_utterance_groups(setup):
    d, tokens, _ = setup
    V = tokens.vocab_size
    cfg = {"lm_text": str(d / "text.txt"), "lm_cache_dir": str(d / "cache"), "beam_size": 4, "allow_cuda_graphs": False}
    dec = build_decoder("nemo_beam", cfg, _ctx(tokens))
    spell = tokens.encode("hat")
    p = torch.full((2, 7, V), 1e-4)
    for t in (1, 3, 5, 6):
        p[:, t, tokens.blank_id] = 1.0
    p[:, 0, spell[0]] = 0.3
    p[:, 0, tokens.encode("m")[0]] = 0.7  # "mat" is likelier acoustically
    p[:, 2, spell[1]] = 1.0
    p[:, 4, spell[2]] = 1.0
    lp = (p / p.sum(-1, keepdim=True)).log()
    lens = torch.tensor([7, 7])
    plain = dec.decode(lp, lens)
    boosted = dec.decode(lp, lens, boosts=[{"hat": 6.0}, {}])
    assert tokens.decode(plain[0].tokens) == "mat"
    assert tokens.decode(boosted[0].tokens) == "hat"  # row 0 boosted
    assert boosted[1].tokens == plain[1].tokens  # row 1 not
    with pytest.raises(NotImplementedError, match="one context_score per phrase list"):
        dec.decode(lp, lens, boosts=[{"hat": 1.0, "mat": 2.0}, {}])


def test_nemo_adapters_bad_input(setup):
    d, tokens, arpa = setup
    with pytest.raises(ValueError, match="ngram_lm_alpha must be finite"):
        build_decoder("nemo_beam", {"token_lm": str(arpa), "ngram_lm_alpha": float("nan")}, _ctx(tokens))
    other = TokenSet.from_chars("abc", blank="last")  # an LM built for another vocabulary
    with pytest.raises(ValueError, match="LM vocabulary does not match the tokens"):
        build_decoder("nemo_beam", {"token_lm": str(arpa)}, _ctx(other))
    empty = d / "empty.arpa"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty or malformed ARPA"):
        build_decoder("nemo_beam", {"token_lm": str(empty)}, _ctx(tokens))
    with pytest.raises(FileNotFoundError):
        build_decoder("nemo_beam", {"token_lm": str(d / "missing.arpa")}, _ctx(tokens))
    dec = build_decoder("nemo_greedy", {}, _ctx(tokens))
    with pytest.raises(ValueError, match="columns"):
        dec.decode(torch.zeros(1, 3, tokens.vocab_size + 1), torch.tensor([3]))
    with pytest.raises(NotImplementedError):
        dec.decode(torch.zeros(1, 3, tokens.vocab_size), torch.tensor([3]), boosts=[{"cat": 1.0}])


@pytest.mark.gpu
def test_nemo_beam_on_gpu_matches_cpu(setup):
    d, tokens, _ = setup
    cfg = {"lm_text": str(d / "text.txt"), "lm_cache_dir": str(d / "cache"), "beam_size": 4}
    lp = random_log_probs(4, 50, tokens.vocab_size, seed=3, peaky=3.0, blank=tokens.blank_id)
    lens = torch.tensor([50, 31, 7, 0])
    cpu = build_decoder("nemo_beam", {**cfg, "allow_cuda_graphs": False}, _ctx(tokens)).decode(lp, lens)
    gpu_ctx = DecodingContext(tokens=tokens, device="cuda")
    gpu = build_decoder("nemo_beam", cfg, gpu_ctx).decode(lp.cuda(), lens.cuda())
    assert [list(h.tokens) for h in gpu] == [list(h.tokens) for h in cpu]
