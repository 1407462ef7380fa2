"""WFST decoder benchmark (not a test): ours (CUDA) vs riva-asrlib-decoder (CUDA) vs k2py (CPU), same log-probs.

Decoder-only RTFx (audio seconds / decode wall seconds, after a warm-up pass, CUDA-synchronised), WER (jiwer),
and memory measured THE SAME WAY for every GPU decoder: `vram_delta_bytes` = drop of the device's free memory
(torch.cuda.mem_get_info) from before the decoder is built (graph upload included) to after its timed passes
(torch's caching allocator keeps what our decoder reserved, so for ours this is its reserved peak; Riva
allocates its own pools). For ours also `torch_peak_bytes` (max_memory_allocated above the log-probs).
Rows per (decoder, graph, batch size[, CUDA-graph mode]); JSON out.

    # log-probs of a workload set (or --lp-file made by --dump-lp on a machine that has the workload)
    python -m eval.bench.wfst_bench --scale tiny --kind char --set other \
        --graph-dir compact=data/graphs/tiny/char_blanklast/compact --graph-dir normal=data/graphs/tiny/char_blanklast/normal
    python -m eval.bench.wfst_bench --lp-file lp.pt --decoders k2py --graph-dir compact=...   # k2py: CPU
    bash eval/bench/wfst_gpu_run.sh prepare; then on the GPU host: bash eval/bench/wfst_gpu_run.sh
    SCALE=small bash eval/bench/wfst_gpu_run.sh scale   # on the GPU host: regenerates workload + graphs there

Measured on one H200 (tiny char workload, 'other' set, 200 utts = 1242 s of audio, batch 1 on 25 utts; beam 17,
max_active 10000; the earlier block-per-lane pipeline), decoder-only RTFx ours / Riva 0.4.4 on the same TLG and log-probs:
compact TLG b1 430/122 (3.5x), b32 2981/1198 (2.5x), b200 11314/2620 (4.3x); normal TLG b1 489/127, b32
3360/1244, b200 12521/2762 (4.5x); ours on the HLG b200 ~27.5k. WER 13.64 % ours vs 13.72 % Riva (compact).
VRAM (free-memory delta, both): b200 732 vs 1290 MiB, b32 140 vs 228 MiB, b1 26 vs 26 MiB (compact), 48 vs
30 MiB (normal TLG). k2py (CPU, one core, HLG): ~93-119 RTFx; our CPU reference on one core: ~640 (TLG).
At bench scale (200k words, 4.2 M-state TLGs, 2026-11-30, flattened pipeline): compact / normal TLG b1 3.3x /
3.8x, b32 3.4x / 3.8x, b200 5.9x / 6.9x Riva's RTFx (12.2k / 15.8k), WER 15.16 % vs Riva's 15.02 %, 0-2 of 200
utterances rescued. Tables: reports/measurements/h200_2026-11-30/README.md.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

import torch


def load_set(scale: str, kind: str, set_name: str, max_utts: int) -> dict:
    """{'lp': (B, T, V) float32, 'len': (B,), 'refs', 'dur', 'ids'} from the embedded workload's simulator."""
    from eval.acoustic.base import Utterance
    from eval.acoustic.simulator import SimulatorSource
    from recipes.workload import prepare_workload

    wl = prepare_workload(scale)
    tokens = wl.token_set(kind, "last")
    utts = [Utterance(id=u["id"], text=u["text"], duration=float(u["duration"]))
            for u in wl.utterances(set_name)[:max_utts]]
    batch = next(iter(SimulatorSource(tokens, wl.simulator_config(set_name)).batches(utts, len(utts))))
    return dict(lp=batch.log_probs.float(), len=batch.lengths.to(torch.int64), refs=[u.text for u in utts],
                dur=[u.duration for u in utts], ids=[u.id for u in utts], vocab=tokens.vocab_size)


def wer(refs, hyps) -> float:
    import jiwer

    return float(jiwer.wer([r or "<empty>" for r in refs], [h or "<empty>" for h in hyps]))


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn, repeats: int):
    fn()  # warm-up (extension load, graph upload, CUDA-graph instantiation)
    _sync()
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        _sync()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _free_bytes() -> int:
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    return int(torch.cuda.mem_get_info()[0])


_GRAPHS: dict = {}  # host graphs loaded once per path (the device upload is still measured per run)


