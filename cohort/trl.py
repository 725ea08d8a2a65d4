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

The run's timeline (issue 55) comes from TRL's own timers: generation, the weight sync, the reward
functions and the log-prob passes, each a bar on a lane of its own (cohort/trl_timers.py).

Only the main process logs. The run finishes with the training; a training that dies is finished as
failed by the SDK's exit hook, and nothing sent is lost (cohort/sdk/: a local file, retries, `cohort sync`).

Per token (issue 45), what TRL 1.16 has and what the callback can reach of it:

- the completion's token ids: not in `_logs` (text only), nor handed to a callback. TRL keeps them in
  `GRPOTrainer._buffered_inputs`, the generation batch as it trains on it: `completion_ids` and
  `completion_mask` per row, shuffled (`shuffle_sequence_dict`) and holding this process's rows only.
  The callback decodes each row's completion as TRL does (`skip_special_tokens=True`) and pairs it with
  the `_logs` entry of the same text and advantage; where two rows of that text differ (another prompt),
  the one whose decoded prompt holds the entry's prompt. An entry with no row, or with several that
  still differ, is sent without token details: never with another completion's. It sends each token
  decoded on its own (`tokenizer.decode([id])`, special tokens included, e.g. `<|im_end|>`): `tokens`.
- the sampler's log-probs: only when vLLM (or a `rollout_func`) generates: `sampling_per_token_logps`
  in the same rows, sent as `logprobs` (a rollout with a NaN among them is sent without them). With
  transformers' `generate`, TRL asks for no log-probs: there are none to send.
- entropies: TRL computes each token's entropy of softmax(logits / temperature) in the loss's forward
  pass (the model's fused LM head output, `outputs.entropy`) and keeps only their masked mean, the
  `entropy` metric (sent under TRL's name and as `tokens/entropy/mean`). The callback reads the
  per-token values with a forward hook on `trainer.model` (PyTorch's public `register_forward_hook`:
  it reads the output, changes nothing) in the training's forward passes with gradients (the loss; not
  generation, nor the reference or old-policy passes under no_grad), and sends them as `entropies`. A
  model whose output has no `entropy` (another TRL version) sends none. With `steps_per_generation`
  greater than `gradient_accumulation_steps`, the batch is sent at the step that first trained on
  part of it, with the entropies of that part only. That pass runs in train mode: with dropout (PEFT's
  `lora_dropout`, 0.05 in TRL's examples) its entropies carry the dropout's noise, which the sampler
  never saw. The callback records the pass and its dropout in the run's config, `token_details_pass`
  (`token_pass`), and the trajectory inspector says so beside those numbers (Cohort's own runs take
  theirs from a pass without dropout).
- the trainer's own per-token log-probs in that pass (`outputs.log_probs`) are not sent: the SDK's
  `logprobs` are the sampling policy's, and the two are kept apart (their difference is the mismatch
  Cohort shows); top-k alternatives TRL never computes.

`token_details=False` sends none of it; `max_step_tokens` bounds a step's (whole rollouts, in order,
until the bound): a step's post must stay under the server's 16 MiB.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback

from cohort.trl_timers import TimerSpans
from cohort.trl_tokens import MAX_CAPTURES, trl_token_details
from cohort.trl_tokens import text_of as _text

# TRL's metric names beside Cohort's (trainer/algorithms/scoring.py), so a TRL run and a Cohort run of
# the same task share their curves on the compare page. TRL's own names are kept too.
_RENAMED = {"reward": "reward/mean", "frac_reward_zero_std": "zero_var_share", "eval_reward": "eval/reward/mean",
            "entropy": "tokens/entropy/mean"}
MAX_STEP_TOKENS = 262_144  # per-token details of a step: about 6 MB of JSON, well under a post's 16 MiB


