"""WFST decoder benchmark (not a test): ours (CUDA) vs riva-asrlib-decoder vs k2py on the workload graphs.

Decoder-only RTFx (audio seconds / decode wall seconds, after a warm-up, CUDA-synchronised), WER (jiwer)
and peak VRAM per (graph, batch size); JSON out. Same log-probs for every decoder.

    python -m eval.bench.wfst_bench --scale tiny --kind char --out runs/wfst_bench.json
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def _load_set(scale: str, kind: str, set_name: str, max_utts: int):
    from eval.acoustic.base import Utterance
    from eval.acoustic.simulator import SimulatorSource
    from recipes.workload import prepare_workload

    wl = prepare_workload(scale)
    tokens = wl.token_set(kind, "last")
    utts = [Utterance(id=u["id"], text=u["text"], duration=float(u["duration"]))
            for u in wl.utterances(set_name)[:max_utts]]
    src = SimulatorSource(tokens, wl.simulator_config(set_name))
    batch = next(iter(src.batches(utts, len(utts))))
    return utts, batch.log_probs.float(), batch.lengths.to(torch.int64), tokens


def _wer(refs, hyps) -> float:
    import jiwer

    return float(jiwer.wer([r or "<empty>" for r in refs], [h or "<empty>" for h in hyps]))


def _timed(fn, repeats: int = 2):
    fn()  # warm-up (build, graph upload)
    torch.cuda.synchronize()
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best, out


def bench_ours(graph_path: Path, lp, lengths, batch: int, cfg_kwargs: dict):
    from decoders.graph import WfstGraph
    from decoders.wfst import WfstDecoder, WfstDecoderConfig

    g = WfstGraph.load(graph_path)
    dec = WfstDecoder(g, WfstDecoderConfig(**cfg_kwargs), "cuda")
    lp_dev = lp.cuda()

    def run():
        words, overflow = [], 0
        for i in range(0, lp.shape[0], batch):
            r = dec.decode(lp_dev[i : i + batch], lengths[i : i + batch])
            words += [" ".join(w) for w in r.word_strings]
            overflow += sum(1 for o in r.overflow if o)
        return words, overflow

    torch.cuda.reset_peak_memory_stats()
    sec, (hyps, overflow) = _timed(run)
    return sec, hyps, torch.cuda.max_memory_allocated(), overflow


def bench_riva(fst: Path, words_txt: Path, lp, lengths, batch: int, vocab: int):
    from riva.asrlib.decoder.python_decoder import BatchedMappedDecoderCuda, BatchedMappedDecoderCudaConfig

    c = BatchedMappedDecoderCudaConfig()
    c.online_opts.decoder_opts.default_beam = 17.0
    c.online_opts.decoder_opts.lattice_beam = 8.0
    c.online_opts.decoder_opts.max_active = 10000
    c.online_opts.determinize_lattice = True
    c.online_opts.max_batch_size = max(batch, 1)
    c.online_opts.num_channels = max(batch, 1) * 2
    c.online_opts.lattice_postprocessor_opts.acoustic_scale = 1.0
    c.n_input_per_chunk = 50
    free0 = torch.cuda.mem_get_info()[0]
    dec = BatchedMappedDecoderCuda(c, str(fst), str(words_txt), vocab)
    lp_dev = lp.cuda()

    def run():
        out = []
        for i in range(0, lp.shape[0], batch):
            res = dec.decode_mbr(lp_dev[i : i + batch].contiguous(), lengths[i : i + batch].cpu())
            out += [" ".join(w[0] for w in sent) for sent in res]
        return out

    sec, hyps = _timed(run)
    used = free0 - torch.cuda.mem_get_info()[0]
    return sec, hyps, used


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--kind", default="char")
    ap.add_argument("--set", default="other")
    ap.add_argument("--max-utts", type=int, default=200)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32, 200])
    ap.add_argument("--topologies", nargs="+", default=["compact", "normal"])
    ap.add_argument("--graph-root", default="data/graphs")
    ap.add_argument("--no-riva", action="store_true")
    ap.add_argument("--out", default="runs/wfst_bench.json")
    args = ap.parse_args(argv)

    utts, lp, lengths, tokens = _load_set(args.scale, args.kind, args.set, args.max_utts)
    audio_s = sum(u.duration for u in utts)
    refs = [u.text for u in utts]
    rows = []
    for topo in args.topologies:
        gdir = Path(args.graph_root) / args.scale / f"{args.kind}_blanklast" / topo
        for gname in ("TLG", "HLG"):
            if not (gdir / f"{gname}.bin").is_file():
                continue
            for b in args.batches:
                sec, hyps, peak, ovf = bench_ours(gdir / f"{gname}.bin", lp, lengths, b,
                                                  dict(search_beam=17.0, max_active=10000))
                rows.append(dict(decoder="ours", graph=f"{topo}/{gname}", batch=b, rtfx=audio_s / sec,
                                 wer=_wer(refs, hyps), peak_vram_bytes=int(peak), overflow_utts=ovf))
                print(rows[-1], flush=True)
        if not args.no_riva and (gdir / "TLG.fst").is_file():
            for b in args.batches:
                try:
                    sec, hyps, used = bench_riva(gdir / "TLG.fst", gdir / "words.txt", lp, lengths, b,
                                                 tokens.vocab_size)
                    rows.append(dict(decoder="riva", graph=f"{topo}/TLG", batch=b, rtfx=audio_s / sec,
                                     wer=_wer(refs, hyps), vram_delta_bytes=int(used)))
                except Exception as e:  # report, keep benchmarking the rest
                    rows.append(dict(decoder="riva", graph=f"{topo}/TLG", batch=b, error=repr(e)[:300]))
                print(rows[-1], flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(scale=args.scale, kind=args.kind, set=args.set, utterances=len(utts),
                                   audio_seconds=audio_s, rows=rows), indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
