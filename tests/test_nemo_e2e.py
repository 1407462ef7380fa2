"""NeMo path end to end, offline: a tiny random-weight Conformer-CTC built from a NeMo config and saved as
.nemo, restored through the harness, fed generated FLAC files (LibriSpeech layout -> manifest), then its
log-probs go to every decoder this checkout has; WFST graphs are built from the model's own tokenizer."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("nemo.collections.asr")
sf = pytest.importorskip("soundfile")

from eval.acoustic import build_acoustic_source  # noqa: E402
from eval.bench.nemo_e2e import build_tiny_graph, make_tiny_nemo_model, synth_speechlike  # noqa: E402
from recipes.nemo_tokenizer import check_vocab_matches, token_set_from_nemo  # noqa: E402

SR = 16000
# 32000 samples is the NeMo padding example: 51 output frames, encoded length 50 (4x subsampling)
NUM_SAMPLES = (32000, 11200, 20800, 49600, 4000)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """tiny .nemo models + a LibriSpeech-layout folder of generated FLAC files + its manifest."""
    from recipes.librispeech import main as librispeech_main

    d = tmp_path_factory.mktemp("nemo_e2e")
    models = {
        "bpe": make_tiny_nemo_model(d / "bpe.nemo", kind="bpe", vocab_size=32),
        "char": make_tiny_nemo_model(d / "char.nemo", kind="char"),
    }
    rng = np.random.default_rng(0)
    chapter = d / "LibriSpeech" / "test-clean" / "1" / "2"
    chapter.mkdir(parents=True)
    lines = []
    for i, n in enumerate(NUM_SAMPLES):
        uid = f"1-2-{i:04d}"
        sf.write(chapter / f"{uid}.flac", synth_speechlike(n / SR, rng)[:n], SR)
        lines.append(f"{uid} THE QUICK BROWN FOX")
    (chapter / "1-2.trans.txt").write_text("\n".join(lines) + "\n")
    manifest = librispeech_main([f"root={d / 'LibriSpeech'}", f"out_dir={d / 'manifests'}", "subsets=[test-clean]",
                                 "progress=false"])["test-clean"]
    return {"dir": d, "models": models, "manifest": manifest}


def _eval_cfg(model_path, **params):
    """The slice of the evaluation config the nemo source reads (model.nemo_model + model.params)."""
    return {"model": {"source": "nemo", "nemo_model": str(model_path), "params": {"device": "cpu", **params}}}


def _utterances(manifest):
    from eval.runner import load_manifest

    return load_manifest(manifest)


def _expected_length(samples: int, hop: int = 160, stages: int = 2) -> int:
    """Independent arithmetic: floor(samples / hop) feature frames, then ceil(/2) per striding conv."""
    n = samples // hop
    for _ in range(stages):
        n = math.ceil(n / 2)
    return n


@pytest.fixture(scope="module")
def bpe_source(setup):
    return build_acoustic_source("nemo", _eval_cfg(setup["models"]["bpe"]), dataset="test-clean")


def test_source_shapes_blank_and_length_arithmetic(setup, bpe_source):
    src = bpe_source
    assert src.frame_shift_s == pytest.approx(0.04)  # 10 ms hop x 4 subsampling
    assert src.tokens.blank_id == src.tokens.vocab_size - 1 == 32  # NeMo: blank last
    check_vocab_matches(token_set_from_nemo(setup["models"]["bpe"]), src.tokens)
    # evaluation settings override the checkpoint's training settings (dither 1e-5, pad_to 16)
    assert src.model.preprocessor.featurizer.dither == 0.0 and src.model.preprocessor.featurizer.pad_to == 0
    utts = _utterances(setup["manifest"])
    batches = list(src.batches(utts, batch_size=2))
    seen = [u for b in batches for u in b.utterances]
    assert sorted(u.id for u in seen) == sorted(u.id for u in utts)
    assert [u.duration for u in seen] == sorted((u.duration for u in utts), reverse=True)  # longest first
    for b in batches:
        B, T, V = b.log_probs.shape
        assert (B, V) == (len(b.utterances), src.tokens.vocab_size) and b.lengths.dtype == torch.int64
        samples = [round(u.duration * SR) for u in b.utterances]
        want = [_expected_length(s) for s in samples]
        assert b.lengths.tolist() == want == src.expected_lengths(samples)
        assert T in (max(want), max(want) + 1)  # NeMo's centred STFT: one extra padded frame
        for i, n in enumerate(want):
            valid = b.log_probs[i, :n]
            torch.testing.assert_close(valid.exp().sum(-1), torch.ones(n), atol=1e-4, rtol=0)  # log-softmax
            pad = b.log_probs[i, n:]
            assert torch.all(pad[:, src.tokens.blank_id] == 0) and torch.all(pad[:, 0] == -30.0)
        assert b.acoustic_seconds > 0
    by_id = {u.id: round(u.duration * SR) for u in utts}
    assert by_id["1-2-0000"] == 32000 and _expected_length(32000) == 50
    assert set(src.stage_seconds) >= {"features", "encoder", "ctc_head"}


def test_batching_and_repeated_runs_do_not_change_log_probs(setup, bpe_source):
    utts = _utterances(setup["manifest"])
    one_by_one = {b.utterances[0].id: b.log_probs[0, : int(b.lengths[0])] for b in bpe_source.batches(utts, 1)}
    for b in bpe_source.batches(utts, 5):  # dither 0: deterministic; masks: padding does not leak
        for i, u in enumerate(b.utterances):
            torch.testing.assert_close(b.log_probs[i, : int(b.lengths[i])], one_by_one[u.id], atol=2e-4, rtol=1e-4)


def test_reduced_precision_autocast_stays_close(setup, bpe_source):
    utts = _utterances(setup["manifest"])[:2]
    ref = next(bpe_source.batches(utts, 2))
    bf16 = build_acoustic_source("nemo", _eval_cfg(setup["models"]["bpe"], precision="bf16"), dataset="t")
    got = next(bf16.batches(utts, 2))
    assert got.log_probs.dtype == torch.float32 and torch.equal(got.lengths, ref.lengths)
    n = int(ref.lengths[0])
    assert (got.log_probs[0, :n] - ref.log_probs[0, :n]).abs().max() < 0.5  # bf16: ~3 significant digits
    with pytest.raises(ValueError, match="precision"):
        build_acoustic_source("nemo", _eval_cfg(setup["models"]["bpe"], precision="int8"), dataset="t")
    with pytest.raises(ValueError, match="unknown nemo source parameters"):
        build_acoustic_source("nemo", _eval_cfg(setup["models"]["bpe"], beam=3), dataset="t")


def test_float16_output_and_preloaded_audio(setup, bpe_source):
    utts = _utterances(setup["manifest"])
    src = build_acoustic_source("nemo", _eval_cfg(setup["models"]["bpe"], output_dtype="float16", preload_audio=True),
                                dataset="t")
    calls = []
    loader = src.audio_loader
    src.audio_loader = lambda u: calls.append(u.id) or loader(u)
    for _ in range(2):  # second pass: audio served from the preloaded copies
        got = {u.id: (b.log_probs[i], int(b.lengths[i])) for b in src.batches(utts, 5) for i, u in enumerate(b.utterances)}
    assert sorted(calls) == sorted(u.id for u in utts)
    assert src.stage_seconds["load_audio"] > 0
    for b in bpe_source.batches(utts, 5):
        for i, u in enumerate(b.utterances):
            lp, n = got[u.id]
            assert lp.dtype == torch.float16 and n == int(b.lengths[i])
            torch.testing.assert_close(lp[:n].float(), b.log_probs[i, :n], atol=1e-2, rtol=1e-2)


def test_model_errors_are_clear(setup, monkeypatch):
    with pytest.raises(FileNotFoundError, match="missing.nemo"):
        build_acoustic_source("nemo", _eval_cfg(setup["dir"] / "missing.nemo"), dataset="t")
    from nemo.collections.asr.models import ASRModel

    def offline(*a, **k):
        raise ValueError("Not able to download url right now, please try again.")

    monkeypatch.setattr(ASRModel, "from_pretrained", offline)  # what NeMo raises without network access
    with pytest.raises(RuntimeError, match="stt_en_conformer_ctc_small.*model=nemo_file"):
        build_acoustic_source("nemo", _eval_cfg("stt_en_conformer_ctc_small"), dataset="t")
    from recipes.tokens import TokenSet

    with pytest.raises(ValueError, match="vocabulary mismatch"):
        build_acoustic_source("nemo", _eval_cfg(setup["models"]["bpe"]), dataset="t",
                              tokens=TokenSet.from_chars(list("abc"), blank="last"))


# ---- every decoder on the model's log-probs ----

GRAPH_DECODERS = ("wfst", "flashlight", "k2py", "kaldi", "riva")


@pytest.fixture(scope="module")
def graph_dir(setup, bpe_source):
    """Graphs built from the model's own tokenizer (recipes.graphs via eval.bench.nemo_e2e.build_tiny_graph)."""
    pytest.importorskip("recipes.graphs.build")
    out = build_tiny_graph(bpe_source.tokens, setup["dir"] / "g")
    check_vocab_matches(out, bpe_source.tokens)  # the graph reads exactly this model's columns
    return out


