"""Sampling and training at the same time, with bounded staleness (`max_staleness = k >= 1`).

The trainer keeps up to k batches in its sampler process's hands while it updates. A batch is
submitted only when it can train within k versions of the policy that will sample it: the sampler
samples each batch with the newest adapter it has, every adapter it was sent before the batch
included, so a batch submitted while the trainer's policy is at version P, with q batches ahead of
it, trains at update P + 1 + q at the latest with a version of at least P. Keeping q <= k - 1 bounds
its staleness by k (AReaL's admission control: the sampler never generates what would be too stale).
`take` still checks every batch and drops one staler than k, counted and never trained: a batch
sampled before a resume, or by a sampler that had not loaded the newest adapter it was sent.

Batches are numbered from 1 in the order they are drawn; a batch's number seeds its sampling as the
step seeds the synchronous loop's, so a run that drops nothing samples its step-s batch with the
synchronous run's seeds (with older weights).
"""

from __future__ import annotations

import os
import shutil
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.data import example_id
from trainer.run.sampler_process import (
    SampledBatch,
    SamplerJob,
    SamplerPlacement,
    SamplerProcess,
    SamplerSpec,
)


@dataclass
class TakenBatch:
    """The batch a step trains on, the batches dropped before it, and how long the trainer waited."""

    batch: SampledBatch
    examples: list[dict]
    ids: list[str]
    dropped: list[SampledBatch] = field(default_factory=list)
    wait_s: float = 0.0
    queue_depth: int = 0  # batches submitted behind this one when its update started


def placements(device: Any, sampler_gpus: int) -> tuple[SamplerPlacement, tuple[int, ...] | None]:
    """(the sampler's placement, the trainer's cores): on a CPU the process's cores split in two (the
    sampler takes the second half), on CUDA the sampler takes the last `sampler_gpus` visible GPUs or,
    with 0, shares the trainer's."""
    if device.type == "cuda":
        import torch

        if not sampler_gpus:
            return SamplerPlacement(None, None, str(device)), None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
        if len(ids) <= sampler_gpus:
            raise RuntimeError(f"sampler_gpus is {sampler_gpus} but the run sees {len(ids)} GPU(s): the trainer "
                               "needs one of its own; lower sampler_gpus (0 shares the trainer's GPU).")
        return SamplerPlacement(None, ",".join(ids[-sampler_gpus:]), "cuda:0"), None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return SamplerPlacement(None, None, "cpu"), None
    half = len(cores) // 2
    return SamplerPlacement(tuple(cores[-half:]), None, "cpu"), tuple(cores[:-half])


class AsyncPipeline:
    """The trainer's side of the asynchronous pipeline: draws the batches, keeps at most k in flight,
    hands each new adapter over and takes the batches back in order."""

    def __init__(self, parts: Any, run_dir: Path, *, first_batch: int = 1, dropped_in_flight: int = 0,
                 process: SamplerProcess | None = None):
        """`process`: the sampler's handle (by default a SamplerProcess built from `parts`)."""
        c = parts.config
        self.parts = parts
        self.k = c.max_staleness
        self.run_dir = run_dir
        self.next_index = first_batch
        self.dropped_in_flight = dropped_in_flight  # batches a resumed run's last attempt left unsampled
        self.jobs: dict[int, SamplerJob] = {}
        self.in_flight: deque[int] = deque()
        placement, self.trainer_cores = placements(parts.device, c.sampler_gpus)
        self.process = process or SamplerProcess(SamplerSpec(
            config=c, model_path=parts.model_path, program=parts.program.program,
            teachers={name: t.program for name, t in parts.teachers.items()}, prompt_format=parts.prompt_format,
            placement=placement, run_dir=str(run_dir)))
        self._saved_cores: set[int] | None = None
        self._saved_threads: int | None = None

    # --- its life ------------------------------------------------------------------------------
    def start(self, version: int) -> None:
        """Starts the sampler process; a resumed run hands it the restored adapter (`version` > 0)."""
        self.process.start()
        if self.trainer_cores:
            import torch

            self._saved_cores, self._saved_threads = os.sched_getaffinity(0), torch.get_num_threads()
            os.sched_setaffinity(0, self.trainer_cores)
            torch.set_num_threads(len(self.trainer_cores))
        if version:
            self.publish(version)

    def close(self) -> None:
        self.process.close()
        if self._saved_cores is not None:
            import torch

            os.sched_setaffinity(0, self._saved_cores)
            torch.set_num_threads(self._saved_threads or 1)
            self._saved_cores = None

    @property
    def batches_drawn(self) -> int:
        return self.next_index - 1

    # --- a step ---------------------------------------------------------------------------------
    def take(self, updates: int, remaining_steps: int) -> TakenBatch:
        """The batch update `updates + 1` trains on (`updates`: the policy's version now), with the
        batches dropped as too stale on the way; then fills the sampler's queue for the steps after."""
        started = time.perf_counter()
        dropped = []
        while True:
            if not self.in_flight:
                self._submit()
            batch = self.process.receive()
            self.in_flight.popleft()
            job = self.jobs.pop(batch.index)
            if updates - batch.policy_version <= self.k:
                break
            dropped.append(batch)
        wait_s = time.perf_counter() - started
        while len(self.in_flight) < min(self.k, remaining_steps - 1):
            self._submit()
        return TakenBatch(batch, job.examples, job.ids, dropped, wait_s, len(self.in_flight))

    def _submit(self) -> None:
        examples = self.parts.stream.next_batch(self.parts.config.examples_per_step)
        job = SamplerJob(self.next_index, examples, [example_id(e, i) for i, e in enumerate(examples)])
        self.jobs[job.index] = job
        self.in_flight.append(job.index)
        self.next_index += 1
        self.process.submit(job)

    def publish(self, version: int) -> tuple[float, float]:
        """Saves the adapter of policy version `version` and sends it to the sampler; returns the
        save's wall-clock (start, end). Older folders go once the sampler can no longer ask for them."""
        start = time.time()
        path = self.parts.updater.save_adapter(self.run_dir / "adapters" / f"v{version}")
        self.process.publish(path, version)
        stale = self.run_dir / "adapters" / f"v{version - self.k - 3}"
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        return start, time.time()

    def sampler_busy_s(self, start: float, end: float) -> float:
        return self.process.sampler_busy_s(start, end)
