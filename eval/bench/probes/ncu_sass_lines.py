"""A device's PC sampling per source line, on this machine (a probe, not a benchmark row).

Nsight Compute's source page of a kernel in the SASS view (`ncu --import R --page source --csv --print-source sass`,
what eval/bench/wfst_ncu_gpu_run.sh PERSISTENT=1 writes) carries the warp stall samples per instruction but, on the
device tool's machines, no source lines (its CUDA view came back without samples). This probe compiles the same .cu
here with the extension's flags (-O3 -lineinfo, sm_90), disassembles the kernel with nvdisasm's inline line info
(`eval/bench/probes/sass.sh` fetches the tools), checks that both instruction sequences agree (opcodes and operands,
addresses and reuse flags aside) and then sums the device's samples per source line:

  * by the **outer line**: the outermost line of `--outer-file` the instruction is inlined into, i.e. the kernel's
    own body (for decoders/include/wfst_kernels.cuh PersistentKernel: the step loop's calls -- a step's phases);
  * by (outer line, **inner line**): the innermost line of `--outer-file`, the statement itself.

A warp waiting at a block barrier is sampled at the instruction after its BAR.SYNC, so `barrier` samples land on the
first instruction of what follows the barrier (the next phase's first line), not on the phase that made it wait.

    python -m eval.bench.probes.ncu_sass_lines call1/ncu/bench_HLG_b1_persistent.source_sass.csv \\
        decoders/csrc/wfst_launch.cu PersistentKernelIfLi0ELb0ELi2ELb1ELb1ELb0E
"""
from __future__ import annotations

import argparse
import collections
import gzip
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from reports.profile import STALL_ALL, sample_count, source_page, stall_reasons

TOOLS = Path(os.environ.get("SASS_TOOLS", Path.home() / ".cache" / "beamdec-sass-tools")) / "bin"


def _norm(text: str) -> str:
    text = re.sub(r"\(\*.*?\*\)", "", text)  # nvdisasm's annotations, e.g. (*"SpillRefill"*)
    text = re.sub(r"0x[0-9a-f]{6,}|`\([^)]*\)", "X", text.replace(".reuse", ""))  # branch targets, addresses
    return " ".join(text.replace(";", " ").split())


def local_sass(cu: str, kernel: str, defines: list[str]) -> list[tuple[str, list[tuple[str, int]]]]:
    """(instruction, inline chain innermost first as (file name, line)) of the first function whose mangled name
    contains `kernel`, compiled here for sm_90 with -lineinfo."""
    if not (TOOLS / "nvdisasm").exists() or not (TOOLS / "cuobjdump").exists():
        subprocess.run(["bash", "eval/bench/probes/sass.sh", cu], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "k.o"
        print(f"compiling {cu} (nvcc -O3 -lineinfo sm_90, ~30 s) ...", file=sys.stderr, flush=True)
        subprocess.run(["nvcc", "-c", "-std=c++17", "-arch=sm_90", "-O3", "--expt-relaxed-constexpr", "-lineinfo",
                        *defines, "-Idecoders/include", "-Idecoders/csrc", cu, "-o", str(obj)], check=True,
                       stderr=subprocess.DEVNULL)
        subprocess.run([str(TOOLS / "cuobjdump"), "-xelf", "all", str(obj)], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL)
        cubin = next(Path(tmp).glob("*.cubin"))
        text = subprocess.run([str(TOOLS / "nvdisasm"), "-gi", str(cubin)], check=True, capture_output=True,
                              text=True).stdout
    out: list[tuple[str, list[tuple[str, int]]]] = []
    inside, chain, pending = False, [], []
    for line in text.splitlines():
        if line.startswith("\t.section"):
            if inside:
                break
            inside = ".text." in line and kernel in line
            continue
        if not inside:
            continue
        m = re.match(r'\s*//## File "([^"]+)", line (\d+)', line)
        if m:
            pending.append((Path(m.group(1)).name, int(m.group(2))))
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*)$", line)
        if m:
            if pending:
                chain, pending = pending, []
            out.append((m.group(1), chain))
    if not out:
        raise SystemExit(f"ncu_sass_lines: no function with '{kernel}' in {cu}")
    return out


def device_rows(path: str) -> list[dict[str, str]]:
    """The device's source page (reports.profile.source_page), read from a .csv or .csv.gz."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    try:
        return source_page(text)[1]
    except ValueError as e:
        raise SystemExit(f"ncu_sass_lines: {path}: {e} (the SASS view of a SourceCounters profile)") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="the device's source page, SASS view (.csv or .csv.gz)")
    ap.add_argument("cu", help="the .cu the kernel was built from (decoders/csrc/...)")
    ap.add_argument("kernel", help="a substring of the kernel's mangled name")
    ap.add_argument("--outer-file", default="wfst_kernels.cuh")
    ap.add_argument("--defines", nargs="*", default=["-DBEAMDEC_WITH_WFST", "-DBEAMDEC_WITH_CUDA"])
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv)

    rows = device_rows(args.csv)
    ins = local_sass(args.cu, args.kernel, args.defines)
    if len(ins) != len(rows):
        raise SystemExit(f"ncu_sass_lines: {len(rows)} device instructions, {len(ins)} here: not the same build")
    differ = sum(_norm(a) != _norm(r["Source"]) for (a, _), r in zip(ins, rows))
    if differ > len(rows) // 100:
        raise SystemExit(f"ncu_sass_lines: {differ} of {len(rows)} instructions differ: not the same build")
    def lines_in_file(chain):  # the chain's lines of --outer-file, innermost first
        return [line for name, line in chain if name == args.outer_file] or [-1]

    by_outer: dict = collections.defaultdict(collections.Counter)
    by_line: dict = collections.defaultdict(collections.Counter)
    total = 0.0
    for (_, chain), r in zip(ins, rows):
        s = sample_count(r[STALL_ALL])
        total += s
        own = lines_in_file(chain)
        key = (own[-1], own[0])
        for c in (by_outer[key[0]], by_line[key]):
            c["all"] += s
            c.update(stall_reasons(r))
    total = total or 1.0
    src = Path("decoders/include", args.outer_file)
    text = src.read_text().splitlines() if src.exists() else []
    show = lambda n: text[n - 1].strip()[:90] if 0 < n <= len(text) else "?"  # noqa: E731
    print(f"{len(rows)} instructions ({differ} differ beyond addresses and annotations), {total:,.0f} samples\n")
    print(f"| outer line ({args.outer_file}) | samples | barrier | other than barrier | top reasons | source |")
    print("|---:|---:|---:|---:|---|---|")
    for o, c in sorted(by_outer.items(), key=lambda kv: -kv[1]["all"])[:15]:
        top = ", ".join(f"{k} {v / total:.1%}" for k, v in c.most_common(4) if k not in ("all", "barrier"))
        print(f"| {o} | {c['all'] / total:.1%} | {c['barrier'] / total:.1%} | {(c['all'] - c['barrier']) / total:.1%} | "
              f"{top} | `{show(o)}` |")
    print(f"\n| outer | inner line | samples other than barrier | top reasons | source |")
    print("|---:|---:|---:|---|---|")
    ranked = sorted(by_line.items(), key=lambda kv: -(kv[1]["all"] - kv[1]["barrier"]))
    for (o, i), c in ranked[: args.top]:
        top = ", ".join(f"{k} {v / total:.2%}" for k, v in c.most_common(4) if k not in ("all", "barrier"))
        print(f"| {o} | {i} | {(c['all'] - c['barrier']) / total:.2%} | {top} | `{show(i)}` |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
