"""Sharded evaluation over torch.distributed: the plumbing `eval.runner` uses under `torchrun`.

    torchrun --nproc_per_node=4 -m eval.run experiment=compare              # 4 GPUs (or 4 CPU processes)
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 -m eval.run ...

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; with WORLD_SIZE > 1 the runner shards every dataset's utterances
over the ranks (`shard_by_duration`), each rank builds the acoustic source and decoders on its own device
(a bare `cuda` becomes `cuda:LOCAL_RANK`), and rank 0 gathers the hypotheses and rows into one run directory.
Without those variables (or WORLD_SIZE=1) nothing here is used: one process stays the default.

Collectives are few and all carry Python objects over a gloo group (a CPU path even when the decoders run on
NCCL-backed GPUs: results are megabytes of text, and a failure report must not depend on a healthy CUDA context):

  1. every rank sends its resolved config's digest: a rank that differs is refused, before any work;
  2. preparation (workload, graphs, decoders) in stages: rank 0 first, then the first rank of each other node,
     then the rest, so caches on a shared file system are built once and read by the others;
  3. every rank sends its shard's rows and hypotheses (or its error) to rank 0;
  4. rank 0 sends back the outcome (the written run, or the first failing rank's error): every rank then
     returns or raises the same thing, and a failed run writes nothing.

Every rank reaches every collective: work between them runs under `capture`, which turns an exception into a
`RankFailure` sent in place of the result. A rank that dies outright (segfault, OOM kill) cannot report; torchrun
then stops the other workers, and a bare process group times out after EVAL_DIST_TIMEOUT_S (torch's default when
unset), so a run never hangs forever.
"""
from __future__ import annotations

import datetime
import hashlib
import heapq
import json
import logging
import math
import os
import socket
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

log = logging.getLogger(__name__)

TIMEOUT_ENV = "EVAL_DIST_TIMEOUT_S"


# ---------------------------------------------------------------------------------------------------------
# Where this process sits
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistContext:
    """This process's place in a (possibly single-process) run, from torchrun's environment variables."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "DistContext":
        """RANK / WORLD_SIZE / LOCAL_RANK as torchrun sets them; a single process when WORLD_SIZE is unset."""
        env = os.environ if environ is None else environ
        if not env.get("WORLD_SIZE"):
            return cls()

        def number(name: str, default: Optional[int] = None) -> int:
            raw = env.get(name)
            if raw in (None, ""):
                if default is None:
                    raise ValueError(f"environment variable {name} is unset but WORLD_SIZE={env['WORLD_SIZE']} is "
                                     f"set; start ranks with torchrun, which sets RANK, WORLD_SIZE and LOCAL_RANK")
                return default
            try:
                return int(raw)
            except ValueError:
                raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None

        world = number("WORLD_SIZE")
        if world < 1:
            raise ValueError(f"environment variable WORLD_SIZE={world} must be >= 1")
        if world == 1:
            return cls()
        rank = number("RANK")
        if not 0 <= rank < world:
            raise ValueError(f"environment variable RANK={rank} must be in [0, WORLD_SIZE={world})")
        local = number("LOCAL_RANK", default=rank)
        if local < 0:
            raise ValueError(f"environment variable LOCAL_RANK={local} must be >= 0")
        return cls(rank=rank, world_size=world, local_rank=local)

    def device(self, device: str) -> str:
        """The device this rank uses for a configured device: a bare `cuda` is this rank's GPU (LOCAL_RANK);
        `cpu` and an explicit `cuda:N` are kept (the user pinned it)."""
        return f"cuda:{self.local_rank}" if self.enabled and str(device) == "cuda" else str(device)

    @property
    def phase(self) -> int:
        """Preparation stage of this rank: 0 rank 0, 1 the first rank of every other node, 2 the rest."""
        return 0 if self.rank == 0 else (1 if self.local_rank == 0 else 2)


def host_name() -> str:
    return socket.gethostname()


# ---------------------------------------------------------------------------------------------------------
# Failures travel as values
# ---------------------------------------------------------------------------------------------------------


@dataclass
class RankFailure:
    """An exception of one rank, as sent to the others (picklable, one line)."""

    rank: int
    host: str
    error: str

    def message(self) -> str:
        return f"rank {self.rank} ({self.host}) failed: {self.error}"


class RankFailed(RuntimeError):
    """The run failed on some rank; every rank raises this with the same one-line message."""


def one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def capture(rank: int, fn: Callable[[], Any]) -> Any:
    """fn()'s value, or a RankFailure carrying its exception (the traceback goes to this rank's log)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - any failure must reach the other ranks, not strand them in a collective
        log.debug("rank %d failed:\n%s", rank, traceback.format_exc())
        return RankFailure(rank=rank, host=host_name(), error=one_line(e))