def cohort_metrics(logs: Mapping[str, Any]) -> dict[str, float]:
    """TRL's logged numbers, plus the same values under Cohort's names (`reward` -> `reward/mean`,
    `rewards/<f>/mean` -> `reward/<f>`, `frac_reward_zero_std` -> `zero_var_share`, `entropy` (the
    mean token entropy of the step's loss pass) -> `tokens/entropy/mean`).

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


def _prompt(value: Any) -> Any:
    """A prompt as the API takes it: text, or the chat messages (role and text content only)."""
    if isinstance(value, list) and all(isinstance(m, Mapping) for m in value):
        return [{"role": str(m.get("role", "user")), "content": _text(m.get("content", ""))} for m in value]
    return _text(value)


def _number(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def token_pass(model: Any) -> dict[str, Any]:
    """Where the callback's per-token numbers come from, for the run's config (`token_details_pass`):
    the entropies from TRL's loss pass, in train mode, with the largest dropout probability that pass
    applies (trainer.policy.lora.train_mode_dropout: PEFT's `lora_dropout`, Llama's and Qwen's
    `attention_dropout`); 0.0 where there are none (or no torch model).

        >>> import torch
        >>> token_pass(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.05)))
        {'entropies': 'loss pass, train mode', 'train_mode_dropout': 0.05}
    """
    from trainer.policy.lora import train_mode_dropout  # TRL's torch and peft: loaded by now

    dropout = train_mode_dropout(model) if callable(getattr(model, "modules", None)) else 0.0
    return {"entropies": "loss pass, train mode", "train_mode_dropout": dropout}


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
    `token_details`: send each completion token by token (tokens, entropies, and the sampler's
    log-probs where TRL has them; see the module's docstring for what TRL exposes); `max_step_tokens`:
    at most this many tokens' details a step.
    """

    def __init__(self, trainer: Any = None, *, run: Any = None, token_details: bool = True,
                 max_step_tokens: int = MAX_STEP_TOKENS, **init: Any):
        self.trainer = trainer
        self.run = run
        self._init = init
        self._owns_run = run is None
        self._last_batch: str | None = None
        self.token_details = token_details and trainer is not None
        self.max_step_tokens = max_step_tokens
        self._captures: list[tuple[Any, Any]] = []  # (input ids, entropies) of the loss's forward passes
        self._hook = None
        self._pieces: dict[int, str] = {}  # token id -> its text, decoded once
        self._warned = False
        # TRL's own timers, as the run's timeline (cohort/trl_timers.py)
        self._timers = TimerSpans(tuple(getattr(trainer, "reward_func_names", ())))

    # --- transformers' callback events ----------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self._timers.open()
        if self.run is not None:
            self._watch_entropies()
            return
        import cohort  # the SDK, imported when used: `import cohort.trl` stays cheap

        self.run = cohort.init(**{"origin": "trl", "config": self._config(args), "total_steps": state.max_steps,
                                  **self._init})
        self._watch_entropies()

    def on_step_end(self, args, state, control, **kwargs):
        try:
            if self.run is None or not state.is_world_process_zero:
                return
            rollouts = self._new_rollouts()
            if rollouts:
                self.run.log_rollouts(state.global_step, rollouts)
            self._log_spans(state.global_step)
        finally:
            self._captures.clear()  # this step's passes: their batch is sent now, or was before

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.run is None or not state.is_world_process_zero or not logs:
            return
        metrics = cohort_metrics(logs)
        if metrics:
            self.run.log(metrics, step=state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self._timers.close()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._captures.clear()
        if self.run is not None and state.is_world_process_zero and self._owns_run:
            self.run.finish()

    def _log_spans(self, step: int) -> None:
        """The bars of TRL's timers that ended during this step, on the step's timeline."""
        for span in self._timers.take():
            try:
                self.run.log_span(span["name"], span["start"], span["end"], lane=span["lane"], step=step)
            except ValueError as refused:  # past a step's bound of bars: the rest of this step's go unsent
                warnings.warn(f"cohort: {refused}", stacklevel=2)
                break

    # --- reading the trainer ------------------------------------------------------------------

    def _config(self, args) -> dict[str, Any]:
        """TRL's arguments as JSON (what the compare page diffs), with the model and the reward functions."""
        config = json.loads(json.dumps(args.to_dict(), default=str))
        trainer = self.trainer
        if trainer is not None:
            model = getattr(getattr(trainer, "model", None), "name_or_path", None)
            config.update({"model": model, "reward_funcs": list(getattr(trainer, "reward_func_names", []))})
            if self.token_details:
                config["token_details_pass"] = token_pass(getattr(trainer, "model", None))
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
        rollouts = trl_rollouts(prompts, completions, ordered, advantages,
                                num_generations=int(self.trainer.num_generations), weights=weights)
        if self.token_details:
            self._add_token_details(rollouts, prompts, completions, advantages)
        return rollouts

    # --- per-token details (see the module's docstring) -------------------------------------------

    def _watch_entropies(self) -> None:
        """Hooks the model's forward passes, to keep the per-token entropies of the loss's passes."""
        model = getattr(self.trainer, "model", None)
        if not self.token_details or self._hook is not None or not callable(getattr(model, "register_forward_hook", None)):
            return
        self._hook = model.register_forward_hook(self._forward_seen, with_kwargs=True)

    def _forward_seen(self, module, args, kwargs, output) -> None:
        import torch  # TRL's: loaded by now

        entropy = getattr(output, "entropy", None)
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        # The loss's pass: training, with gradients (TRL scores old and reference log-probs under no_grad).
        if (entropy is None or input_ids is None or not torch.is_grad_enabled() or not module.training
                or getattr(entropy, "ndim", 0) != 2 or getattr(input_ids, "ndim", 0) != 2):
            return
        self._captures.append((input_ids.detach().cpu(), entropy.detach().float().cpu()))
        del self._captures[:-MAX_CAPTURES]

    def _add_token_details(self, rollouts: list[dict[str, Any]], prompts: list[Any], completions: list[Any],
                           advantages: list[Any]) -> None:
        """Adds tokens (and entropies, logprobs where known) to the rollouts TRL's rows can be paired with."""
        try:
            details = trl_token_details(self.trainer, prompts, completions, advantages, captures=self._captures,
                                        pieces=self._pieces)
        except Exception as exc:  # a TRL that keeps its batch otherwise: the rollouts go without details
            if not self._warned:
                from cohort.sdk.run import CohortWarning

                self._warned = True
                warnings.warn(f"cohort: the completions are sent without per-token details: TRL's batch could not "
                              f"be read ({exc!r})", CohortWarning, stacklevel=2)
            return
        budget = self.max_step_tokens  # whole rollouts, in order, while they fit
        for rollout, detail in zip(rollouts, details, strict=True):
            if detail is None or len(detail["tokens"]) > budget:
                continue
            budget -= len(detail["tokens"])
            rollout.update(detail)
