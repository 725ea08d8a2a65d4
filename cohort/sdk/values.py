"""What a logged value may be, checked in the training process before anything is queued.

A mistake is cheapest to fix where it is made: a rollout of the wrong shape raises a ValueError at the
`log_rollouts` call that made it, rather than a 400 for the whole step minutes later in a background
thread. Only cheap checks live here (types, names, counts); the server checks everything again.

Numbers arrive as Python numbers, numpy scalars or 0-d torch tensors; each is turned into a plain
int or float without importing numpy or torch (a 0-d array or tensor has `ndim == 0` and `__float__`).
NaN and infinities are sent as null: JSON has no spelling for them. A rollout's per-token arrays
(`tokens`, `logprobs`, `entropies`: lists, numpy arrays or 1-d tensors, turned into lists by their own
`.tolist()`) are the exception: a NaN there is a mistake, refused at the call like a wrong length.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from trainer.run import events

SKIP = object()  # `number`'s answer for a value that is not a number

# The server's limits are the step-event contract's (trainer/run/events.py), read at each check: a step
# over one is refused whole.
ROLLOUT_KEYS = frozenset({"prompt", "completion", "rewards", "reward", "advantage", "group", "example_id", "module",
                          *events.TOKEN_ARRAYS})


def number(value: Any) -> Any:
    """`value` as an int, a float or None (NaN, infinities and None itself), or SKIP when it is no number.

        >>> number(True), number(3), number(float("nan")), number("3") is SKIP
        (1, 3, None, True)
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str | bytes):  # numpy's str_ has ndim 0 too
        return SKIP
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if getattr(value, "ndim", None) == 0 or (isinstance(value, numbers.Real)):
        try:
            value = float(value)  # a numpy scalar, a 0-d array or tensor, a Fraction
        except (TypeError, ValueError, RuntimeError):
            return SKIP
        return value if math.isfinite(value) else None
    return SKIP


def metrics_numbers(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the metrics that are numbers, as JSON numbers; the keys skipped because their value is not one).
    A key must be a non-empty string: anything else is a ValueError."""
    if not isinstance(metrics, Mapping):
        raise ValueError(f"metrics must be a dict of name -> number, not {type(metrics).__name__}")
    kept, skipped = {}, []
    for key, value in metrics.items():
        if not isinstance(key, str) or not 0 < len(key) <= events.MAX_METRIC_KEY:
            raise ValueError(f"a metric's name must be a string of 1 to {events.MAX_METRIC_KEY} characters, not {key!r:.80}")
        converted = number(value)
        if converted is SKIP:
            skipped.append(key)
        else:
            kept[key] = converted
    return kept, skipped


def step_number(step: Any, what: str = "step") -> int:
    """A step as the API takes it: an int from 0 to the contract's MAX_STEP (numpy integers, never a bool or a float)."""
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or not 0 <= int(step) <= events.MAX_STEP:
        raise ValueError(f"{what} must be an integer from 0 to {events.MAX_STEP:,}, not {step!r}")
    return int(step)


def _text(where: str, value: Any) -> Any:
    if isinstance(value, str):
        size = len(value)
    elif isinstance(value, list):
        for message in value:
            if not (isinstance(message, Mapping) and isinstance(message.get("role"), str)
                    and isinstance(message.get("content"), str)):
                raise ValueError(f"{where} must be a string or a list of {{'role': str, 'content': str}} "
                                 f"messages; one message is {message!r}")
        value = [{"role": message["role"], "content": message["content"]} for message in value]
        size = sum(len(m["role"]) + len(m["content"]) for m in value)
    else:
        raise ValueError(f"{where} must be a string or a list of chat messages, not {type(value).__name__}")
    if size > events.MAX_TEXT:
        raise ValueError(f"{where} has {size:,} characters; at most {events.MAX_TEXT:,}")
    return value


def _nullable_number(where: str, value: Any) -> Any:
    converted = number(value)
    if converted is SKIP:
        raise ValueError(f"{where} must be a number or None, not {value!r}")
    return converted


