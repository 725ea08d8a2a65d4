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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback

# TRL's metric names beside Cohort's (trainer/algorithms/scoring.py), so a TRL run and a Cohort run of
# the same task share their curves on the compare page. TRL's own names are kept too.
_RENAMED = {"reward": "reward/mean", "frac_reward_zero_std": "zero_var_share", "eval_reward": "eval/reward/mean",
            "entropy": "tokens/entropy/mean"}
MAX_STEP_TOKENS = 262_144  # per-token details of a step: about 6 MB of JSON, well under a post's 16 MiB
MAX_TOKENS, MAX_PIECE = 32_768, 1_000  # the SDK's bounds (cohort/sdk/values.py) of one rollout
DECIMALS = 4  # per-token numbers are sent rounded: 1e-4 nats is finer than the server keeps (float16)
MAX_CAPTURES = 64  # forward passes of one optimizer step whose entropies are held until it ends


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


def token_pass(model: Any) -> dict[str, Any]:
    """Where the callback's per-token numbers come from, for the run's config (`token_details_pass`):
    the entropies from TRL's loss pass, in train mode, with the largest dropout probability that pass
    applies: the model's dropout modules (PEFT's `lora_dropout`) and the dropouts its config sets
    (Llama's and Qwen's `attention_dropout`); 0.0 where there are none (or no torch model).

        >>> import torch
        >>> token_pass(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.05)))
        {'entropies': 'loss pass, train mode', 'train_mode_dropout': 0.05}
    """
    rates = []
    if callable(getattr(model, "modules", None)):
        from torch.nn.modules.dropout import _DropoutNd  # TRL's torch: loaded by now

        rates = [float(m.p) for m in model.modules() if isinstance(m, _DropoutNd)]
    get_base = getattr(model, "get_base_model", None)
    config = getattr(get_base() if callable(get_base) else model, "config", None)
    settings = config.to_dict() if callable(getattr(config, "to_dict", None)) else {}
    rates += [float(v) for k, v in settings.items()
              if ("dropout" in k or "pdrop" in k) and isinstance(v, int | float) and not isinstance(v, bool)]
    return {"entropies": "loss pass, train mode", "train_mode_dropout": max(rates, default=0.0)}


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

    # --- transformers' callback events ----------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
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
        finally:
            self._captures.clear()  # this step's passes: their batch is sent now, or was before

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.run is None or not state.is_world_process_zero or not logs:
            return
        metrics = cohort_metrics(logs)
        if metrics:
            self.run.log(metrics, step=state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._captures.clear()
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


@dataclass
class _Row:
    """One completion of TRL's buffered batch, as trained on."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    logprobs: list[float] | None
    entropies: list[float] | None

    def __post_init__(self):
        self.key = hash((tuple(self.prompt_ids), tuple(self.completion_ids)))  # rows alike are interchangeable


def trl_token_details(trainer: Any, prompts: Sequence[Any], completions: Sequence[Any], advantages: Sequence[Any], *,
                      captures: Sequence[tuple[Any, Any]] = (), pieces: dict[int, str] | None = None
                      ) -> list[dict[str, list] | None]:
    """Per entry of TRL's `_logs` (its prompts, completions, advantages): {"tokens", "logprobs"?,
    "entropies"?} from the row of `trainer._buffered_inputs` it pairs with, or None (see the module's
    docstring). `captures`: (input ids, entropies) of the loss's forward passes over those rows."""
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    pieces = {} if pieces is None else pieces
    rows = _buffered_rows(trainer, tokenizer, captures)
    # (completion text, advantage) -> row key -> the rows not taken yet: rows of one key are alike
    # (same prompt and completion ids), so which of them an entry takes does not matter.
    unused: dict[tuple[str, float], dict[int, list[int]]] = {}
    for index, row in enumerate(rows):
        text = tokenizer.decode(row.completion_ids, skip_special_tokens=True)
        unused.setdefault((text, row.advantage), {}).setdefault(row.key, []).append(index)
    details: list[dict[str, list] | None] = []
    for prompt, completion, advantage in zip(prompts, completions, advantages, strict=True):
        alike = unused.get((_text(completion), float(advantage)), {})
        keys = list(alike)
        if len(keys) > 1:  # that text twice, different: the row whose prompt holds this entry's
            needle = _prompt_needle(prompt)
            keys = [key for key in keys if needle and needle in tokenizer.decode(rows[alike[key][0]].prompt_ids,
                                                                                 skip_special_tokens=True)]
        if len(keys) != 1:  # none, or still two different completions of this text: neither is sent
            details.append(None)
            continue
        index = alike[keys[0]].pop(0)
        if not alike[keys[0]]:
            del alike[keys[0]]
        details.append(_detail(rows[index], tokenizer, pieces))
    return details


