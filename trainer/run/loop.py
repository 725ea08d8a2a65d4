"""The training loop: one step = sample examples -> rollouts by strategy -> rewards -> propagation ->
groups -> advantages -> LoRA update -> metrics (docs/explanation/architecture.md "How a run flows", step 3).

The parts it trains are built from the config by `trainer.run.compose.build_run`; this module only
runs them. Every random choice of a step is seeded from (config.seed, step), so a run resumed from a
checkpoint replays the remaining steps exactly; the checkpoint still records the RNG states.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainer.algorithms.groups import ModuleGroup, assign_advantages
from trainer.config import RunConfig
from trainer.data import example_id
from trainer.policy import distributed
from trainer.policy.adapter_files import FINAL_ADAPTER_DIR
from trainer.policy.distributed import SINGLE, Ranks
from trainer.rollouts.failures import raise_if_mostly_errors
from trainer.rollouts.sampling import fork_on_first
from trainer.rollouts.trajectory import Trajectory, jsonable
from trainer.run.async_pipeline import AsyncPipeline
from trainer.run.checkpoint import latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from trainer.run.compose import RunParts, build_run
from trainer.run.pipeline import StepSpans, StepTimes, async_pipeline_metrics, sync_pipeline_metrics
from trainer.run.reporting import Reporter
from trainer.run.rollouts import StepSampler
from trainer.run.setup import visible_gpus
from trainer.run.token_details import StepTokenDetails

KEEP_CHECKPOINTS = 3


@dataclass
class Learned:
    """What a step's update made of its scored batch."""

    groups: list[ModuleGroup]
    rewards: Any
    advantages: Any
    batch: list[Any]  # the PolicyExamples it trained on
    updated: bool
    update_stats: dict[str, float]


@dataclass
class StepResult:
    metrics: dict[str, float]
    trajectories: list[Trajectory]
    groups: list[ModuleGroup]
    spans: StepSpans = field(default_factory=StepSpans)


