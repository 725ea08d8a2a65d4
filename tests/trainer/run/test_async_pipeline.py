"""The asynchronous pipeline (`max_staleness`) on the tiny model: `max_staleness = 0` is the synchronous
loop recorded before the pipeline existed; with k >= 1 a sampler process samples ahead, no trained
batch is more than k versions stale, both processes' spans reach the step events, a resume drops and
counts the batches in flight, and a sampler killed with SIGKILL fails the run saying so."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from tests.trainer.run.sync_golden import assert_matches_golden, cpu_capability, run_numbers
from tests.trainer.run.test_loop import ListReporter, run, toy_config
from trainer.run.sampler_process import SAMPLER_PID_FILE, SamplerDied

pytestmark = pytest.mark.usefixtures("torch_setup")


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def test_max_staleness_0_trains_exactly_as_the_synchronous_loop_did(tmp_path, model_cache):
    numbers = run_numbers("hf", tmp_path / "run", model_cache, max_staleness=0)
    assert numbers["cpu"] == cpu_capability()
    assert_matches_golden(numbers, "hf")


def sampler_alive(run_dir: Path) -> bool:
    return (run_dir / SAMPLER_PID_FILE).exists()


@pytest.mark.parametrize("k", [1, 2])
def test_no_trained_batch_is_staler_than_max_staleness(tmp_path, model_cache, k):
    trainer, reporter, state = run(toy_config(steps=5, max_staleness=k, checkpoint_every=0), tmp_path, f"k{k}",
                                   model_cache=model_cache)
    assert state == "succeeded" and [e["step"] for e in reporter.events] == [1, 2, 3, 4, 5]
    assert not sampler_alive(tmp_path / f"k{k}") and trainer.pipeline is None
    loads = []
    for event in reporter.events:
        metrics, step = event["metrics"], event["step"]
        versions = {r["policy_version"] for r in event["rollouts"]}
        assert len(versions) == 1  # one policy version samples a whole batch
        (version,) = versions
        assert 0 <= step - 1 - version <= k  # trained at update t = step - 1, sampled by version v
        assert metrics["pipeline/staleness/max"] == metrics["pipeline/staleness/mean"] == step - 1 - version
        assert metrics["pipeline/dropped_stale"] == 0 and metrics["pipeline/dropped_in_flight"] == 0
        assert 0 <= metrics["pipeline/queue_depth"] <= min(k, 5 - step)
        assert 0 <= metrics["pipeline/trainer_wait_share"] <= 1 and 0 <= metrics["pipeline/sampler_wait_share"] <= 1
        # the sampler process's own span of this batch, and the adapters it loaded before sampling it
        generated = [s for s in event["spans"] if s["lane"] == "sampler"]
        assert len(generated) == 1 and generated[0]["policy_version"] == version
        assert f"for update {step} with version {version}" in generated[0]["name"]
        loads += [s for s in event["spans"] if s["lane"] == "adapter" and s["name"].startswith("load")]
        saves = [s for s in event["spans"] if s["lane"] == "adapter" and s["name"].startswith("save")]
        assert [s["name"] for s in saves] == ([f"save adapter v{step}"] if step < 5 else [])
        assert all(s["start"] <= s["end"] for s in event["spans"])
    # The batch of step k + 2 onwards cannot be sampled by version 0: a trained adapter reached the sampler.
    assert loads and all(s["name"].startswith("load adapter v") for s in loads)
    # The batches were drawn and seeded as the synchronous loop's: the same examples at every step.
    _, sync, _ = run(toy_config(steps=5, checkpoint_every=0), tmp_path, f"sync{k}", model_cache=model_cache)
    for pipelined, synchronous in zip(reporter.events, sync.events, strict=True):
        assert [r["example_id"] for r in pipelined["rollouts"]] == [r["example_id"] for r in synchronous["rollouts"]]


class KillsTheSampler(ListReporter):
    """Kills the sampler process with SIGKILL when step 1 is reported."""

    def __init__(self, run_dir: Path):
        super().__init__()
        self.run_dir = run_dir

    def step(self, event):
        super().step(event)
        if event["step"] == 1:
            os.kill(int((self.run_dir / SAMPLER_PID_FILE).read_text()), signal.SIGKILL)


def test_a_sampler_killed_with_sigkill_fails_the_run_saying_so(tmp_path, model_cache):
    reporter = KillsTheSampler(tmp_path / "killed")
    with pytest.raises(SamplerDied, match="killed by SIGKILL"):
        run(toy_config(steps=4, max_staleness=1, checkpoint_every=0), tmp_path, "killed", model_cache=model_cache,
            reporter=reporter)
    state, info = reporter.statuses[-1]
    assert state == "failed" and "the sampler process" in info["error"] and "killed by SIGKILL" in info["error"]
    assert info["step"] in (1, 2)  # the batch it had sent before it died may still train
    assert not sampler_alive(tmp_path / "killed")


def test_cancel_ends_the_sampler_and_a_resume_drops_and_counts_the_batches_in_flight(tmp_path, model_cache):
    config = toy_config(steps=4, max_staleness=1, checkpoint_every=1)
    first = ListReporter(stop_after_step=2)
    trainer, first, state = run(config, tmp_path, "split", model_cache=model_cache, reporter=first)
    assert state == "cancelled" and [e["step"] for e in first.events] == [1, 2]
    assert not sampler_alive(tmp_path / "split")
    trainer_state = torch.load(tmp_path / "split" / "checkpoints" / "step-000002" / "trainer.pt", weights_only=False)
    assert trainer_state["batches"] == 3 and trainer_state["in_flight"] == 1  # batch 3 was being sampled

    _, second, state = run(config, tmp_path, "split", model_cache=model_cache, resume=True, attempt=2)
    assert state == "succeeded" and [e["step"] for e in second.events] == [3, 4]
    metrics = [e["metrics"] for e in second.events]
    assert [m["pipeline/dropped_in_flight"] for m in metrics] == [1, 0]
    # The restored adapter (version 2) samples the first batch after the resume: nothing staler.
    assert {r["policy_version"] for r in second.events[0]["rollouts"]} == {2}
    assert all(m["pipeline/staleness/max"] <= 1 for m in metrics)