def first_failure(values: Iterable[Any]) -> Optional[RankFailure]:
    """The lowest rank's failure among gathered values (None when every rank succeeded); when several ranks
    failed the message says how many, since usually they failed alike."""
    fails = [v for v in values if isinstance(v, RankFailure)]
    if not fails:
        return None
    first = min(fails, key=lambda f: f.rank)
    if len(fails) > 1:
        others = sorted(f.rank for f in fails if f is not first)
        return RankFailure(first.rank, first.host, f"{first.error} (ranks {others} failed too)")
    return first


def raise_first_failure(values: Iterable[Any]) -> None:
    failure = first_failure(values)
    if failure is not None:
        raise RankFailed(failure.message())


# ---------------------------------------------------------------------------------------------------------
# The process group
# ---------------------------------------------------------------------------------------------------------


class ProcessGroup:
    """`with ProcessGroup(ctx, use_cuda) as pg:` joins torchrun's rendezvous (env://) unless a group exists
    already, and leaves it at exit when it joined. On a node with GPUs it first makes GPU LOCAL_RANK this
    process's current device, so every bare `cuda` of the process is its own GPU. The default group is NCCL when
    the decoders run on CUDA, gloo otherwise; object collectives always go over gloo (see the module docstring)."""

    def __init__(self, ctx: DistContext, use_cuda: bool = False):
        self.ctx = ctx
        self.use_cuda = bool(use_cuda)
        self.backend = "gloo"
        self._owned = False
        self._control = None

    def __enter__(self) -> "ProcessGroup":
        import torch
        import torch.distributed as dist

        if not dist.is_available():
            raise RuntimeError("torch.distributed is not available in this torch build; run one process instead")
        cuda = self.use_cuda and torch.cuda.is_available()
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if cuda and self.ctx.local_rank >= gpus:
            raise RuntimeError(f"LOCAL_RANK={self.ctx.local_rank} but this node has {gpus} GPU(s); start at most "
                               f"that many processes per node (--nproc_per_node)")
        if self.ctx.local_rank < gpus:
            # also when only the acoustic model uses CUDA (model device "auto"): every bare `cuda` of this process,
            # NeMo's included, is then this rank's GPU rather than GPU 0 for all ranks
            torch.cuda.set_device(self.ctx.local_rank)
        if not dist.is_initialized():
            kwargs = {}
            timeout = os.environ.get(TIMEOUT_ENV)
            if timeout:
                try:
                    kwargs["timeout"] = datetime.timedelta(seconds=float(timeout))
                except ValueError:
                    raise ValueError(f"environment variable {TIMEOUT_ENV}={timeout!r} is not a number of seconds") from None
            dist.init_process_group(backend="nccl" if cuda else "gloo", init_method="env://", **kwargs)
            self._owned = True
        self.backend = str(dist.get_backend())
        if (dist.get_rank(), dist.get_world_size()) != (self.ctx.rank, self.ctx.world_size):
            raise RuntimeError(f"the process group has rank {dist.get_rank()} of {dist.get_world_size()}, the "
                               f"environment says rank {self.ctx.rank} of {self.ctx.world_size}")
        self._control = None if self.backend == "gloo" else dist.new_group(backend="gloo")
        return self

    def __exit__(self, *exc) -> None:
        import torch.distributed as dist

        if self._owned and dist.is_initialized():
            dist.destroy_process_group()

    def all_gather(self, obj: Any) -> list:
        import torch.distributed as dist

        out: list = [None] * self.ctx.world_size
        dist.all_gather_object(out, obj, group=self._control)
        return out

    def gather(self, obj: Any) -> Optional[list]:
        """Every rank's `obj` on rank 0 (None elsewhere): shard results go to the writer only."""
        import torch.distributed as dist

        out = [None] * self.ctx.world_size if self.ctx.is_main else None
        dist.gather_object(obj, out, dst=0, group=self._control)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        import torch.distributed as dist

        box = [obj if self.ctx.is_main else None]
        dist.broadcast_object_list(box, src=0, group=self._control)
        return box[0]


def staged(pg: ProcessGroup, fn: Callable[[], Any]) -> Any:
    """Run `fn` on every rank in three stages (rank 0; the first rank of every other node; the rest), each
    stage's failures reported to all before the next begins. Preparation builds caches (workload, graphs,
    compiled extension, downloaded models): built once by rank 0 on a shared file system, once per node otherwise,
    and read by the others, instead of N processes racing to write the same files."""
    result = None
    for phase in range(3):
        mine = pg.ctx.phase == phase
        out = capture(pg.ctx.rank, fn) if mine else None
        raise_first_failure(pg.all_gather(out if isinstance(out, RankFailure) else None))
        if mine:
            result = out
    return result


