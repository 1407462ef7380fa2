"""recipes.train_ctc on the CPU: a tiny Conformer-CTC trained by NeMo's own code on a few synthesized
utterances until its wall-clock budget, saved with save_to, restored with restore_from; one-line errors for
bad .nemo files and bad options."""
from __future__ import annotations

import io
import json
import math
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("nemo.collections.asr")
pytest.importorskip("soxr")

from recipes import speech_corpus as sc  # noqa: E402
from recipes import train_ctc as tc  # noqa: E402

if sc._wheel_engine() is None and sc._cli_engine() is None:
    pytest.skip("espeak-ng not installed (pip install espeakng-loader)", allow_module_level=True)

TINY = tc.ConformerSize(n_layers=2, d_model=32, n_heads=2, conv_kernel_size=7, ff_expansion_factor=2, dropout=0.0)
BUDGET_MIN = 0.12  # 7.2 s of training


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from recipes.workload import prepare_workload

    d = tmp_path_factory.mktemp("train_ctc")
    wl = prepare_workload("tiny", root=d / "workload")
    corpus = sc.prepare_speech_corpus(sc.SpeechCorpusConfig(
        out_root=str(d / "speech"), train_hours=0.001, chunk_size=8, dev_sentences=4, test_sentences=0,
        num_workers=2, progress=False))
    cfg = tc.TrainCtcConfig(
        corpus=str(corpus.root), workload=tc.TrainWorkloadRef(scale="tiny", root=str(d / "workload")),
        out_dir=str(d / "out"), name="tiny_ctc", model=TINY, batch_size=4, num_workers=0, max_minutes=BUDGET_MIN,
        warmup_steps=2, dev_batch_size=4, log_every_n_steps=1)
    sidecar = tc.train_ctc(cfg, command="pytest tests/test_train_ctc.py")
    return {"dir": d, "cfg": cfg, "sidecar": sidecar, "workload": wl, "corpus": corpus,
            "nemo": Path(cfg.out_dir) / "tiny_ctc.nemo"}


def test_training_stops_at_the_budget_and_writes_the_sidecar(trained):
    s, cfg = trained["sidecar"], trained["cfg"]
    nemo = trained["nemo"]
    assert s["steps"] >= 2
    # stopped by the clock (no max_steps), within a step plus the final dev pass of the budget
    assert s["train_seconds"] < BUDGET_MIN * 60 + 20
    assert s["nemo_bytes"] == nemo.stat().st_size and s["nemo_sha256"] == tc.sha256_file(nemo)
    assert s["params"] > 10_000 and s["seed"] == 0 and s["command"] == "pytest tests/test_train_ctc.py"
    for split in ("train", "dev"):
        assert s["data"][split]["sha256"] == tc.sha256_file(Path(cfg.corpus) / f"{split}.jsonl")
    assert s["data"]["train"]["utterances"] == 8
    rows = [json.loads(l) for l in (Path(cfg.out_dir) / "dev_wer.jsonl").read_text().splitlines()]
    assert rows == s["dev_wer_per_epoch"] and len(rows) >= 1
    assert all(0.0 <= r["dev_wer"] and r["dev_utterances"] == 4 for r in rows)
    assert [r["step"] for r in rows] == sorted(r["step"] for r in rows)
    assert s["tokenizer"]["vocab_size_with_blank"] == 129 and s["precision"] == "32"
    assert json.loads((Path(cfg.out_dir) / "tiny_ctc.json").read_text())["nemo_sha256"] == s["nemo_sha256"]


def test_restore_from_gives_the_workload_token_table(trained):
    import numpy as np
    import torch

    from recipes.nemo_tokenizer import check_vocab_matches, token_set_from_nemo

    model = tc.restore_ctc_model(trained["nemo"])
    assert type(model).__name__ == "EncDecCTCModelBPE"
    expected = trained["workload"].token_set("bpe", blank="last")
    tokens = token_set_from_nemo(trained["nemo"])
    check_vocab_matches(tokens, expected)
    assert tokens.tokens == expected.tokens and tokens.blank_id == expected.vocab_size - 1
    assert model.decoder.num_classes_with_blank == expected.vocab_size
    # the restored weights are the trained ones: same greedy output as the dev pass saw, any batch
    dev = tc.load_dev_set(Path(trained["cfg"].corpus) / "dev.jsonl")
    model.eval()
    with torch.no_grad():
        sig = torch.from_numpy(dev[0]["wave"][None, :])
        log_probs, enc_len, greedy = model.forward(input_signal=sig, input_signal_length=torch.tensor([sig.shape[1]]))
    assert log_probs.shape[-1] == expected.vocab_size
    assert np.allclose(log_probs.exp().sum(-1).numpy(), 1.0, atol=1e-3)  # log-softmax over the 129 columns
    stats = tc.dev_wer(model, dev, 4, torch.device("cpu"))
    assert stats["dev_wer"] == pytest.approx(trained["sidecar"]["dev_wer_per_epoch"][-1]["dev_wer"])