@pytest.fixture(scope="module")
def model_batch(setup, bpe_source):
    return next(bpe_source.batches(_utterances(setup["manifest"]), 5))


def _build(name, tokens, graph_dir=None):
    from eval.adapters.base import DecodingContext, build_decoder

    ctx = DecodingContext(tokens=tokens, device="cpu", graph_dir=graph_dir)
    if graph_dir is not None:
        ctx.arpa_path = graph_dir.parent / "tiny.arpa"
        ctx.lexicon_path = graph_dir / "lexicon.txt"
        ctx.words_path = graph_dir / "words.txt"
    try:
        return build_decoder(name, {"name": name}, ctx)
    except (ImportError, RuntimeError) as e:  # adapter not written yet / library not installed here
        pytest.skip(f"decoder {name} unavailable here: {type(e).__name__}: {e}")


def test_greedy_decodes_model_log_probs(bpe_source, model_batch):
    dec = _build("greedy", bpe_source.tokens)
    hyps = dec.decode(model_batch.log_probs, model_batch.lengths)
    assert len(hyps) == model_batch.log_probs.shape[0]
    blank = bpe_source.tokens.blank_id
    for i, h in enumerate(hyps):
        best = model_batch.log_probs[i, : int(model_batch.lengths[i])].argmax(-1).tolist()
        collapsed = [t for j, t in enumerate(best) if t != blank and (j == 0 or t != best[j - 1])]
        assert list(h.tokens) == collapsed and blank not in h.tokens