def bench_ours(graph_path: Path, data: dict, n: int, batch: int, cfg_kwargs: dict, repeats: int) -> dict:
    from decoders.graph import WfstGraph
    from decoders.wfst import WfstDecoder, WfstDecoderConfig

    lp_dev = data["lp"][:n].cuda()
    lengths = data["len"][:n]
    free0 = _free_bytes()
    base_alloc = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    g = _GRAPHS.get(str(graph_path)) or _GRAPHS.setdefault(str(graph_path), WfstGraph.load(graph_path))
    dec = WfstDecoder(g, WfstDecoderConfig(**cfg_kwargs), "cuda")

    causes: dict = {}  # first-pass overflow kind -> rescued utterances (of the last timed pass)

    def run():
        words, overflow, rescued = [], 0, 0
        causes.clear()
        for i in range(0, n, batch):
            r = dec.decode(lp_dev[i : i + batch], lengths[i : i + batch])
            words += [" ".join(w) for w in r.word_strings]
            overflow += sum(1 for o in r.overflow if o)
            rescued += len(r.rescued)
            for bits in r.rescued_overflow:
                for name in r.overflow_names(bits):
                    causes[name] = causes.get(name, 0) + 1
        return words, overflow, rescued

    sec, (hyps, overflow, rescued) = _timed(run, repeats)
    peak = torch.cuda.max_memory_allocated() - base_alloc
    used = free0 - int(torch.cuda.mem_get_info()[0])
    del dec
    from decoders import wfst as _w

    _w._graph_cache.clear()  # next run uploads (and is charged for) the graph again
    return dict(seconds=sec, hyps=hyps, torch_peak_bytes=int(peak), vram_delta_bytes=int(used),
                overflow_utts=overflow, rescued_utts=rescued, rescue_causes=dict(causes))


def bench_riva(fst: Path, words_txt: Path, data: dict, n: int, batch: int, repeats: int) -> dict:
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
    lp_dev = data["lp"][:n].cuda()
    lengths = data["len"][:n]
    free0 = _free_bytes()
    dec = BatchedMappedDecoderCuda(c, str(fst), str(words_txt), int(data["lp"].shape[2]))

    def run():
        out = []
        for i in range(0, n, batch):
            res = dec.decode_mbr(lp_dev[i : i + batch].contiguous(), lengths[i : i + batch].cpu())
            out += [" ".join(w[0] for w in sent) for sent in res]
        return out

    sec, hyps = _timed(run, repeats)
    used = free0 - int(torch.cuda.mem_get_info()[0])
    del dec
    return dict(seconds=sec, hyps=hyps, vram_delta_bytes=int(used))


