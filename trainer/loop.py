"""The training loop: one step = sample examples -> rollouts by strategy -> rewards -> propagation ->
groups -> advantages -> LoRA update -> metrics (DESIGN.md "How a run flows", step 3).

Every random choice of a step is seeded from (config.seed, step), so a run resumed from a
checkpoint replays the remaining steps exactly; the checkpoint still records the RNG states.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainer import distributed
from trainer.checkpoint import latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from trainer.cli import FINAL_ADAPTER_DIR
from trainer.config import ConfigError, RunConfig
from trainer.data import ExampleStream, example_id
from trainer.distributed import SINGLE, Ranks
from trainer.failures import raise_if_mostly_errors
from trainer.gate import StepGate
from trainer.grouping import ModuleGroup, assign_advantages
from trainer.policy import PolicyExample, PolicyUpdater, UpdateConfig, load_policy_model, lora_parameters
from trainer.programs import get_program
from trainer.prompts import FormattedProgram, resolve_prompt_format
from trainer.reporting import Reporter
from trainer.rewards import get_reward
from trainer.run_setup import (
    load_examples,
    resolve_device,
    resolve_dtype,
    resolve_gradient_checkpointing,
    resolve_model_path,
    visible_gpus,
)
from trainer.sampling import (
    fork_on_first,
    independent_sampling,
    round_robin,
)
from trainer.scoring import BatchScorer
from trainer.sharding import Lockstep, shard_base_weights
from trainer.telemetry import SystemSampler
from trainer.trajectory import Trajectory, jsonable

KEEP_CHECKPOINTS = 3


@dataclass
class StepResult:
    metrics: dict[str, float]
    trajectories: list[Trajectory]
    groups: list[ModuleGroup]


class Trainer:
    """Runs a `RunConfig` end to end, reporting through a `Reporter`, checkpointing into `run_dir`."""

    def __init__(self, config: RunConfig, run_dir: str | Path, reporter: Reporter, *, attempt: int = 1,
                 model_cache_dir: str | Path | None = None, ranks: Ranks = SINGLE, program: Any = None):
        """`program`: an `AgentProgram` instance to train instead of the registered `config.program`
        (cohort.dspy trains the DSPy program it was handed; `config.program` then only names it)."""
        self.config = config
        self.ranks = ranks
        self.run_dir = Path(run_dir)
        self.reporter = reporter
        self.attempt = attempt
        self.program = program if program is not None else get_program(config.program, **self._program_options())
        config.check_program_agents(list(self.program.agents))
        if config.prompt_optimizer != "none":
            if not getattr(self.program, "optimizes_prompts", False):
                raise ConfigError("prompt_optimizer", f"program {config.program!r} is not a DSPy program; its prompts "
                                  "cannot be optimized first: leave prompt_optimizer at 'none'.")
            if ranks.distributed:
                raise ConfigError("prompt_optimizer", "optimizing prompts first runs in one process: set "
                                  "num_processes to 1, or optimize first and pass the result as program_state.")
        if config.program_state and getattr(self.program, "state_path", None) != config.program_state:
            raise ConfigError("program_state", f"program {config.program!r} does not load a saved DSPy state; "
                              "leave program_state empty for it.")
        self.reward_fns = {spec.name: get_reward(spec.name, **spec.params) for spec in config.rewards}
        self.teachers = {name: get_program(name, **self._program_options()) for name in config.teacher_rollouts}
        for name, teacher in self.teachers.items():
            if len(teacher.agents) != len(self.program.agents):
                raise ValueError(f"teacher {name!r} has agents {list(teacher.agents)}, the student "
                                 f"{list(self.program.agents)}: a teacher must have one module per student module.")
        self.scorer = BatchScorer(config, self.reward_fns, self.program.agents,
                                  {name: t.agents for name, t in self.teachers.items()})
        train, dev = load_examples(config, self.program)
        if hasattr(self.program, "observe_examples"):
            self.program.observe_examples(train)  # e.g. the classifier's label set
        self.dev_examples = dev
        self.stream = ExampleStream(train, seed=config.seed)
        self.device = resolve_device(config, ranks)
        distributed.init(ranks, self.device, alone=config.sharding == "fsdp")
        self.system = SystemSampler(self.device)  # system/* metrics of every step
        with distributed.main_first(ranks):  # one rank builds or downloads, the others find it in place
            model_path = resolve_model_path(config, self.program, model_cache_dir)
        self.model, self.tokenizer = load_policy_model(
            model_path, device=self.device, dtype=resolve_dtype(config, self.device),
            gradient_checkpointing=resolve_gradient_checkpointing(config, self.device), r=config.lora_r,
            alpha=config.lora_alpha, dropout=config.lora_dropout, targets=config.lora_targets, seed=config.seed)
        if config.sharding == "fsdp":
            distributed.broadcast_parameters(list(lora_parameters(self.model).values()), ranks)  # one adapter
            shard_base_weights(self.model.get_base_model(), ranks, self.device)
        try:
            self.prompt_format = resolve_prompt_format(self.tokenizer, config.prompt_format)
        except ValueError as exc:
            raise ConfigError("prompt_format", str(exc)) from None
        # From here on every prompt is rendered for this tokenizer (chat template or raw text).
        self.program = FormattedProgram(self.program, self.tokenizer, self.prompt_format)
        self.teachers = {name: FormattedProgram(t, self.tokenizer, self.prompt_format)
                         for name, t in self.teachers.items()}
        self.updater = PolicyUpdater(self.model, self.tokenizer, self._update_config(), ranks=ranks)
        self.backend = self._make_backend(model_path)
        if config.sharding == "fsdp":
            self.backend.lockstep = Lockstep(ranks)
        self.step = 0
        self._adapter_version = 0  # adapters handed to a sampler with its own weights (vLLM)
        self.gate = StepGate.from_env()
        self._samples: dict[tuple[str, str], Any] = {}

    # --- setup helpers -------------------------------------------------------------------------
    def _program_options(self) -> dict[str, Any]:
        options = {"corpus_path": self.config.corpus_data, "state_path": self.config.program_state}
        return {k: v for k, v in options.items() if v}

    def _update_config(self) -> UpdateConfig:
        c = self.config
        total_updates = c.steps * c.optimizer_steps_per_step()
        return UpdateConfig(
            learning_rate=c.learning_rate, weight_decay=c.weight_decay, eps_low=c.clip_eps_low,
            eps_high=c.clip_eps_high, beta=c.kl_beta, aggregation=c.loss_aggregation, temperature=c.temperature,
            micro_batch_size=c.micro_batch_size, gradient_accumulation_steps=c.gradient_accumulation_steps,
            num_iterations=c.ppo_epochs, max_grad_norm=c.max_grad_norm,
            scheduler=c.lr_scheduler, warmup_steps=c.warmup_steps,
            total_steps=total_updates, max_context_length=c.max_context_length, seed=c.seed,
            dr_grpo_max_len=c.max_new_tokens, importance_sampling_correction=c.importance_sampling_correction,
            importance_sampling_cap=c.importance_sampling_cap, sampler_is_policy=c.backend == "hf",
        )

    def _make_backend(self, model_path: str):
        from trainer.backends import get_backend

        c = self.config
        if c.backend == "vllm":
            dtype = str(resolve_dtype(c, self.device)).removeprefix("torch.")
            try:
                return get_backend("vllm", model_path=model_path, tokenizer=self.tokenizer, max_lora_rank=c.lora_r,
                                   seed=c.seed, dtype=dtype, gpu_memory_utilization=c.vllm_gpu_memory_utilization,
                                   max_model_len=self._engine_max_model_len(), enable_sleep_mode=c.vllm_enable_sleep_mode)
            except ValueError as exc:
                if "sleep mode" in str(exc):
                    raise ConfigError("vllm_enable_sleep_mode", str(exc)) from None
                raise
        from trainer.backends.hf import default_generate_rows

        rows = c.hf_generate_rows or default_generate_rows(self.model, c.max_new_tokens)
        return get_backend("hf", model=self.model, tokenizer=self.tokenizer, batch_size=rows)

    def _engine_max_model_len(self) -> int:
        """vllm_max_model_len, else max_context_length within the model's own positions."""
        c = self.config
        if c.vllm_max_model_len:
            return c.vllm_max_model_len
        positions = getattr(self.model.get_base_model().config, "max_position_embeddings", None)
        return min(c.max_context_length, positions or c.max_context_length)

    # --- sampling --------------------------------------------------------------------------------
    def _generate_fn(self, step: int, *, temperature: float | None = None):
        """`generate(agent, prompts)` for the samplers; remembers token ids and log-probs per sample."""
        counter = iter(range(1_000_000))
        c = self.config

        def generate(agent: str, prompts: list[str]) -> list[str]:
            seed = (c.seed * 1_000_003 + step * 1_009 + next(counter) + self.ranks.rank * 7_919) % (2**31)
            samples = self.backend.generate(
                list(prompts), 1, temperature=temperature or c.temperature, top_p=c.top_p, top_k=c.top_k or None,
                max_new_tokens=c.max_new_tokens, seed=seed)
            texts = []
            for prompt, (sample,) in zip(prompts, samples, strict=True):
                self._samples[(prompt, sample.text)] = sample
                texts.append(sample.text)
            return texts

        return generate

    def _rollouts(self, examples: list[dict], ids: list[str], step: int) -> list[Trajectory]:
        c = self.config
        generate = self._generate_fn(step)
        if c.strategy == "mhgpo" and c.sampling == "is":
            return independent_sampling(self.program, examples, group_size=c.group_size, generate=generate,
                                        example_ids=ids)
        if c.strategy == "mhgpo" and c.sampling == "rr":
            return round_robin(self.program, examples, group_size=c.group_size, probs=c.fork_probabilities,
                               generate=generate, rng=np.random.default_rng([c.seed, step, 1]), example_ids=ids)
        student = c.rollouts_per_example - sum(c.teacher_rollouts.values())
        trajectories = fork_on_first(self.program, examples, group_size=student, generate=generate, example_ids=ids)
        for name, count in c.teacher_rollouts.items():
            # MMGRPO teacher mixture (Algorithm 2, SampleTeacherRollouts): same LM, the teacher's prompts.
            for traj in fork_on_first(self.teachers[name], examples, group_size=count, generate=generate,
                                      example_ids=ids):
                traj.teacher = name
                traj.trajectory_id = f"{name}:{traj.trajectory_id}"
                for call in traj.calls:
                    call.call_id = f"{name}:{call.call_id}" if call.call_id else call.call_id
                    call.parent_id = f"{name}:{call.parent_id}" if call.parent_id else call.parent_id
                trajectories.append(traj)
        return trajectories

    def _policy_examples(self, groups: Sequence[ModuleGroup], local_ids: set[str]) -> list[PolicyExample]:
        """The members this process sampled (all of them in a one-process run): a rank trains on the
        calls whose token ids and log-probs it holds."""
        examples = []
        for group in groups:
            for member in group.members:
                if member.trajectory.example_id not in local_ids:
                    continue
                call = member.call
                sample = self._samples.get((call.prompt, call.completion))
                examples.append(PolicyExample(
                    call.prompt, call.completion, float(member.advantage or 0.0),
                    completion_ids=sample.token_ids if sample is not None else None,
                    sampler_logprobs=sample.logprobs if sample is not None else None))
        return examples

    # --- one step --------------------------------------------------------------------------------
    def train_step(self, step: int) -> StepResult:
        started = time.perf_counter()
        self.system.start_step()
        self._samples.clear()
        examples = self.stream.next_batch(self.config.examples_per_step)  # the whole batch, on every rank
        ids = [example_id(e, i) for i, e in enumerate(examples)]
        mine = self.ranks.shard(ids)
        by_id = dict(zip(ids[mine], examples[mine], strict=True))
        local = self.scorer.score(self._rollouts(examples[mine], ids[mine], step), by_id)
        self._finish_sampling()
        rank_sampling_s = time.perf_counter() - started
        # Everything below sees the whole batch, in example order, on every rank.
        trajectories = distributed.gather(local, self.ranks)
        raise_if_mostly_errors(trajectories, f"step {step}")  # a bug, not bad luck: fail the run
        sampled = time.perf_counter()
        self.system.sampled()
        groups, rewards, advantages = self.scorer.groups_and_advantages(trajectories, step)
        assign_advantages(groups, advantages)
        batch = self._policy_examples(groups, set(by_id))
        # Every rank joins the update when the whole batch has calls, even with none of its own.
        sleep = getattr(self.backend, "sleep", None)
        if sleep is not None:
            sleep()  # vLLM's sleep mode: the engine gives the GPU to the update until it samples again
        update_stats = self.updater.update(batch) if any(g.members for g in groups) else {}
        if self.config.backend == "vllm" and batch:
            self._publish_adapter()
        system = self.system.finish()
        metrics = self.scorer.metrics(trajectories, groups, rewards, advantages, update_stats)
        metrics.update(system)
        metrics.update({"time/step_s": time.perf_counter() - started, "time/sampling_s": sampled - started,
                        "time/update_s": update_stats.get("seconds", 0.0)})
        if self.ranks.distributed:
            metrics.update(self._rank_timings(rank_sampling_s, update_stats.get("rank_seconds", 0.0)))
        return StepResult(metrics, trajectories, groups)

    def _rank_timings(self, sampling_s: float, update_s: float) -> dict[str, float]:
        """Each rank's own sampling and update time (before it waited for the others), so a straggler
        shows in the run page's System section."""
        out = {}
        for rank, (sample, update) in enumerate(distributed.gather_values((sampling_s, update_s), self.ranks)):
            out[f"system/rank{rank}/sample_s"] = sample
            out[f"system/rank{rank}/update_s"] = update
        return out

    def _finish_sampling(self) -> None:
        finish = getattr(self.backend, "finish_sampling", None)
        if finish is not None:
            finish()

    def evaluate(self, step: int) -> dict[str, float]:
        """Mean rewards on the first `eval_size` dev examples, one rollout each (each rank its shard)."""
        examples = self.dev_examples[: self.config.eval_size]
        if not examples:
            return {}
        ids = [example_id(e, i) for i, e in enumerate(examples)]
        mine = self.ranks.shard(ids)
        trajectories = fork_on_first(self.program, examples[mine], group_size=1,
                                     generate=self._generate_fn(10_000_000 + step), example_ids=ids[mine])
        local = self.scorer.score(trajectories, dict(zip(ids[mine], examples[mine], strict=True)))
        self._finish_sampling()
        scored = distributed.gather(local, self.ranks)
        raise_if_mostly_errors(scored, f"the evaluation after step {step}")
        out = {"eval/reward/mean": float(np.mean([t.reward for t in scored if t.reward is not None] or [math.nan]))}
        for name in self.scorer.component_names():
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
        if not (self.ranks.is_main or self.updater.sharded):
            return None
        policy_state = self.updater.state_dict()
        if not self.ranks.is_main:
            return None
        path = save_checkpoint(self.checkpoint_root, self.step, policy_state=policy_state,
                               trainer_state={"step": self.step, "cursor": self.stream.cursor, "attempt": self.attempt},
                               config=self.config.to_dict())
        prune_checkpoints(self.checkpoint_root, KEEP_CHECKPOINTS)
        return path

    def resume(self) -> int:
        """Load the newest complete checkpoint; returns its step (0 when there is none)."""
        path = latest_checkpoint(self.checkpoint_root)
        if path is None:
            return 0
        policy_state, trainer_state = load_checkpoint(path)
        self.updater.load_state_dict(policy_state)
        self.stream.cursor = int(trainer_state["cursor"])
        self.step = int(trainer_state["step"])
        if self.config.backend == "vllm":
            self._publish_adapter()
        return self.step

    def _publish_adapter(self) -> None:
        """Hands the current LoRA weights to a sampler that holds its own copy of the model (vLLM).
        Versions count this engine's adapters, not the updater's steps: vLLM caches adapters by id,
        and a resumed run's fresh engine starts from the restored adapter as version 1."""
        self._adapter_version += 1
        path = self.updater.save_adapter(self.run_dir / "adapters" / f"v{self._adapter_version}")
        self.backend.update_adapter(path, version=self._adapter_version)
        stale = self.run_dir / "adapters" / f"v{self._adapter_version - 2}"
        if stale.is_dir():  # the engine has loaded the newer ones; keep the disk bounded
            import shutil

            shutil.rmtree(stale, ignore_errors=True)

    def close(self) -> None:
        """Stops what the trainer started beside itself (vLLM's engine process)."""
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    def run(self, *, resume: bool = False, stop_after: int | None = None) -> str:
        """Train to `config.steps` (or `stop_after` steps, for tests); returns the final state."""
        c = self.config
        if resume:
            self.resume()
        self.reporter.status("running", attempt=self.attempt, step=self.step, total_steps=c.steps,
                             gpus=visible_gpus(self.device, self.ranks), processes=self.ranks.world)
        main = self.ranks.is_main
        try:
            if c.prompt_optimizer != "none":  # phase 1 (BetterTogether); a resumed run reloads its result
                from trainer.dspy.prompt_phase import run_prompt_phase

                run_prompt_phase(self)
            if c.eval_before and self.step == 0:  # the program before its weights train, as step 0
                self.reporter.step(jsonable({"attempt": self.attempt, "step": 0, "metrics": self.evaluate(0),
                                             "rollouts": [], "groups": []}))
            while self.step < c.steps:
                if main:
                    self.gate.wait_for(self.step + 1, self.reporter.should_stop)
                # Rank 0 reads the STOP file; every rank stops at the same step boundary.
                if distributed.decide(main and self.reporter.should_stop(), self.ranks):
                    self.reporter.status("cancelled", step=self.step)
                    return "cancelled"
                if stop_after is not None and self.step >= stop_after:
                    return "stopped"
                result = self.train_step(self.step + 1)
                self.step += 1
                if c.eval_every and (self.step % c.eval_every == 0 or self.step == c.steps):
                    result.metrics.update(self.evaluate(self.step))
                # Plain JSON for every reporter: NaN (a mean over nothing) becomes null.
                self.reporter.step(jsonable({
                    "attempt": self.attempt, "step": self.step, "metrics": result.metrics,
                    "rollouts": [t.to_dict() for t in result.trajectories],
                    "groups": [g.to_dict() for g in result.groups],
                }))
                if c.checkpoint_every and (self.step % c.checkpoint_every == 0 or self.step == c.steps):
                    self.save()
        except Exception as exc:
            self.reporter.status("failed", step=self.step, error=f"{exc.__class__.__name__}: {exc}")
            raise
        # the trained weights on their own, for whoever uses the model next (vLLM, PEFT, cohort.dspy),
        # here or on another machine: they name the run's model id, not this machine's model folder
        from trainer.models import adapter_readme

        self.updater.save_final_adapter(self.run_dir / FINAL_ADAPTER_DIR, write=main, base_model=c.model,
                                        readme=adapter_readme(c))
        self.reporter.status("succeeded", step=self.step)
        return "succeeded"