@pytest.mark.parametrize("name", ["ctc_beam", "torchaudio_ctc", *GRAPH_DECODERS])
def test_every_decoder_decodes_model_log_probs(name, request, bpe_source, model_batch):
    graph = request.getfixturevalue("graph_dir") if name in GRAPH_DECODERS else None
    dec = _build(name, bpe_source.tokens, graph)
    hyps = dec.decode(model_batch.log_probs, model_batch.lengths)
    assert len(hyps) == model_batch.log_probs.shape[0]
    vocab = set((graph / "words.txt").read_text().split()) if graph is not None else None
    for h in hyps:
        assert math.isfinite(float(h.score)) or float(h.score) == float("-inf")
        assert bpe_source.tokens.blank_id not in list(h.tokens or [])
        if vocab is not None:  # an LM/graph decoder can only output words of its lexicon
            assert set(h.words) <= vocab, set(h.words) - vocab


def test_wfst_graph_from_model_tokenizer_decodes_its_log_probs(graph_dir, bpe_source, model_batch):
    """The WFST decoder itself (CPU reference), on TLG built from this model's tokenizer."""
    try:
        from decoders.graph import WfstGraph
        from decoders.wfst import WfstDecoder, WfstDecoderConfig

        decoder = WfstDecoder(WfstGraph.load(graph_dir / "TLG.bin"), WfstDecoderConfig(search_beam=20.0), device="cpu")
        result = decoder.decode(model_batch.log_probs, model_batch.lengths)
    except (ImportError, RuntimeError, OSError) as e:  # extension not buildable here
        pytest.skip(f"WFST decoder unavailable: {type(e).__name__}: {e}")
    words = set((graph_dir / "words.txt").read_text().split())
    assert len(result.word_strings) == model_batch.log_probs.shape[0]
    assert all(result.has_path) and all(math.isfinite(s) for s in result.scores.tolist())
    assert any(result.word_strings)  # a random model's log-probs still yield words under an LM
    for ws in result.word_strings:
        assert set(ws) <= words


def test_graph_from_another_tokenizer_is_rejected(setup, graph_dir):
    char_tokens = token_set_from_nemo(setup["models"]["char"])
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        check_vocab_matches(graph_dir, char_tokens)