class Trainer:
    """Runs a `RunConfig` end to end, reporting through a `Reporter`, checkpointing into `run_dir`.

    The run's parts are `self.parts` (`RunParts`: its model, program, updater, backend...), built by
    `build_run`, the composition root."""

    def __init__(self, config: RunConfig, run_dir: str | Path, reporter: Reporter, *, attempt: int = 1,
                 model_cache_dir: str | Path | None = None, ranks: Ranks = SINGLE, program: Any = None,
                 parts: RunParts | None = None, should_suspend: Callable[[], bool] | None = None):
        """`program`: an `AgentProgram` to train instead of the registered `config.program` (see
        `build_run`); `parts`: the run's parts, already built; `should_suspend`: whether the run was asked
        to suspend (checkpoint and end the attempt at a step boundary, to resume later), read on rank 0."""
        self.config = config
        self.ranks = ranks
        self.run_dir = Path(run_dir)
        self.reporter = reporter
        self.attempt = attempt
        self.should_suspend = should_suspend or (lambda: False)
        self.parts = parts or build_run(config, ranks=ranks, model_cache_dir=model_cache_dir, program=program)
        self.sampler = StepSampler(config, self.parts.backend, ranks)
        self.token_details = (StepTokenDetails(config, self.parts.tokenizer, self.parts.scorer.agents, ranks)
                              if config.token_details != "off" else None)
        self.step = 0
        self._adapter_version = 0  # adapters handed to a sampler with its own weights (vLLM)
        self.pipeline: AsyncPipeline | None = None  # the sampler process, while a max_staleness >= 1 run trains
        self._resumed_pipeline: dict[str, int] = {}

    # --- one step --------------------------------------------------------------------------------
    def train_step(self, step: int) -> StepResult:
        if self.pipeline is not None:
            return self._train_async_step(step)
        started, wall = time.perf_counter(), time.time()  # wall: the timeline's clock, shared by processes
        spans = StepSpans()
        self.parts.system.start_step()
        self.sampler.samples.clear()
        examples = self.parts.stream.next_batch(self.config.examples_per_step)  # the whole batch, on every rank
        ids = [example_id(e, i) for i, e in enumerate(examples)]
        mine = self.ranks.shard(ids)
        by_id = dict(zip(ids[mine], examples[mine], strict=True))
        local = self.parts.scorer.score(
            self.sampler.rollouts(self.parts.program, self.parts.teachers, examples[mine], ids[mine], step), by_id)
        self.sampler.finish()
        sampled_by = self.parts.updater.updates  # the policy version that sampled this batch
        for trajectory in local:
            trajectory.policy_version = sampled_by
        rank_sampling_s = time.perf_counter() - started
        # Everything below sees the whole batch, in example order, on every rank.
        trajectories = distributed.gather(local, self.ranks)
        raise_if_mostly_errors(trajectories, f"step {step}")  # a bug, not bad luck: fail the run
        sampled = time.perf_counter()
        spans.add("sampler", f"generate the batch for update {sampled_by + 1} with version {sampled_by}",
                  wall, wall + (sampled - started), policy_version=sampled_by)
        self.parts.system.sampled()
        sleep = getattr(self.parts.backend, "sleep", None)
        if sleep is not None:
            sleep()  # vLLM's sleep mode: the engine gives the GPU to the update until it samples again
        learned = self._learn(trajectories, set(by_id), step, spans, wall + (sampled - started))
        adapter_sync_s = 0.0  # a sampler that shares the trained weights (hf) needs no hand-over
        if self.config.backend == "vllm" and learned.batch:
            adapter_started, adapter_wall = time.perf_counter(), time.time()
            self._publish_adapter()
            adapter_sync_s = time.perf_counter() - adapter_started
            spans.add("adapter", f"save and load adapter v{self._adapter_version}", adapter_wall,
                      adapter_wall + adapter_sync_s)
        metrics_started = time.time()
        metrics = self._step_metrics(learned, trajectories, set(by_id))
        step_s = time.perf_counter() - started
        metrics.update({"time/step_s": step_s, "time/sampling_s": sampled - started,
                        "time/update_s": learned.update_stats.get("seconds", 0.0)})
        metrics.update(sync_pipeline_metrics(StepTimes(step_s, sampled - started, adapter_sync_s),
                                             sampled_by=[t.policy_version for t in trajectories],
                                             trainer_version=self.parts.updater.updates - int(learned.updated)))
        if self.ranks.distributed:
            metrics.update(self._rank_timings(rank_sampling_s, learned.update_stats.get("rank_seconds", 0.0)))
        spans.add("trainer", "metrics and token details", metrics_started, time.time())
        return StepResult(metrics, trajectories, learned.groups, spans)

    def _train_async_step(self, step: int) -> StepResult:
        """A step of the asynchronous pipeline: train on the batch the sampler process sampled ahead
        (at most max_staleness versions behind), hand it the new adapter, and time both lanes."""
        started, wall = time.perf_counter(), time.time()
        spans = StepSpans()
        self.parts.system.start_step()
        version = self.parts.updater.updates
        taken = self.pipeline.take(version, self.config.steps - step + 1)
        batch = taken.batch
        for lost in taken.dropped:
            spans.add("sampler", f"dropped: the batch sampled with version {lost.policy_version}, "
                      f"{version - lost.policy_version} versions behind", lost.start, lost.end,
                      policy_version=lost.policy_version)
        spans.add("sampler", f"generate the batch for update {version + 1} with version {batch.policy_version}",
                  batch.start, batch.end, policy_version=batch.policy_version)
        for load in batch.adapter_loads:
            spans.add("adapter", f"load adapter v{load['version']}", load["start"], load["end"])
        self.sampler.samples = batch.samples  # each call's token ids and log-probs, for the update
        by_id = dict(zip(taken.ids, taken.examples, strict=True))
        scoring = time.time()
        trajectories = self.parts.scorer.score(batch.trajectories, by_id)
        raise_if_mostly_errors(trajectories, f"step {step}")
        self.parts.system.sampled()
        spans.add("trainer", "score the rollouts", scoring, time.time())
        learned = self._learn(trajectories, set(by_id), step, spans, time.time())
        adapter_sync_s = 0.0
        if learned.updated and step < self.config.steps:  # the last update samples nothing more
            save_start, save_end = self.pipeline.publish(self.parts.updater.updates)
            spans.add("adapter", f"save adapter v{self.parts.updater.updates}", save_start, save_end)
            loads = [load["end"] - load["start"] for load in batch.adapter_loads]
            adapter_sync_s = (save_end - save_start) + (loads[-1] if loads else 0.0)
        metrics_started = time.time()
        metrics = self._step_metrics(learned, trajectories, set(by_id))
        step_s = time.perf_counter() - started
        metrics.update({"time/step_s": step_s, "time/sampling_s": batch.end - batch.start,
                        "time/update_s": learned.update_stats.get("seconds", 0.0)})
        metrics.update(async_pipeline_metrics(
            step_s=step_s, trainer_wait_s=taken.wait_s,
            sampler_busy_s=self.pipeline.sampler_busy_s(wall, wall + step_s),
            staleness=version - batch.policy_version, dropped=len(taken.dropped),
            dropped_in_flight=self.pipeline.dropped_in_flight, queue_depth=taken.queue_depth,
            adapter_sync_s=adapter_sync_s))
        self.pipeline.dropped_in_flight = 0  # reported once, at the first step after the resume
        spans.add("trainer", "metrics and token details", metrics_started, time.time())
        return StepResult(metrics, trajectories, learned.groups, spans)

    def _learn(self, trajectories: list[Trajectory], local_ids: set[str], step: int, spans: StepSpans,
               scored_at: float) -> Learned:
        """Groups, advantages and the policy update on a scored batch (MMGRPO Eq. 1, MHGPO, GDPO)."""
        groups, rewards, advantages = self.parts.scorer.groups_and_advantages(trajectories, step)
        assign_advantages(groups, advantages)
        batch = self.sampler.policy_examples(groups, local_ids)
        # Every rank joins the update when the whole batch has calls, even with none of its own.
        updated = any(g.members for g in groups)
        update_started = time.time()
        spans.add("trainer", "groups and advantages", scored_at, update_started)
        version = self.parts.updater.updates
        update_stats = self.parts.updater.update(batch) if updated else {}
        if updated:
            spans.add("trainer", f"update {version + 1}: old log-probs, forward and backward, optimizer steps",
                      update_started, time.time())
        return Learned(groups, rewards, advantages, batch, updated, update_stats)

    def _step_metrics(self, learned: Learned, trajectories: list[Trajectory], local_ids: set[str]) -> dict[str, float]:
        system = self.parts.system.finish()
        metrics = self.parts.scorer.metrics(trajectories, learned.groups, learned.rewards, learned.advantages,
                                            learned.update_stats)
        if self.token_details is not None:  # each call's tokens, and the tokens/... metrics
            metrics.update(self.token_details.attach(
                trajectories, learned.groups, learned.batch,
                self.parts.updater.last_token_details if learned.updated else [], self.sampler.samples, local_ids))
        metrics.update(system)
        return metrics

    def _rank_timings(self, sampling_s: float, update_s: float) -> dict[str, float]:
        """Each rank's own sampling and update time (before it waited for the others), so a straggler
        shows in the run page's System section."""
        out = {}
        for rank, (sample, update) in enumerate(distributed.gather_values((sampling_s, update_s), self.ranks)):
            out[f"system/rank{rank}/sample_s"] = sample
            out[f"system/rank{rank}/update_s"] = update
        return out

    def evaluate(self, step: int) -> dict[str, float]:
        """Mean rewards on the first `eval_size` dev examples, one rollout each (each rank its shard)."""
        examples = self.parts.dev_examples[: self.config.eval_size]
        if not examples:
            return {}
        ids = [example_id(e, i) for i, e in enumerate(examples)]
        mine = self.ranks.shard(ids)
        trajectories = fork_on_first(self.parts.program, examples[mine], group_size=1,
                                     generate=self.sampler.generate_fn(10_000_000 + step), example_ids=ids[mine])
        local = self.parts.scorer.score(trajectories, dict(zip(ids[mine], examples[mine], strict=True)))
        self.sampler.finish()
        scored = distributed.gather(local, self.ranks)
        raise_if_mostly_errors(scored, f"the evaluation after step {step}")
        out = {"eval/reward/mean": float(np.mean([t.reward for t in scored if t.reward is not None] or [math.nan]))}
        for name in self.parts.scorer.component_names():
            values = [t.rewards.get(name) for t in scored if t.rewards.get(name) is not None]
            out[f"eval/reward/{name}"] = float(np.mean(values)) if values else math.nan
        return out

    # --- the run -------------------------------------------------------------------------------
    @property
    def checkpoint_root(self) -> Path:
        return self.run_dir / "checkpoints"

    def save(self) -> Path | None:
        """Rank 0 writes the checkpoint (every rank holds the same adapter); with sharded weights every
        rank first helps gather it."""
        if not (self.ranks.is_main or self.parts.updater.sharded):
            return None
        policy_state = self.parts.updater.state_dict()
        if not self.ranks.is_main:
            return None
        trainer_state = {"step": self.step, "cursor": self.parts.stream.cursor, "attempt": self.attempt}
        if self.pipeline is not None:  # the batches drawn past this step are lost with the sampler on a resume
            trainer_state.update(batches=self.pipeline.batches_drawn, in_flight=len(self.pipeline.in_flight))
        path = save_checkpoint(self.checkpoint_root, self.step, policy_state=policy_state,
                               trainer_state=trainer_state, config=self.config.to_dict())
        prune_checkpoints(self.checkpoint_root, KEEP_CHECKPOINTS)
        return path

    def resume(self) -> int:
        """Load the newest complete checkpoint; returns its step (0 when there is none)."""
        path = latest_checkpoint(self.checkpoint_root)
        if path is None:
            return 0
        policy_state, trainer_state = load_checkpoint(path)
        self.parts.updater.load_state_dict(policy_state)
        self.parts.stream.cursor = int(trainer_state["cursor"])
        self.step = int(trainer_state["step"])
        if self.config.max_staleness:  # the new sampler process gets the restored adapter when it starts
            self._resumed_pipeline = {"first_batch": int(trainer_state.get("batches", self.step)) + 1,
                                      "dropped_in_flight": int(trainer_state.get("in_flight", 0))}
        elif self.config.backend == "vllm":
            self._publish_adapter()
        return self.step

    def _publish_adapter(self) -> None:
        """Hands the current LoRA weights to a sampler that holds its own copy of the model (vLLM).
        Versions count this engine's adapters, not the updater's steps: vLLM caches adapters by id,
        and a resumed run's fresh engine starts from the restored adapter as version 1."""
        self._adapter_version += 1
        path = self.parts.updater.save_adapter(self.run_dir / "adapters" / f"v{self._adapter_version}")
        self.parts.backend.update_adapter(path, version=self._adapter_version)
        stale = self.run_dir / "adapters" / f"v{self._adapter_version - 2}"
        if stale.is_dir():  # the engine has loaded the newer ones; keep the disk bounded
            shutil.rmtree(stale, ignore_errors=True)

    def close(self) -> None:
        """Stops what the trainer started beside itself (vLLM's engine process)."""
        close = getattr(self.parts.backend, "close", None)
        if close is not None:
            close()

    def run(self, *, resume: bool = False, stop_after: int | None = None) -> str:
        """Train to `config.steps` (or `stop_after` steps, for tests); returns the final state:
        "succeeded", "cancelled", "suspended" (a checkpoint of the current step is saved) or "stopped"."""
        c = self.config
        if resume:
            self.resume()
        self.reporter.status("running", attempt=self.attempt, step=self.step, total_steps=c.steps,
                             gpus=visible_gpus(self.parts.device, self.ranks), processes=self.ranks.world)
        main = self.ranks.is_main
        try:
            if c.prompt_optimizer != "none":  # phase 1 (BetterTogether); a resumed run reloads its result
                from trainer.dspy.prompt_phase import run_prompt_phase

                run_prompt_phase(self)
            if c.eval_before and self.step == 0:  # the program before its weights train, as step 0
                self.reporter.step(jsonable({"attempt": self.attempt, "step": 0, "metrics": self.evaluate(0),
                                             "rollouts": [], "groups": []}))
            if c.max_staleness and self.step < c.steps:
                # after a prompt phase: the sampler process samples with the prompts it chose
                self.pipeline = AsyncPipeline(self.parts, self.run_dir, **self._resumed_pipeline)
                self.pipeline.start(self.parts.updater.updates)
            first_step, saved_step = self.step, None
            while self.step < c.steps:
                # A suspend waits for one step of this attempt, so a job preempted again as soon as it
                # starts still moves on; a cancel does not wait.
                may_suspend = self.step > first_step
                if main:
                    ends_wait = ((lambda: self.reporter.should_stop() or self.should_suspend()) if may_suspend
                                 else self.reporter.should_stop)
                    self.parts.gate.named(self.run_dir.name).wait_for(self.step + 1, ends_wait)
                # Rank 0 reads the STOP and SUSPEND requests; every rank ends at the same step boundary.
                # Read once here: the second decide must tell the other ranks what the first one meant.
                stop = main and self.reporter.should_stop()
                suspend = main and may_suspend and not stop and self.should_suspend()
                if distributed.decide(stop or suspend, self.ranks):
                    if distributed.decide(stop, self.ranks):
                        self.reporter.status("cancelled", step=self.step)
                        return "cancelled"
                    if saved_step != self.step:
                        self.save()
                    self.reporter.status("suspended", attempt=self.attempt, step=self.step)
                    # The launcher stops every rank once one exits: the others wait here until rank 0
                    # has written its checkpoint and status.
                    distributed.gather_values(None, self.ranks)
                    return "suspended"
                if stop_after is not None and self.step >= stop_after:
                    return "stopped"
                result = self.train_step(self.step + 1)
                self.step += 1
                if c.eval_every and (self.step % c.eval_every == 0 or self.step == c.steps):
                    evaluated = time.time()
                    result.metrics.update(self.evaluate(self.step))
                    result.spans.add("sampler", "evaluate", evaluated, time.time())
                # Plain JSON for every reporter: NaN (a mean over nothing) becomes null.
                self.reporter.step(jsonable({
                    "attempt": self.attempt, "step": self.step, "metrics": result.metrics,
                    "rollouts": [t.to_dict() for t in result.trajectories],
                    "groups": [g.to_dict() for g in result.groups], "spans": result.spans.events(),
                }))
                if c.checkpoint_every and (self.step % c.checkpoint_every == 0 or self.step == c.steps):
                    self.save()
                    saved_step = self.step
        except Exception as exc:
            self.reporter.status("failed", step=self.step, error=f"{exc.__class__.__name__}: {exc}")
            raise
        finally:  # cancelled, pruned, failed or done: the sampler process ends with the loop
            if self.pipeline is not None:
                self.pipeline.close()
                self.pipeline = None
        # the trained weights on their own, for whoever uses the model next (vLLM, PEFT, cohort.dspy),
        # here or on another machine: they name the run's model id, not this machine's model folder
        from trainer.models import adapter_readme

        self.parts.updater.save_final_adapter(self.run_dir / FINAL_ADAPTER_DIR, write=main, base_model=c.model,
                                        readme=adapter_readme(c))
        self.reporter.status("succeeded", step=self.step)
        return "succeeded"
