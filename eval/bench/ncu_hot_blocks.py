"""Where a kernel's instructions go, from Nsight Compute's SASS source page: the basic blocks (runs of consecutive
instructions with the same execution count) ranked by warp instructions executed, with their stall samples and
their most frequent opcodes. Reads the CSV that `ncu --import R.ncu-rep --page source --csv --print-source sass`
writes (eval/bench/ctc_gpu_run.sh keeps it as <report>.sass.csv); runs anywhere (no GPU).

    python -m eval.bench.ncu_hot_blocks ctc_B1_T200_V5000_k10.sass.csv [--kernel 0] [--per 128] [--top 15]

--per divides the counts (e.g. the frames one launch decoded) to read them per unit of work.
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Block:
    start: int  # index of the first instruction in the kernel's listing
    count: int  # times each instruction of the block was executed (warp level)
    length: int = 0
    samples: int = 0  # warp stall samples (all)
    ops: Counter = field(default_factory=Counter)

    @property
    def instructions(self) -> int:
        return self.count * self.length


def read_kernels(path: Path) -> list[tuple[str, list[dict[str, str]]]]:
    """(kernel name, instruction rows) per profiled launch in the file."""
    kernels: list[tuple[str, list[dict[str, str]]]] = []
    header: list[str] | None = None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                kernels.append((row[1] if len(row) > 1 else "?", []))
                header = None
            elif row[0] == "Address":
                header = row
            elif header is not None and kernels:
                kernels[-1][1].append(dict(zip(header, row)))
    if not kernels:
        raise ValueError(f"{path}: no 'Kernel Name' section (not an ncu --page source --csv file)")
    return kernels


def _int(v: str) -> int:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return 0


def hot_blocks(rows: list[dict[str, str]]) -> list[Block]:
    """Basic blocks by executed warp instructions, largest first (blocks never executed are left out)."""
    blocks: list[Block] = []
    for i, r in enumerate(rows):
        n = _int(r.get("Instructions Executed", "0"))
        op = (r.get("Source", "").split() or ["?"])[0]
        if op.startswith("@"):  # predicated: name the opcode, not the predicate
            parts = r.get("Source", "").split()
            op = parts[1] if len(parts) > 1 else op
        if not blocks or blocks[-1].count != n or blocks[-1].start + blocks[-1].length != i:
            blocks.append(Block(start=i, count=n))
        b = blocks[-1]
        b.length += 1
        b.samples += _int(r.get("Warp Stall Sampling (All Samples)", "0"))
        b.ops[op.split(".")[0]] += 1
    return sorted((b for b in blocks if b.count > 0), key=lambda b: -b.instructions)


def report(name: str, rows: list[dict[str, str]], per: float = 1.0, top: int = 15) -> str:
    blocks = hot_blocks(rows)
    total = sum(b.instructions for b in blocks)
    samples = sum(b.samples for b in blocks)
    lines = [f"{name}",
             f"warp instructions executed: {total:,} ({total / per:,.0f} per unit), stall samples: {samples:,}",
             "   start  len      count  instr/unit  share  cum   samples  opcodes"]
    cum = 0
    for b in blocks[:top]:
        cum += b.instructions
        share = b.instructions / total if total else 0.0
        ops = " ".join(f"{o}x{n}" for o, n in b.ops.most_common(4))
        lines.append(f"  {b.start:6d} {b.length:4d} {b.count:10,d} {b.instructions / per:11,.0f} {share:6.1%} "
                     f"{cum / total if total else 0:5.0%} {b.samples:8d}  {ops}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--kernel", type=int, default=0, help="which profiled launch in the file (0 = first)")
    ap.add_argument("--per", type=float, default=1.0, help="divide counts by this (e.g. frames per launch)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    try:
        kernels = read_kernels(args.csv)
        if not 0 <= args.kernel < len(kernels):
            raise ValueError(f"--kernel {args.kernel}: the file holds {len(kernels)} launches")
        if args.per <= 0:
            raise ValueError(f"--per must be > 0, got {args.per}")
    except (OSError, ValueError) as e:
        print(f"ncu_hot_blocks: {e}", file=sys.stderr)
        return 2
    name, rows = kernels[args.kernel]
    print(report(name, rows, args.per, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