# ---- cache filled from the model, harness run ----


def test_cache_filled_by_the_model_then_reused(setup, bpe_source):
    model = str(setup["models"]["bpe"])
    cfg = {"model": {"source": "cache", "cache_dir": str(setup["dir"] / "cache"), "nemo_model": model,
                     "params": {"device": "cpu", "precision": "fp32"}}}
    utts = _utterances(setup["manifest"])
    first = build_acoustic_source("cache", cfg, dataset="test-clean", device="cpu")
    got = {u.id: b.log_probs[i, : int(b.lengths[i])] for b in first.batches(utts, 2) for i, u in enumerate(b.utterances)}
    again = build_acoustic_source("cache", cfg, dataset="test-clean", device="cpu")
    assert again._nemo is None  # served from disk, the model was not loaded
    ref = {u.id: b.log_probs[i, : int(b.lengths[i])] for b in bpe_source.batches(utts, 5) for i, u in enumerate(b.utterances)}
    for uid, lp in got.items():
        torch.testing.assert_close(lp, ref[uid], atol=5e-3, rtol=5e-3)  # float16 on disk


def test_harness_run_with_nemo_file_model(setup, tmp_path):
    from eval.config import compose_config
    from eval.runner import run_experiment

    cfg = compose_config([
        "model=nemo_file", f"model.nemo_model={setup['models']['char']}", "model.token_kind=char",
        "model.params.device=cpu",
        f"+data.manifests.test={setup['manifest']}", f"experiment.output_dir={tmp_path}", "experiment.run=r",
        "experiment.progress=false", "decoder=greedy",
    ])
    out = run_experiment(cfg)
    rows = [r for r in out.rows if r.dataset == "test"]
    assert rows and rows[0].utterances == len(NUM_SAMPLES)
    assert rows[0].rtfx_end_to_end > 0 and 0 <= rows[0].wer
    assert (Path(tmp_path) / "default" / "r" / "hyps.jsonl").is_file()


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_cuda_source_matches_cpu_and_reports_stage_memory(setup, bpe_source, precision):
    utts = _utterances(setup["manifest"])
    gpu = build_acoustic_source("nemo", _eval_cfg(setup["models"]["bpe"], device="cuda", precision=precision),
                                dataset="t")
    got = next(gpu.batches(utts, 5))
    ref = next(bpe_source.batches(utts, 5))  # CPU fp32, same (sorted) order
    assert got.log_probs.device.type == "cuda" and got.log_probs.dtype == torch.float32
    assert [u.id for u in got.utterances] == [u.id for u in ref.utterances]
    assert torch.equal(got.lengths.cpu(), ref.lengths)
    tol = 2e-2 if precision == "fp32" else 0.5  # cuDNN convolutions may use TF32; half precision ~3 digits
    assert (got.log_probs.cpu() - ref.log_probs).abs().max() < tol
    assert {"features", "encoder", "ctc_head"} <= set(got.stage_memory_bytes)
    assert all(v > 0 for v in got.stage_memory_bytes.values())


def test_harness_run_with_wfst_on_the_model_tokenizer_graph(setup, tmp_path):
    """Graph built from the .nemo's own tokenizer, handed to the harness with the ARPA it was built from."""
    from eval.config import compose_config
    from eval.runner import run_experiment

    model = setup["models"]["char"]
    graph = build_tiny_graph(token_set_from_nemo(model), tmp_path / "g")
    cfg = compose_config([
        "model=nemo_file", f"model.nemo_model={model}", "model.token_kind=char", "model.params.device=cpu",
        f"+data.manifests.test={setup['manifest']}", f"data.arpa_path={graph.parent / 'tiny.arpa'}",
        f"graph.graph_dir={graph}", "graph.topology=compact", "graph.build_if_missing=false",
        "experiment.decoders=[greedy,wfst]", f"experiment.output_dir={tmp_path}", "experiment.run=r",
        "experiment.progress=false",
    ])
    out = run_experiment(cfg)
    rows = {r.decoder: r for r in out.rows if r.dataset == "test"}
    assert set(rows) >= {"greedy", "wfst"}, out.unavailable
    assert rows["wfst"].utterances == len(NUM_SAMPLES) and rows["wfst"].rtfx_decoder > 0