def bench_k2py(graph_dir: Path, data: dict, n: int) -> dict:
    """k2py's OnlineDenseIntersecter through the harness adapter (CPU, one utterance at a time)."""
    from eval.adapters.base import DecodingContext
    from eval.adapters.k2py_adapter import K2pyConfig, K2pyDecoder

    class _Tok:  # the adapter only reads vocab_size and blank_id
        vocab_size = int(data["lp"].shape[2])
        blank_id = vocab_size - 1

    dec = K2pyDecoder(K2pyConfig(search_beam=17.0), DecodingContext(tokens=_Tok(), graph_dir=graph_dir))
    t0 = time.perf_counter()
    hyps = dec.decode(data["lp"][:n], data["len"][:n])
    sec = time.perf_counter() - t0
    return dict(seconds=sec, hyps=[" ".join(h.words) for h in hyps], partial=dec.pop_stats()["partial_count"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="tiny")
    ap.add_argument("--kind", default="char")
    ap.add_argument("--set", default="other")
    ap.add_argument("--max-utts", type=int, default=200)
    ap.add_argument("--lp-file", default=None, help="torch.save'd dict from --dump-lp (skips the workload)")
    ap.add_argument("--dump-lp", default=None, help="write the set's log-probs + references here and exit")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32, 200])
    ap.add_argument("--b1-utts", type=int, default=50, help="utterances decoded at batch 1 (time budget)")
    ap.add_argument("--k2py-utts", type=int, default=None, help="utterances k2py decodes (CPU; default: all)")
    ap.add_argument("--graph-dir", action="append", default=[], help="name=path (TLG.bin/HLG.bin/TLG.fst/words.txt)")
    ap.add_argument("--graphs", nargs="+", default=["TLG", "HLG"])
    ap.add_argument("--decoders", nargs="+", default=["ours", "riva"], help="ours riva k2py")
    ap.add_argument("--cuda-graph-modes", nargs="+", default=["0"], help="BEAMDEC_WFST_CUDA_GRAPH values to A/B")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default="runs/wfst_bench.json")
    args = ap.parse_args(argv)

    data = torch.load(args.lp_file) if args.lp_file else load_set(args.scale, args.kind, args.set, args.max_utts)
    if args.dump_lp:
        torch.save(data, args.dump_lp)
        print(f"wrote {args.dump_lp}")
        return
    total = min(args.max_utts, data["lp"].shape[0])
    gpu_only = [d for d in args.decoders if d in ("ours", "riva")]
    if gpu_only and not torch.cuda.is_available():  # say so instead of failing inside the first GPU run
        print(f"no CUDA device: skipping {' '.join(gpu_only)} (GPU decoders)", flush=True)
        args.decoders = [d for d in args.decoders if d not in gpu_only]
    if "ours" in args.decoders and torch.cuda.is_available():  # load our kernels once, outside every measurement
        from decoders.graph import WfstGraph
        from decoders.wfst import WfstDecoder

        tiny = WfstGraph.from_arcs([0, 0], [0, 1], [0, -1], [0, 0], [0.0, 0.0], num_states=2, start_state=0,
                                   final_state=1, num_tokens=int(data["lp"].shape[2]))
        WfstDecoder(tiny, device="cuda").decode(data["lp"][:1, :2].cuda().contiguous(), torch.tensor([2]))
        torch.cuda.synchronize()
    rows = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def emit(row: dict, hyps, n: int):
        audio = float(sum(data["dur"][:n]))
        row.update(utterances=n, audio_seconds=audio, rtfx=audio / row.pop("seconds"), wer=wer(data["refs"][:n], hyps))
        rows.append(row)
        print(json.dumps(row), flush=True)
        out.write_text(json.dumps(dict(rows=rows), indent=1))

    for spec in args.graph_dir:
        name, _, path = spec.partition("=")
        gdir = Path(path)
        for b in args.batches:
            n = min(total, args.b1_utts) if b == 1 else total
            if "ours" in args.decoders:
                for gname in args.graphs:
                    if not (gdir / f"{gname}.bin").is_file():
                        continue
                    for mode in (args.cuda_graph_modes if b != 1 else args.cuda_graph_modes[:1]):
                        os.environ["BEAMDEC_WFST_CUDA_GRAPH"] = mode
                        r = bench_ours(gdir / f"{gname}.bin", data, n, b, dict(search_beam=17.0, max_active=10000),
                                       args.repeats)
                        hyps = r.pop("hyps")
                        emit(dict(decoder="ours", graph=f"{name}/{gname}", batch=b, cuda_graph=mode, **r),
                             hyps, n)
            if "riva" in args.decoders and (gdir / "TLG.fst").is_file():
                try:
                    r = bench_riva(gdir / "TLG.fst", gdir / "words.txt", data, n, b, args.repeats)
                    hyps = r.pop("hyps")
                    emit(dict(decoder="riva", graph=f"{name}/TLG", batch=b, **r), hyps, n)
                except Exception as e:  # report, keep benchmarking the rest
                    rows.append(dict(decoder="riva", graph=f"{name}/TLG", batch=b, error=repr(e)[:300]))
                    print(rows[-1], flush=True)
        if "k2py" in args.decoders and (gdir / "HLG.k2.txt").is_file():
            n = total if args.k2py_utts is None else min(total, args.k2py_utts)
            r = bench_k2py(gdir, data, n)
            hyps = r.pop("hyps")
            emit(dict(decoder="k2py(cpu)", graph=f"{name}/HLG", batch=1, **r), hyps, n)
    out.write_text(json.dumps(dict(rows=rows), indent=1))  # also when no row was measured
    print(comparison_table(rows))
    print(f"wrote {out}")


def comparison_table(rows: list) -> str:
    """Markdown: each of our rows beside Riva's on the same graph file (TLG) and batch, with the RTFx ratio;
    HLG rows and k2py stand alone (Riva only takes the TLG)."""
    riva = {(r["graph"].split("/")[0], r["batch"]): r for r in rows if r.get("decoder") == "riva" and "rtfx" in r}
    lines = ["| decoder | graph | batch | RTFx | Riva RTFx | x Riva | WER % | Riva WER % | VRAM MiB | Riva VRAM MiB "
             "| rescued (cause) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    mib = lambda r: f"{r['vram_delta_bytes'] / 2**20:.0f}" if "vram_delta_bytes" in r else "-"  # noqa: E731
    for r in rows:
        if r.get("decoder") == "riva" or "rtfx" not in r:
            continue
        topo, _, kind = r["graph"].partition("/")
        v = riva.get((topo, r["batch"])) if kind == "TLG" else None
        causes = ", ".join(f"{k} {n}" for k, n in sorted(r.get("rescue_causes", {}).items()))
        rescued = f"{r['rescued_utts']}" + (f" ({causes})" if causes else "") if "rescued_utts" in r else "-"
        lines.append(" | ".join([
            f"| {r['decoder']}", r["graph"], str(r["batch"]), f"{r['rtfx']:.0f}",
            f"{v['rtfx']:.0f}" if v else "-", f"{r['rtfx'] / v['rtfx']:.2f}x" if v else "-",
            f"{100 * r['wer']:.2f}", f"{100 * v['wer']:.2f}" if v else "-", mib(r), mib(v) if v else "-",
            rescued + " |"]))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
