"""TRL's `GRPOTrainer` streaming into Cohort, in one line::

    from cohort.trl import CohortCallback
    trainer.add_callback(CohortCallback(trainer, task="toy_format", name="trl smollm2"))

Every optimizer step sends TRL's logged metrics and the step's completions, each with the score of
every reward function, its weighted total and its advantage. A group is the `num_generations`
completions of one prompt (TRL's `RepeatSampler` lays them out side by side), and the callback says so
explicitly: each completion carries its group's id, so Cohort's group views (variance per prompt, the
zero-variance share, intra-group similarity, the group inspector) work on TRL runs.

Where the completions come from: `GRPOTrainer._logs`, the buffer TRL fills for its own completions
table (prompt, completion, per-reward scores, advantages of the newest generation batch, gathered
from every process). A callback is not handed the trainer, hence the `trainer` argument; without it
only the metrics stream. The callback reads the buffer at every `on_step_end`, so `logging_steps`
(10 by default in `GRPOConfig`) thins the metrics but never the groups. A batch reused for several
optimizer steps (`steps_per_generation > 1`) is sent once, at the step that first saw it.

Only the main process logs. The run finishes with the training; a training that dies is finished as
failed by the SDK's exit hook, and nothing sent is lost (cohort/sdk/: a local file, retries, `cohort sync`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback

# TRL's metric names beside Cohort's (trainer/algorithms/scoring.py), so a TRL run and a Cohort run of
# the same task share their curves on the compare page. TRL's own names are kept too.
_RENAMED = {"reward": "reward/mean", "frac_reward_zero_std": "zero_var_share", "eval_reward": "eval/reward/mean"}


def cohort_metrics(logs: Mapping[str, Any]) -> dict[str, float]:
    """TRL's logged numbers, plus the same values under Cohort's names (`reward` -> `reward/mean`,
    `rewards/<f>/mean` -> `reward/<f>`, `frac_reward_zero_std` -> `zero_var_share`).

        >>> cohort_metrics({"reward": 0.5, "rewards/fmt/mean": 1.0, "epoch": 0.1, "note": "x"})
        {'reward': 0.5, 'rewards/fmt/mean': 1.0, 'epoch': 0.1, 'reward/mean': 0.5, 'reward/fmt': 1.0}
    """
    numbers = {str(k): float(v) for k, v in logs.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    renamed = {}
    for key, value in numbers.items():
        if key in _RENAMED:
            renamed[_RENAMED[key]] = value
        elif key.startswith("rewards/") and key.endswith("/mean"):
            renamed["reward/" + key[len("rewards/"):-len("/mean")]] = value
    return {**numbers, **{k: v for k, v in renamed.items() if k not in numbers}}


def _text(value: Any) -> str:
    """A completion as text: TRL gives a string, or chat messages for conversational datasets."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(m.get("content", "")) if isinstance(m, Mapping) else str(m) for m in value)
    return str(value)


def _prompt(value: Any) -> Any:
    """A prompt as the API takes it: text, or the chat messages (role and text content only)."""
    if isinstance(value, list) and all(isinstance(m, Mapping) for m in value):
        return [{"role": str(m.get("role", "user")), "content": _text(m.get("content", ""))} for m in value]
    return _text(value)


