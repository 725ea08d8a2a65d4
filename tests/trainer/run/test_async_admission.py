"""The asynchronous pipeline's bookkeeping without a model: which batches it keeps in the sampler's
hands, which it drops as too stale, and where each process is placed. A stand-in sampler replays the
policy versions a real one would have sampled with (one that lagged behind the adapters it was sent)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from trainer.run.async_pipeline import AsyncPipeline, placements
from trainer.run.sampler_process import SampledBatch


class ReplayingSampler:
    """Answers the batches in the order they were submitted, each sampled by the version `versions`
    names for its number (default: the newest adapter published before it was submitted)."""

    def __init__(self, versions: dict[int, int] | None = None):
        self.versions = versions or {}
        self.submitted: list[int] = []
        self.published: list[int] = []
        self.answered = 0

    def submit(self, job):
        self.submitted.append(job.index)

    def publish(self, path, version):
        self.published.append(version)

    def receive(self) -> SampledBatch:
        index = self.submitted[self.answered]
        self.answered += 1
        version = self.versions.get(index, self.published[-1] if self.published else 0)
        return SampledBatch(index, [], {}, version, 0.0, 0.0)

    def start(self):
        pass

    def close(self):
        pass


class Stream:
    def __init__(self):
        self.drawn = 0

    def next_batch(self, n):
        self.drawn += n
        return [{"question": f"q{self.drawn - n + i}"} for i in range(n)]


def pipeline(k: int, sampler: ReplayingSampler, tmp_path) -> AsyncPipeline:
    config = SimpleNamespace(max_staleness=k, sampler_gpus=0, examples_per_step=2)
    parts = SimpleNamespace(config=config, device=torch.device("cpu"), stream=Stream(),
                            updater=SimpleNamespace(save_adapter=lambda path: path))
    return AsyncPipeline(parts, tmp_path, process=sampler)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_it_keeps_at_most_k_batches_in_flight_and_none_for_after_the_last_step(tmp_path, k):
    sampler = ReplayingSampler()
    pipe = pipeline(k, sampler, tmp_path)
    steps = 6
    for update in range(steps):
        taken = pipe.take(update, steps - update)
        assert not taken.dropped and update - taken.batch.policy_version <= k
        assert taken.queue_depth == len(pipe.in_flight) == min(k, steps - update - 1)
        if update + 1 < steps:
            pipe.publish(update + 1)
    assert sampler.submitted == list(range(1, steps + 1))  # no batch drawn that no step trains


def test_a_batch_staler_than_k_is_dropped_counted_and_the_next_one_trains(tmp_path):
    # The sampler sampled batches 2 and 3 with version 0 though version 2 was in its inbox (a lagging
    # engine): at update 2 batch 2 is 2 behind (> k = 1), so it is dropped; batch 3 is no better.
    sampler = ReplayingSampler(versions={2: 0, 3: 0})
    pipe = pipeline(1, sampler, tmp_path)
    assert pipe.take(0, 5).batch.index == 1
    pipe.publish(1)
    second = pipe.take(1, 4)
    assert second.batch.index == 2 and not second.dropped  # 1 - 0 <= 1
    pipe.publish(2)
    third = pipe.take(2, 3)
    assert [b.index for b in third.dropped] == [3] and third.batch.index == 4
    assert third.batch.policy_version == 2 and pipe.batches_drawn == 5  # batch 5 samples for the last step


def test_a_cpu_run_splits_its_cores_between_the_sampler_and_the_trainer():
    cores = sorted(os.sched_getaffinity(0))
    sampler, trainer = placements(torch.device("cpu"), 0)
    if len(cores) < 2:
        assert sampler.cores is None and trainer is None
        return
    assert set(sampler.cores) | set(trainer) == set(cores) and not set(sampler.cores) & set(trainer)
    assert len(sampler.cores) == len(cores) // 2 and sampler.device == "cpu"
