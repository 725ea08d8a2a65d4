"""One run on N processes: data parallelism over torch.distributed (issue 15).

`python -m trainer train` with `num_processes = N > 1` becomes torch's own launcher
(`torch.distributed.run`, what `torchrun` runs) and starts N rank processes of the same command.
Each rank samples and scores its contiguous shard of the step's examples; the scored rollouts are
gathered to every rank, so groups, advantages and metrics are computed over the whole batch exactly
as one process would (the same functions on the same list); each rank then trains on the calls it
sampled, with the loss normalized over the whole batch and the LoRA gradients summed across ranks
before the clip and the optimizer step, which is the single-process update of the whole batch.

Only rank 0 writes the event log and checkpoints; it also decides when to stop (the STOP file) and
tells the others. Ranks die with their launcher (PR_SET_PDEATHSIG), so killing the run's process
stops every rank, as cancelling one does.

Why not `DistributedDataParallel`: the trainable parameters are LoRA adapters (megabytes), so
overlapping their all-reduce with the backward pass buys nothing, while DDP's hooks need every rank to
run the same number of synchronized backward passes; one all-reduce of the flattened gradients after
the last micro-batch lets ranks hold different numbers of calls (an MMGRPO shard with more module
calls than another) and keeps the single-process update exact.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import os
import signal
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

# Imported here, before any process group exists, on purpose: torch.distributed.nn.functional binds
# `group=group.WORLD` as default arguments when it is first imported, and transformers imports it. First
# imported after a rank joined (a rank that loads transformers lazily), those defaults hold the default
# group for good, so `destroy_process_group()` cannot free it: gloo's worker and socket threads outlive
# teardown into interpreter shutdown, where a worker dropping its last finished collective needs the GIL,
# CPython ends that thread (pthread_exit unwinding through a noexcept frame) and the rank dies of SIGABRT
# ("terminate called without an active exception") after its work is done, more often on a busy CPU
# (tests/trainer/policy/test_distributed_teardown.py).
import torch.distributed.nn.functional  # noqa: F401  (before init_process_group: see above)

T = TypeVar("T")

LAUNCHER_PID_ENV = "COHORT_LAUNCHER_PID"
RANK_ERRORS_DIR = "rank-errors"
# A rank may wait on another for as long as a step's evaluation or a test's step gate holds rank 0.
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=6)


@dataclass(frozen=True)
class Ranks:
    """This process's place in the run: `rank` of `world` processes, `local_rank` on this host."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def shard(self, items: Sequence[T]) -> slice:
        """This rank's contiguous part of `items` (sizes differ by at most one), so the ranks'
        shards in rank order are `items` in order.

        >>> [Ranks(r, 3).shard(range(8)) for r in range(3)]
        [slice(0, 3, None), slice(3, 6, None), slice(6, 8, None)]
        """
        base, extra = divmod(len(items), self.world)
        start = self.rank * base + min(self.rank, extra)
        return slice(start, start + base + (1 if self.rank < extra else 0))


SINGLE = Ranks()


def current_ranks() -> Ranks:
    """From the variables torch.distributed.run sets in each rank; one process when they are absent."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    return Ranks(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


def init(ranks: Ranks, device: torch.device, *, alone: bool = False) -> None:
    """Joins the run's process group: NCCL between GPUs, gloo on CPUs. One process gets a group of
    its own only when `alone` (FSDP needs a group even for one: `sharding = "fsdp"` on one GPU)."""
    if dist.is_initialized() or not (ranks.distributed or alone):
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    extra: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    if not ranks.distributed:
        extra.update(store=dist.HashStore(), rank=0, world_size=1)
    dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT, **extra)


def shutdown() -> None:
    """Leaves the process group and joins its threads, so none is alive when the interpreter exits (a
    gloo thread still running then can abort the process: see the import of torch.distributed.nn above).
    No final barrier: a rank whose peer failed must not wait here for it."""
    if not dist.is_initialized():
        return
    group = dist.group.WORLD
    dist.destroy_process_group()
    # Another holder of the group keeps its threads alive past this point (nothing in torch 2.13 can
    # join them but the group's destructor): say so, since the rank may then abort at exit.
    if sys.getrefcount(group) > 2:
        warnings.warn("the process group outlives destroy_process_group(): something still holds it, so "
                      "its threads may abort this process at exit", RuntimeWarning, stacklevel=2)


def die_with_launcher() -> None:
    """A rank exits when its launcher does, even when the launcher is killed with SIGKILL (which
    it cannot forward): Linux's parent-death signal. Elsewhere a no-op."""
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if not launcher or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != int(launcher):  # the launcher died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def gather(local: list[T], ranks: Ranks) -> list[T]:
    """Every rank's `local` list concatenated in rank order, on every rank (picklable items)."""
    return [item for part in gather_values(local, ranks) for item in part]


def gather_values(value: Any, ranks: Ranks) -> list[Any]:
    """One picklable value from each rank, in rank order, on every rank."""
    if not ranks.distributed:
        return [value]
    parts: list[Any] = [None] * ranks.world
    dist.all_gather_object(parts, value)
    return parts


def decide(flag: bool, ranks: Ranks) -> bool:
    """Rank 0's `flag` on every rank (whether to stop, for instance)."""
    if not ranks.distributed:
        return flag
    box = [flag]
    dist.broadcast_object_list(box, src=0)
    return bool(box[0])


def sum_floats(values: dict[str, float], ranks: Ranks) -> dict[str, float]:
    """Each value summed over the ranks (the same keys on every rank)."""
    if not ranks.distributed or not values:
        return dict(values)
    keys = sorted(values)
    device = _collective_device()
    total = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return dict(zip(keys, total.tolist(), strict=True))


def max_float(value: float, ranks: Ranks) -> float:
    if not dist.is_initialized():
        return value
    box = torch.tensor([float(value)], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return float(box.item())


def sum_gradients(params: Sequence[torch.nn.Parameter], ranks: Ranks) -> None:
    """Sums the gradients of `params` over the ranks in one all-reduce (a missing gradient counts as
    zero), so every rank holds the gradient of the whole batch's loss."""
    if not ranks.distributed:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
        offset += n


def broadcast_parameters(params: Sequence[torch.nn.Parameter], ranks: Ranks) -> None:
    """Rank 0's values of `params` on every rank (the LoRA initialisation, whatever each rank drew)."""
    if not ranks.distributed:
        return
    with torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src=0)


@contextlib.contextmanager
def main_first(ranks: Ranks) -> Iterator[None]:
    """Rank 0 runs the block first (building the tiny model, downloading into the shared cache),
    then the others, which find its result in place."""
    if ranks.distributed and not ranks.is_main:
        dist.barrier()
    yield
    if ranks.distributed and ranks.is_main:
        dist.barrier()


def _collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def record_rank_error(run_dir: Path, ranks: Ranks, error: str) -> None:
    """Leaves a failing rank's error where the launcher reads it (only rank 0 writes the event log)."""
    folder = Path(run_dir) / RANK_ERRORS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank-{ranks.rank}.txt").write_text(error)


def rank_errors(run_dir: Path) -> list[str]:
    folder = Path(run_dir) / RANK_ERRORS_DIR
    if not folder.is_dir():
        return []
    return [f"{path.stem}: {path.read_text().strip()}" for path in sorted(folder.glob("rank-*.txt"))]