def _number(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def trl_rollouts(prompts: list[Any], completions: list[Any], rewards: Mapping[str, list[Any]],
                 advantages: list[Any], *, num_generations: int, weights: list[float]) -> list[dict[str, Any]]:
    """One generation batch of TRL's buffer as Cohort rollouts: completion i belongs to the group of
    prompt i // num_generations. The total is TRL's: the weighted sum of the scores a function gave
    (a function that returned None for a completion is left out, as TRL's nansum does).

        >>> rows = trl_rollouts(["p", "p"], ["a", "b"], {"fmt": [1.0, 0.0]}, [0.7, -0.7],
        ...                     num_generations=2, weights=[2.0])
        >>> [(r["group"], r["reward"], r["advantage"]) for r in rows]
        [(0, 2.0, 0.7), (0, 0.0, -0.7)]
    """
    names = list(rewards)
    rollouts = []
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        scores = {name: _number(rewards[name][i]) for name in names}
        weighted = [w * s for w, s in zip(weights, scores.values(), strict=False) if s is not None]
        prompt_value = _prompt(prompt)
        # The same prompt at another step is the same example (the per-example history follows it).
        example = hashlib.sha1(json.dumps(prompt_value, sort_keys=True).encode("utf-8")).hexdigest()[:12]
        rollouts.append({
            "prompt": prompt_value, "completion": _text(completion), "rewards": scores,
            "reward": sum(weighted) if weighted else None, "advantage": _number(advantages[i]),
            "group": i // num_generations, "example_id": example,
        })
    return rollouts


class CohortCallback(TrainerCallback):
    """Streams a TRL `GRPOTrainer` run into Cohort (see the module's docstring).

    `trainer`: the GRPOTrainer, whose completions and groups are sent (without it, metrics only).
    `run`: a run from `cohort.init(...)` to log into; by default the callback starts one when the
    training starts (`init`: cohort.init's arguments: url, token, task, name, tags, project, ...; the
    config is TRL's arguments) and finishes it when the training ends.
    """

    def __init__(self, trainer: Any = None, *, run: Any = None, **init: Any):
        self.trainer = trainer
        self.run = run
        self._init = init
        self._owns_run = run is None
        self._last_batch: str | None = None

    # --- transformers' callback events ----------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or self.run is not None:
            return
        import cohort  # the SDK, imported when used: `import cohort.trl` stays cheap

        self.run = cohort.init(**{"origin": "trl", "config": self._config(args), "total_steps": state.max_steps,
                                  **self._init})

    def on_step_end(self, args, state, control, **kwargs):
        if self.run is None or not state.is_world_process_zero:
            return
        rollouts = self._new_rollouts()
        if rollouts:
            self.run.log_rollouts(state.global_step, rollouts)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.run is None or not state.is_world_process_zero or not logs:
            return
        metrics = cohort_metrics(logs)
        if metrics:
            self.run.log(metrics, step=state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.run is not None and state.is_world_process_zero and self._owns_run:
            self.run.finish()

    # --- reading the trainer ------------------------------------------------------------------

    def _config(self, args) -> dict[str, Any]:
        """TRL's arguments as JSON (what the compare page diffs), with the model and the reward functions."""
        config = json.loads(json.dumps(args.to_dict(), default=str))
        trainer = self.trainer
        if trainer is not None:
            model = getattr(getattr(trainer, "model", None), "name_or_path", None)
            config.update({"model": model, "reward_funcs": list(getattr(trainer, "reward_func_names", []))})
        return config

    def _new_rollouts(self) -> list[dict[str, Any]]:
        """The newest generation batch in TRL's buffer, once: an unchanged buffer sends nothing."""
        buffer = getattr(self.trainer, "_logs", None)
        if not buffer or not buffer.get("prompt"):
            return []
        prompts, completions = list(buffer["prompt"]), list(buffer["completion"])
        advantages = list(buffer["advantages"])
        rewards = {name: list(values) for name, values in buffer["rewards"].items()}
        fingerprint = hashlib.sha1(repr((completions, advantages)).encode("utf-8")).hexdigest()
        if fingerprint == self._last_batch:
            return []
        self._last_batch = fingerprint
        names = list(getattr(self.trainer, "reward_func_names", rewards))
        weights = [float(w) for w in getattr(self.trainer, "reward_weights", [1.0] * len(names))]
        ordered = {name: rewards.get(name, [None] * len(prompts)) for name in names}
        return trl_rollouts(prompts, completions, ordered, advantages,
                            num_generations=int(self.trainer.num_generations), weights=weights)
