"""A step's rollouts: the sampling strategy the config names, run on the run's backend, with the token
ids and log-probs of every sample kept for the update that follows."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from trainer.algorithms.groups import ModuleGroup
from trainer.config import RunConfig
from trainer.policy.batching import PolicyExample
from trainer.policy.distributed import Ranks
from trainer.rollouts.sampling import fork_on_first, independent_sampling, round_robin
from trainer.rollouts.trajectory import Trajectory


class StepSampler:
    """Samples a step's rollouts and remembers each sample by (prompt, completion)."""

    def __init__(self, config: RunConfig, backend: Any, ranks: Ranks):
        self.config = config
        self.backend = backend
        self.ranks = ranks
        self.samples: dict[tuple[str, str], Any] = {}

    def generate_fn(self, step: int, *, temperature: float | None = None) -> Callable[[str, list[str]], list[str]]:
        """`generate(agent, prompts)` for the samplers, seeded by (seed, step, call, rank)."""
        counter = iter(range(1_000_000))
        c = self.config

        def generate(agent: str, prompts: list[str]) -> list[str]:
            seed = (c.seed * 1_000_003 + step * 1_009 + next(counter) + self.ranks.rank * 7_919) % (2**31)
            samples = self.backend.generate(
                list(prompts), 1, temperature=temperature or c.temperature, top_p=c.top_p, top_k=c.top_k or None,
                max_new_tokens=c.max_new_tokens, seed=seed)
            texts = []
            for prompt, (sample,) in zip(prompts, samples, strict=True):
                self.samples[(prompt, sample.text)] = sample
                texts.append(sample.text)
            return texts

        return generate

    def rollouts(self, program: Any, teachers: Mapping[str, Any], examples: list[dict], ids: list[str],
                 step: int) -> list[Trajectory]:
        """MHGPO's Independent Sampling or Round-Robin (paper 001, Algorithms 4-5), else Fork-on-First
        (Algorithm 3) for the student and each MMGRPO teacher (paper 000, Algorithm 2)."""
        c = self.config
        generate = self.generate_fn(step)
        if c.strategy == "mhgpo" and c.sampling == "is":
            return independent_sampling(program, examples, group_size=c.group_size, generate=generate,
                                        example_ids=ids)
        if c.strategy == "mhgpo" and c.sampling == "rr":
            return round_robin(program, examples, group_size=c.group_size, probs=c.fork_probabilities,
                               generate=generate, rng=np.random.default_rng([c.seed, step, 1]), example_ids=ids)
        student = c.rollouts_per_example - sum(c.teacher_rollouts.values())
        trajectories = fork_on_first(program, examples, group_size=student, generate=generate, example_ids=ids)
        for name, count in c.teacher_rollouts.items():
            # MMGRPO teacher mixture (Algorithm 2, SampleTeacherRollouts): same LM, the teacher's prompts.
            for traj in fork_on_first(teachers[name], examples, group_size=count, generate=generate,
                                      example_ids=ids):
                traj.teacher = name
                traj.trajectory_id = f"{name}:{traj.trajectory_id}"
                for call in traj.calls:
                    call.call_id = f"{name}:{call.call_id}" if call.call_id else call.call_id
                    call.parent_id = f"{name}:{call.parent_id}" if call.parent_id else call.parent_id
                trajectories.append(traj)
        return trajectories

    def policy_examples(self, groups: Sequence[ModuleGroup], local_ids: set[str]) -> list[PolicyExample]:
        """The members this process sampled (all of them in a one-process run): a rank trains on the
        calls whose token ids and log-probs it holds."""
        examples = []
        for group in groups:
            for member in group.members:
                if member.trajectory.example_id not in local_ids:
                    continue
                call = member.call
                sample = self.samples.get((call.prompt, call.completion))
                examples.append(PolicyExample(
                    call.prompt, call.completion, float(member.advantage or 0.0),
                    completion_ids=sample.token_ids if sample is not None else None,
                    sampler_logprobs=sample.logprobs if sample is not None else None))
        return examples

    def finish(self) -> None:
        """Tells a backend that batches requests (vLLM) that the sampling of this step is over."""
        finish = getattr(self.backend, "finish_sampling", None)
        if finish is not None:
            finish()