# ---------------------------------------------------------------------------------------------------------
# Same config everywhere
# ---------------------------------------------------------------------------------------------------------


def config_digest(resolved: Any) -> str:
    """sha256 of a resolved config (plain containers), independent of key order."""
    text = json.dumps(resolved, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _flatten(d: Any, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out: dict = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def config_difference(a: Any, b: Any, limit: int = 3) -> str:
    """The first keys where two resolved configs differ: "experiment.batch_size: 2 vs 3"."""
    fa, fb = _flatten(a), _flatten(b)
    keys = [k for k in dict.fromkeys([*fa, *fb]) if fa.get(k, "<unset>") != fb.get(k, "<unset>")]
    shown = "; ".join(f"{k}: {fa.get(k, '<unset>')!r} vs {fb.get(k, '<unset>')!r}" for k in keys[:limit])
    return shown + (f"; and {len(keys) - limit} more" if len(keys) > limit else "")


def check_same_config(resolved_by_rank: Sequence[Any]) -> None:
    """Refuse (RankFailed) when any rank resolved another config than rank 0: its shard would be decoded with
    other settings and the merged numbers would describe no config at all."""
    ref = config_digest(resolved_by_rank[0])
    for rank, resolved in enumerate(resolved_by_rank[1:], 1):
        digest = config_digest(resolved)
        if digest != ref:
            raise RankFailed(f"rank {rank}'s resolved config differs from rank 0's (digest {digest[:12]} vs "
                             f"{ref[:12]}: {config_difference(resolved_by_rank[0], resolved)}); every rank must run "
                             f"the same config (same overrides, same conf/ files)")


# ---------------------------------------------------------------------------------------------------------
# Sharding and merging
# ---------------------------------------------------------------------------------------------------------


def shard_by_duration(durations: Sequence[float], world_size: int) -> list[list[int]]:
    """Indices of each rank's utterances, balanced by audio duration: longest first onto the least-loaded rank
    (LPT scheduling: within 4/3 of the optimal makespan); ties go to the earlier utterance and the lower rank, so
    every rank computes the same assignment. Each shard lists its indices in manifest order."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    for i, d in enumerate(durations):
        if not isinstance(d, (int, float)) or not math.isfinite(d) or d < 0:
            raise ValueError(f"utterance {i}: duration must be a finite number >= 0 seconds, got {d!r}")
    order = sorted(range(len(durations)), key=lambda i: (-float(durations[i]), i))
    heap = [(0.0, 0, r) for r in range(world_size)]  # (load seconds, utterances, rank)
    shards: list[list[int]] = [[] for _ in range(world_size)]
    for i in order:
        load, count, r = heapq.heappop(heap)
        shards[r].append(i)
        heapq.heappush(heap, (load + float(durations[i]), count + 1, r))
    return [sorted(s) for s in shards]


def check_unique_ids(dataset: str, ids: Sequence[str]) -> None:
    """Sharded runs put hypotheses back in manifest order by utterance id: ids must be unique."""
    seen: set = set()
    for i in ids:
        if i in seen:
            raise ValueError(f"dataset {dataset!r} has the utterance id {i!r} twice; sharded evaluation matches "
                             f"hypotheses by id, give every manifest line a unique \"id\"")
        seen.add(i)


def ordered_hypothesis_lines(manifest_ids: Sequence[str], batch_size: int, labels: Sequence[str],
                             lines: Iterable[str]) -> list[str]:
    """hyps.jsonl lines of one dataset from every rank, in the order one process writes them: the manifest in
    batches of `batch_size`, within a batch every decoder (in `labels` order) over the batch's utterances. A
    decoder that stopped early on some rank (skip_unavailable) has gaps, as it would in one process."""
    by_key: dict[tuple[str, str], str] = {}
    for line in lines:
        rec = json.loads(line)
        key = (str(rec["decoder"]), str(rec["id"]))
        if key in by_key:
            raise RuntimeError(f"two ranks decoded utterance {key[1]!r} with {key[0]}; the shards overlap")
        by_key[key] = line
    out: list[str] = []
    for start in range(0, len(manifest_ids), batch_size):
        chunk = manifest_ids[start:start + batch_size]
        for label in labels:
            out += [by_key.pop((label, u)) for u in chunk if (label, u) in by_key]
    if by_key:
        raise RuntimeError(f"{len(by_key)} hypotheses of utterances or decoders outside the run "
                           f"(e.g. {next(iter(by_key))}); the ranks read different manifests")
    return out