def _buffered_rows(trainer: Any, tokenizer: Any, captures: Sequence[tuple[Any, Any]]) -> list[_Row]:
    """Every row of TRL's buffered batch, with the sampler's log-probs and the captured entropies."""
    import torch  # TRL's

    pad = getattr(tokenizer, "pad_token_id", None)
    rows = []
    for batch in getattr(trainer, "_buffered_inputs", None) or ():
        prompt_ids, prompt_mask = batch["prompt_ids"].cpu(), batch["prompt_mask"].cpu()
        completion_ids, completion_mask = batch["completion_ids"].cpu(), batch["completion_mask"].cpu()
        width = completion_ids.size(1)
        sampler = batch.get("sampling_per_token_logps")
        sampler = sampler.detach().double().cpu() if sampler is not None else None
        full = torch.cat([prompt_ids, completion_ids], dim=1)
        entropy = next((e for ids, e in captures if ids.shape == full.shape and torch.equal(ids, full)), None)
        entropy = entropy[:, -width:].double() if entropy is not None and entropy.size(1) >= width else None
        for r in range(completion_ids.size(0)):
            ids = completion_ids[r].tolist()
            length = int(completion_mask[r].sum())
            masked = length == 0  # TRL masks a truncated completion whole (mask_truncated_completions)
            if masked:
                length = len(ids)
                while length and ids[length - 1] == pad:
                    length -= 1
            rows.append(_Row(
                prompt_ids=prompt_ids[r][prompt_mask[r].bool()].tolist(), completion_ids=ids[:length],
                advantage=float(batch["advantages"][r]),
                logprobs=_rounded(sampler[r, :length], high=0.0) if sampler is not None else None,
                entropies=_rounded(entropy[r, :length], low=0.0) if entropy is not None and not masked else None))
    return rows


def _rounded(values: Any, *, low: float = -math.inf, high: float = math.inf) -> list[float] | None:
    """A row's per-token numbers (a float64 tensor) rounded, or None when one is NaN or out of bounds
    beyond rounding (an entropy of -1e-7 is 0; a log-prob of 1e-7 is 0)."""
    import torch

    if not bool(torch.isfinite(values).all()):
        return None
    if values.numel() and (float(values.min()) < low - 1e-3 or float(values.max()) > high + 1e-3):
        return None
    return [v + 0.0 for v in torch.round(values, decimals=DECIMALS).clamp(min=low, max=high).tolist()]  # no -0.0


def _detail(row: _Row, tokenizer: Any, pieces: dict[int, str]) -> dict[str, list] | None:
    if not row.completion_ids or len(row.completion_ids) > MAX_TOKENS:
        return None
    for token in row.completion_ids:
        if token not in pieces:
            pieces[token] = tokenizer.decode([token], skip_special_tokens=False)
    texts = [pieces[token] for token in row.completion_ids]
    if any(len(text) > MAX_PIECE for text in texts):
        return None
    detail: dict[str, list] = {"tokens": texts}
    if row.logprobs is not None:
        detail["logprobs"] = row.logprobs
    if row.entropies is not None:
        detail["entropies"] = row.entropies
    return detail


def _prompt_needle(prompt: Any) -> str:
    """What the decoded prompt must hold: the text prompt, or its last message's text."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
        return _text(prompt[-1].get("content", ""))
    return _text(prompt)