def _short_text(where: str, value: Any, longest: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > longest:
        raise ValueError(f"{where} must be a string of at most {longest} characters, not {value!r:.80}")
    return value


def _as_list(value: Any) -> Any:
    """A numpy array or a tensor as a list (its own `.tolist()`: neither is imported here); else as is."""
    if not isinstance(value, list | tuple | str | bytes | Mapping) and callable(getattr(value, "tolist", None)):
        try:
            return value.tolist()
        except (TypeError, ValueError, RuntimeError):
            return value
    return value


def token_arrays(where: str, value: Mapping[str, Any]) -> dict[str, list]:
    """A rollout's per-token arrays checked: `tokens` (each token's text), and the `logprobs` (finite,
    <= events.MAX_LOGPROB) and `entropies` (finite, >= 0) of those tokens, one value per token. Empty when none
    was given; a ValueError naming the field (`rollouts[3].entropies: 12 values for 11 tokens`) otherwise.
    The server checks the same (webapp/api/logging_input.py `token_arrays_problems`)."""
    clean: dict[str, list] = {}
    if value.get("tokens") is not None:
        tokens = _as_list(value["tokens"])
        if not isinstance(tokens, list | tuple):
            raise ValueError(f"{where}.tokens must be a list of strings (each token's text), not "
                             f"{type(value['tokens']).__name__}")
        if len(tokens) > events.MAX_TOKENS:
            raise ValueError(f"{where}.tokens has {len(tokens):,} tokens; at most {events.MAX_TOKENS:,}")
        for i, piece in enumerate(tokens):
            if not isinstance(piece, str):
                raise ValueError(f"{where}.tokens[{i}] must be a string (the token's text), not {type(piece).__name__}")
            if len(piece) > events.MAX_PIECE:
                raise ValueError(f"{where}.tokens[{i}] has {len(piece):,} characters; at most {events.MAX_PIECE:,}")
        clean["tokens"] = [str(piece) for piece in tokens]
    for key, check in (("logprobs", _logprob), ("entropies", _entropy)):
        if value.get(key) is None:
            continue
        if "tokens" not in clean:
            raise ValueError(f"{where}.{key} needs {where}.tokens: it holds one value per token")
        values = _as_list(value[key])
        if not isinstance(values, list | tuple):
            raise ValueError(f"{where}.{key} must be a list of numbers (one per token), not {type(value[key]).__name__}")
        if len(values) != len(clean["tokens"]):
            raise ValueError(f"{where}.{key}: {len(values):,} values for {len(clean['tokens']):,} tokens")
        clean[key] = [check(f"{where}.{key}[{i}]", v) for i, v in enumerate(values)]
    return clean


def _finite(where: str, value: Any) -> float:
    converted = SKIP if isinstance(value, bool) else number(value)
    if converted is SKIP:
        raise ValueError(f"{where} must be a number, not {type(value).__name__}")
    if converted is None:
        raise ValueError(f"{where} is {value!r}: per-token values must be finite numbers")
    return float(converted)


def _logprob(where: str, value: Any) -> float:
    converted = _finite(where, value)
    if converted > events.MAX_LOGPROB:
        raise ValueError(f"{where} is {converted:g}: a log-prob is at most 0")
    return converted


def _entropy(where: str, value: Any) -> float:
    converted = _finite(where, value)
    if converted < 0:
        raise ValueError(f"{where} is {converted:g}: an entropy is at least 0")
    return converted


def rollout(index: int, value: Any) -> dict[str, Any]:
    """One rollout in the API's form (numbers converted), or a ValueError naming what is wrong."""
    where = f"rollout {index}"
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a dict, not {type(value).__name__}")
    unknown = set(value) - ROLLOUT_KEYS
    if unknown:
        raise ValueError(f"{where} has unknown keys {sorted(map(str, unknown))}; a rollout has "
                         f"{', '.join(sorted(ROLLOUT_KEYS))}")
    for key in ("prompt", "completion"):
        if key not in value:
            raise ValueError(f"{where} has no {key}: a rollout needs a prompt and a completion (text or chat messages)")
    clean: dict[str, Any] = {key: _text(f"{where}'s {key}", value[key]) for key in ("prompt", "completion")}
    if "rewards" in value:
        rewards = value["rewards"]
        if not isinstance(rewards, Mapping) or not all(isinstance(k, str) and 0 < len(k) <= events.MAX_REWARD_NAME
                                                       for k in rewards) or len(rewards) > events.MAX_REWARDS_PER_ROLLOUT:
            raise ValueError(f"{where}'s rewards must be a dict of at most {events.MAX_REWARDS_PER_ROLLOUT} reward names (of at "
                             f"most {events.MAX_REWARD_NAME} characters) -> number, not {rewards!r:.200}")
        clean["rewards"] = {k: _nullable_number(f"{where}'s reward {k!r}", v) for k, v in rewards.items()}
    for key in ("reward", "advantage"):
        if key in value:
            clean[key] = _nullable_number(f"{where}'s {key}", value[key])
    if value.get("group") is not None:
        group = value["group"]
        if isinstance(group, bool) or not isinstance(group, str | numbers.Integral):
            raise ValueError(f"{where}'s group must be a string or an integer, not {group!r}")
        clean["group"] = _short_text(f"{where}'s group", group, events.MAX_EXAMPLE_ID) if isinstance(group, str) else int(group)
    if value.get("example_id") is not None:
        clean["example_id"] = _short_text(f"{where}'s example_id", value["example_id"], events.MAX_EXAMPLE_ID)
    if value.get("module") is not None:
        clean["module"] = _short_text(f"{where}'s module", value["module"], events.MAX_MODULE)
        if not clean["module"]:
            raise ValueError(f"{where}'s module must not be empty (leave it out for the default)")
    clean.update(token_arrays(f"rollouts[{index}]", value))
    return clean


def rollouts(values: Any, *, held: int = 0, names: frozenset[str] | set[str] = frozenset(),
             modules: frozenset[str | None] | set[str | None] = frozenset()) -> list[dict[str, Any]]:
    """A list of rollouts checked and converted. The step's limits count what it holds already:
    `held` rollouts, naming the reward `names` and the `modules` (None: the default module)."""
    if isinstance(values, Mapping | str | bytes) or not isinstance(values, Iterable):
        raise ValueError(f"rollouts must be a list of dicts, not {type(values).__name__}")
    clean = [rollout(i, v) for i, v in enumerate(values)]
    if held + len(clean) > events.MAX_ROLLOUTS_PER_STEP:
        raise ValueError(f"a step holds at most {events.MAX_ROLLOUTS_PER_STEP} rollouts; this one would hold "
                         f"{held + len(clean)}")
    for what, named in (("reward names", set(names).union(*(r.get("rewards", ()) for r in clean))),
                        ("modules", set(modules) | {r.get("module") for r in clean})):
        if len(named) > events.MAX_REWARD_NAMES_PER_STEP:
            raise ValueError(f"a step's rollouts name at most {events.MAX_REWARD_NAMES_PER_STEP} {what}; this one would name {len(named)}")
    return clean