def test_bad_nemo_files_are_one_line_errors(trained, tmp_path):
    good = trained["nemo"].read_bytes()
    cases = {
        "truncated.nemo": good[: len(good) // 2],
        "garbage.nemo": b"this is not a tar archive" * 100,
        "empty.nemo": b"",
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:  # a tar without weights
        data = b"sample_rate: 16000\n"
        info = tarfile.TarInfo("./model_config.yaml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    cases["no_weights.nemo"] = buf.getvalue()
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(ValueError) as err:
            tc.restore_ctc_model(path)
        msg = str(err.value)
        assert "\n" not in msg and name in msg, (name, msg)
    with pytest.raises(FileNotFoundError, match="no such .nemo file"):
        tc.restore_ctc_model(tmp_path / "absent.nemo")


def test_noam_peak_is_the_configured_lr():
    import torch

    from nemo.core.optim.lr_scheduler import NoamAnnealing

    cfg = tc.TrainCtcConfig(schedule="noam", lr=1.5e-3, warmup_steps=40)
    optim = tc.optim_config(cfg)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=optim["lr"])
    sched = NoamAnnealing(opt, d_model=optim["sched"]["d_model"], warmup_steps=optim["sched"]["warmup_steps"],
                          min_lr=optim["sched"]["min_lr"])
    lrs = []
    for _ in range(80):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert max(lrs) == pytest.approx(1.5e-3, rel=0.03)
    assert lrs[-1] < max(lrs) and math.isclose(max(lrs), lrs[38], rel_tol=0.03)


@pytest.mark.parametrize("override, needle", [
    ({"schedule": "linear"}, "schedule"),
    ({"precision": "fp8"}, "precision"),
    ({"max_minutes": 0}, "max_minutes"),
    ({"model": tc.ConformerSize(d_model=30, n_heads=4)}, "d_model"),
])
def test_bad_options_are_one_line_errors(override, needle):
    with pytest.raises(ValueError) as err:
        tc.train_ctc(tc.TrainCtcConfig(**override))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_missing_corpus_names_the_recipe(tmp_path, capsys):
    with pytest.raises(SystemExit) as ex:
        tc.main([f"corpus={tmp_path}/nothing", f"out_dir={tmp_path}/out"])
    assert ex.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recipes.speech_corpus" in err[0]


@pytest.mark.gpu
def test_gpu_bf16_training_smoke(trained, tmp_path):
    """The H200 path: bf16-mixed on CUDA (precision=auto), pinned memory, a worker process; saves, restores."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    cfg = trained["cfg"]
    gpu_cfg = tc.TrainCtcConfig(corpus=cfg.corpus, workload=cfg.workload, out_dir=str(tmp_path), name="gpu_ctc",
                                model=TINY, batch_size=8, num_workers=1, max_minutes=0.5, max_steps=6,
                                warmup_steps=2, dev_batch_size=4)
    s = tc.train_ctc(gpu_cfg, command="pytest gpu smoke")
    assert s["precision"] == "bf16-mixed" and s["steps"] == 6 and s["device"] == torch.cuda.get_device_name()
    assert all(0.0 <= r["dev_wer"] for r in s["dev_wer_per_epoch"])
    model = tc.restore_ctc_model(tmp_path / "gpu_ctc.nemo", map_location="cuda")
    assert next(model.parameters()).is_cuda and model.decoder.num_classes_with_blank == 129


def test_greedy_texts_collapses_repeats_drops_blank_and_respects_lengths():
    import torch
    from types import SimpleNamespace

    seen = []
    model = SimpleNamespace(decoder=SimpleNamespace(num_classes_with_blank=129),
                            tokenizer=SimpleNamespace(ids_to_text=lambda ids: seen.append(ids) or " ".join(map(str, ids))))
    argmax = torch.tensor([[5, 5, 128, 5, 7, 7, 128], [3, 128, 3, 3, 9, 9, 9], [128, 128, 128, 1, 1, 1, 1]])
    texts = tc.greedy_texts(model, argmax, torch.tensor([7, 4, 3]))
    assert texts == ["5 5 7", "3 3", ""]  # a blank separates real repeats; frames past the length are ignored
    assert seen == [[5, 5, 7], [3, 3]]
