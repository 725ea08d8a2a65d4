"""The logging API's bodies checked (POST /api/external/runs/, /api/runs/<id>/steps/, /finish/): every
bound of the contract, each refusal a BadParam (400) that names the field, and in a steps body the
step and rollout by index (`steps[2].rollouts[17].rewards`).

Written out rather than DRF serializers: a post may carry 100 steps of 4,096 rollouts, and DRF's fields
coerce ("5" -> 5, 5 -> "5") where the schema (webapp/api/logging_schema.py) promises a type, so a value
the schema calls invalid must be refused here (the schema fuzz sends such values and checks). Keys this
contract does not name are ignored, so an older server takes a newer client's posts. Numbers must be
finite: JSON has no NaN, and `1e999` reads as infinity, which no database column or JSON store takes.
The steps endpoint reads the non-JSON literals NaN and Infinity as numbers (webapp/api/parsers.py), so
that such a value, too, is refused here by its field's name rather than as unreadable JSON.

A rollout's per-token arrays (`tokens`, `logprobs`, `entropies`: issue 45) are the one exception to
"refused whole": a bad array (wrong length, NaN or null, out of bounds, too long) is left out of the
step and named, and the rest of the step is stored (`steps_checked`; the view answers 400 with the
names and what was stored).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from trainer.run import events
from webapp.nul_guard import nul_replaced
from webapp.runs.ingest.external import FINAL_STATES
from webapp.runs.params import BadParam

# Every bound is the step-event contract's (trainer/run/events.py), read when a body is checked.
CLIENT_ID = re.compile(events.CLIENT_ID_PATTERN)
SLUG = re.compile(events.SLUG_PATTERN)
TAG_ITEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # the runs' tag rule (webapp/runs/launch/check.py TAG), either case
MAX_CONFIG_DEPTH = 32  # nesting; deeper JSON makes recursive readers (the compare page) fail


def _object(body: Any, example: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadParam(f"The body must be a JSON object, e.g. {example}.")
    return body


def _kind(value: Any) -> str:
    return {bool: "a boolean", str: "a string", int: "an integer", float: "a number", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _string(body: dict, key: str, *, longest: int, default: str | None = None, pattern: re.Pattern | None = None,
            rule: str = "") -> str:
    if key not in body and default is None:
        raise BadParam(f"'{key}' is required.")
    value = body.get(key, default)
    if not isinstance(value, str):
        raise BadParam(f"'{key}' must be a string, not {_kind(value)}.")
    if len(value) > longest:
        raise BadParam(f"'{key}' has at most {longest:,} characters ({len(value):,} given).")
    if "\x00" in value:
        raise BadParam(f"'{key}' holds a NUL character (\\u0000), which no field accepts.")
    if pattern is not None and not pattern.fullmatch(value):
        raise BadParam(f"'{key}' must be {rule}, not {value[:80]!r}.")
    return value


def _integer(value: Any, where: str, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadParam(f"{where} must be an integer, not {_kind(value)}.")
    if not low <= value <= high:
        raise BadParam(f"{where} must be between {low:,} and {high:,} ({value} given).")
    return value


def number(value: Any, where: str) -> float | None:
    """A finite number or null, as a float (an integer too large for one is refused)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadParam(f"{where} must be a number or null, not {_kind(value)}.")
    try:
        result = float(value)
    except OverflowError:
        raise BadParam(f"{where} is too large for a number.") from None
    if not math.isfinite(result):
        raise BadParam(f"{where} must be finite: send null for an unknown value (JSON has no NaN or Infinity).")
    return result


# --- POST /api/external/runs/ ------------------------------------------------------------------


MAX_PROJECT = 150  # a project's name (webapp/projects/models.py)


def create_values(body: Any) -> dict[str, Any]:
    """The keyword arguments of `external_run_start` from a create body."""
    body = _object(body, '{"client_id": "run-2024-07-01", "task": "toy_format", "origin": "trl"}')
    values = {
        "client_id": _string(body, "client_id", longest=64, pattern=CLIENT_ID,
                             rule="1 to 64 letters, digits, '_', '.' or '-'"),
        "task": _string(body, "task", longest=events.MAX_TASK, pattern=SLUG, rule="a task name: letters, digits, '_' or '-'"),
        "name": _string(body, "name", longest=events.MAX_NAME_CHARS, default=""),
        "notes": _string(body, "notes", longest=events.MAX_NOTES_CHARS, default=""),
        "origin": _string(body, "origin", longest=events.MAX_ORIGIN, default="sdk", pattern=SLUG,
                          rule="the trainer's name: letters, digits, '_' or '-'"),
        "config": _config(body.get("config", {})),
        "tags": _tags(body.get("tags", [])),
        "total_steps": _integer(body.get("total_steps", 0), "'total_steps'", low=0, high=events.MAX_TOTAL_STEPS),
        "project": _string(body, "project", longest=MAX_PROJECT, default=""),
    }
    if values["origin"] == "cohort":
        raise BadParam("'origin' names the trainer that logs the run; 'cohort' is Cohort's own worker.")
    return values


def _config(config: Any) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise BadParam(f"'config' must be an object of the trainer's settings, not {_kind(config)}.")
    depth, pending = 0, [(config, 1)]
    while pending:  # without recursion: the depth is what is being checked
        value, level = pending.pop()
        depth = max(depth, level)
        if depth > MAX_CONFIG_DEPTH:
            raise BadParam(f"'config' nests deeper than {MAX_CONFIG_DEPTH} levels.")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, float) and not math.isfinite(child):
                raise BadParam("'config' holds a number too large to store (JSON has no Infinity).")
            if isinstance(child, dict | list):
                pending.append((child, level + 1))
    # The trainer's own settings, stored to be read: a NUL (no database stores one) becomes U+FFFD, the
    # replacement character, as a decoder shows what it cannot represent (the schema says so).
    config = nul_replaced(config)
    size = len(json.dumps(config, ensure_ascii=False, separators=(",", ":")).encode())
    if size > events.MAX_CONFIG_BYTES:
        raise BadParam(f"'config' is {size:,} bytes of JSON; at most {events.MAX_CONFIG_BYTES:,}.")
    return config


def _tags(tags: Any) -> list[str]:
    """The runs' tag rule (the launch form's TagsField: slugs of at most 40 characters, at most 20,
    lowercased, repeats dropped), applied to each item as the schema states it: an item the form
    would split (spaces, commas) or drop (empty) is refused, not quietly changed."""
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise BadParam("'tags' must be a list of strings.")
    if len(tags) > events.MAX_TAGS:
        raise BadParam(f"'tags' holds {len(tags)} tags; at most {events.MAX_TAGS}.")
    for tag in tags:
        if len(tag) > events.MAX_TAG_CHARS:
            raise BadParam(f"'tags': a tag has at most {events.MAX_TAG_CHARS} characters: {tag[:50]!r} is longer.")
        if not TAG_ITEM.fullmatch(tag):
            raise BadParam(f"'tags': tags are letters, digits and . _ - (starting with a letter or digit), not {tag[:50]!r}.")
    return list(dict.fromkeys(tag.lower() for tag in tags))


# --- POST /api/runs/<id>/finish/ ---------------------------------------------------------------


def finish_values(body: Any) -> dict[str, str]:
    body = _object(body, '{"state": "succeeded"}')
    state = _string(body, "state", longest=20)
    if state not in FINAL_STATES:
        raise BadParam(f"'state' must be {' or '.join(map(repr, FINAL_STATES))}, not {state[:40]!r}.")
    return {"state": state, "error": _string(body, "error", longest=events.MAX_ERROR, default="")}


# --- POST /api/runs/<id>/steps/ ----------------------------------------------------------------


def steps_checked(body: Any) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The checked steps of a steps body, each {"step", "metrics", "rollouts"} with its rollouts'
    values checked (a rollout's "reward" only when it was sent: absent, it defaults to the sum; its
    "tokens", "logprobs" and "entropies" only when sent and good), and the token arrays left out:
    path (`steps[0].rollouts[3].logprobs`) -> what is wrong with it. Any other refusal is a BadParam."""
    body = _object(body, '{"steps": [{"step": 1, "metrics": {"loss": 0.5}}]}')
    steps = body.get("steps")
    if not isinstance(steps, list) or not steps:
        raise BadParam(f"'steps' must be a list of 1 to {events.MAX_STEPS_PER_POST} steps.")
    if len(steps) > events.MAX_STEPS_PER_POST:
        raise BadParam(f"'steps' holds {len(steps)} steps; at most {events.MAX_STEPS_PER_POST} a post.")
    # A step number twice in one post is taken as a retry within the post: the first is stored
    # (webapp/runs/ingest/external.py `external_steps_log`), as a later post of a stored step is skipped.
    refused: dict[str, str] = {}
    return [_step(step, f"steps[{i}]", refused) for i, step in enumerate(steps)], refused


def refused_text(refused: dict[str, str], *, most: int = 5) -> str:
    """The refused token arrays in words, the first `most` of them by name."""
    named = "; ".join(f"{path}: {problem}" for path, problem in list(refused.items())[:most])
    more = f" (and {len(refused) - most:,} more)" if len(refused) > most else ""
    return f"{len(refused):,} per-token array{'s' if len(refused) != 1 else ''} refused{more}: {named}."


def _step(step: Any, where: str, refused: dict[str, str]) -> dict[str, Any]:
    if not isinstance(step, dict):
        raise BadParam(f"{where} must be an object with 'step', 'metrics' and 'rollouts', not {_kind(step)}.")
    if "step" not in step:
        raise BadParam(f"{where}.step is required.")
    number_ = _integer(step["step"], f"{where}.step", low=0, high=events.MAX_STEP)
    metrics = _numbers(step.get("metrics", {}), f"{where}.metrics", most=events.MAX_METRICS_PER_STEP,
                       longest=events.MAX_METRIC_KEY, what="metric")
    rollouts = step.get("rollouts", [])
    if not isinstance(rollouts, list):
        raise BadParam(f"{where}.rollouts must be a list, not {_kind(rollouts)}.")
    if len(rollouts) > events.MAX_ROLLOUTS_PER_STEP:
        raise BadParam(f"{where}.rollouts holds {len(rollouts):,}; at most {events.MAX_ROLLOUTS_PER_STEP:,} a step.")
    checked = [_rollout(r, f"{where}.rollouts[{j}]", refused) for j, r in enumerate(rollouts)]
    names = {name for r in checked for name in r["rewards"]}
    if len(names) > events.MAX_REWARD_NAMES_PER_STEP:
        raise BadParam(f"{where}.rollouts name {len(names)} rewards; at most {events.MAX_REWARD_NAMES_PER_STEP} a step.")
    modules = {r["module"] for r in checked}
    if len(modules) > events.MAX_MODULES_PER_STEP:
        raise BadParam(f"{where}.rollouts name {len(modules)} modules; at most {events.MAX_MODULES_PER_STEP} a step.")
    spans = _spans(step.get("spans", []), f"{where}.spans")
    return {"step": number_, "metrics": metrics, "rollouts": checked, **({"spans": spans} if spans else {})}


def _spans(spans: Any, where: str) -> list[dict[str, Any]]:
    """A step's timeline bars (trainer/run/events.py `span_checked`); one that is not a bar is refused."""
    if not isinstance(spans, list):
        raise BadParam(f"{where} must be a list, not {_kind(spans)}.")
    if len(spans) > events.MAX_SPANS_PER_STEP:
        raise BadParam(f"{where} holds {len(spans):,}; at most {events.MAX_SPANS_PER_STEP} a step.")
    checked = []
    for k, span in enumerate(spans):
        bar = events.span_checked(span)
        if bar is None:
            raise BadParam(f"{where}[{k}] must be a bar: a lane of 1 to {events.MAX_LANE} characters, a name of 1 "
                           f"to {events.MAX_SPAN_NAME}, a finite start and end (seconds), and optionally a whole "
                           "policy_version.")
        checked.append(bar)
    return checked


def _numbers(values: Any, where: str, *, most: int, longest: int, what: str) -> dict[str, float | None]:
    if not isinstance(values, dict):
        raise BadParam(f"{where} must be an object of {what} name -> number or null, not {_kind(values)}.")
    if len(values) > most:
        raise BadParam(f"{where} holds {len(values)} {what}s; at most {most}.")
    checked = {}
    for key, value in values.items():
        if not 1 <= len(key) <= longest:
            raise BadParam(f"{where}: a {what} name has 1 to {longest} characters ({key[:40]!r}... has {len(key)}).")
        checked[key] = number(value, f"{where}[{key[:80]!r}]")
    return checked


def _rollout(rollout: Any, where: str, refused: dict[str, str]) -> dict[str, Any]:
    if not isinstance(rollout, dict):
        raise BadParam(f"{where} must be an object with 'prompt', 'completion' and 'rewards', not {_kind(rollout)}.")
    for key in ("prompt", "completion"):
        if key not in rollout:
            raise BadParam(f"{where}.{key} is required: a string or a list of chat messages.")
    checked = {
        "prompt": _text(rollout["prompt"], f"{where}.prompt"),
        "completion": _text(rollout["completion"], f"{where}.completion"),
        "rewards": _numbers(rollout.get("rewards", {}), f"{where}.rewards", most=events.MAX_REWARDS_PER_ROLLOUT,
                            longest=events.MAX_REWARD_NAME, what="reward"),
        "advantage": number(rollout.get("advantage"), f"{where}.advantage"),
        "group": _group(rollout.get("group"), f"{where}.group"),
        "example_id": _optional_text(rollout.get("example_id"), f"{where}.example_id", longest=events.MAX_EXAMPLE_ID),
        "module": _optional_text(rollout.get("module"), f"{where}.module", longest=events.MAX_MODULE),
    }
    if checked["module"] == "":
        raise BadParam(f"{where}.module must not be empty (leave it out for the default, 'completion').")
    if "reward" in rollout:
        checked["reward"] = number(rollout["reward"], f"{where}.reward")
    arrays, problems = token_arrays(rollout)
    checked.update(arrays)
    refused.update({f"{where}.{key}": problem for key, problem in problems.items()})
    return checked


def token_arrays(rollout: dict[str, Any]) -> tuple[dict[str, list], dict[str, str]]:
    """A rollout's good per-token arrays (`tokens`: each token's text; `logprobs`, `entropies`: one
    finite number per token) and the problems of the bad ones, by key. Bad tokens take the arrays that
    need them along: their values would belong to no token. The SDK checks the same (cohort/sdk/values.py)."""
    arrays: dict[str, list] = {}
    problems: dict[str, str] = {}
    tokens = rollout.get("tokens")
    if tokens is not None:
        problem = _tokens_problem(tokens)
        if problem:
            problems["tokens"] = problem + " (its logprobs and entropies are left out with it)" if (
                rollout.get("logprobs") is not None or rollout.get("entropies") is not None) else problem
        else:
            arrays["tokens"] = [piece.replace("\x00", "\ufffd") for piece in tokens]
    for key, low, high in (("logprobs", -math.inf, events.MAX_LOGPROB), ("entropies", 0.0, math.inf)):
        values = rollout.get(key)
        if values is None or "tokens" in problems:
            continue
        problem = ("needs tokens: it holds one value per token" if tokens is None
                   else _values_problem(values, len(tokens), low, high))
        if problem:
            problems[key] = problem
        else:
            arrays[key] = [float(v) for v in values]
    return arrays, problems


def _tokens_problem(tokens: Any) -> str | None:
    if not isinstance(tokens, list):
        return f"must be a list of strings (each token's text), not {_kind(tokens)}"
    if len(tokens) > events.MAX_TOKENS:
        return f"holds {len(tokens):,} tokens; at most {events.MAX_TOKENS:,}"
    for i, piece in enumerate(tokens):
        if not isinstance(piece, str):
            return f"item {i} must be a string (the token's text), not {_kind(piece)}"
        if len(piece) > events.MAX_PIECE:
            return f"item {i} has {len(piece):,} characters; at most {events.MAX_PIECE:,}"
    return None


def _values_problem(values: Any, count: int, low: float, high: float) -> str | None:
    if not isinstance(values, list):
        return f"must be a list of numbers (one per token), not {_kind(values)}"
    if len(values) != count:
        return f"{len(values):,} values for {count:,} tokens"
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"item {i} must be a number, not {_kind(value)}" + (" (an unknown value has no place here)"
                                                                   if value is None else "")
        try:
            value = float(value)
        except OverflowError:
            return f"item {i} is too large for a number"
        if not math.isfinite(value):
            return f"item {i} is {value}: per-token values must be finite"
        if not low <= value <= high:
            return f"item {i} is {value:g}: " + ("a log-prob is at most 0" if high == events.MAX_LOGPROB
                                              else "an entropy is at least 0")
    return None


def _text(value: Any, where: str) -> str | list[dict[str, str]]:
    if isinstance(value, str):
        if len(value) > events.MAX_TEXT:
            raise BadParam(f"{where} has {len(value):,} characters; at most {events.MAX_TEXT:,}.")
        return value
    if not isinstance(value, list):
        raise BadParam(f"{where} must be a string or a list of chat messages, not {_kind(value)}.")
    messages, size = [], 0
    for k, message in enumerate(value):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise BadParam(f"{where}[{k}] must be a chat message {{\"role\": str, \"content\": str}}.")
        size += len(message["role"]) + len(message["content"])
        messages.append({"role": message["role"], "content": message["content"]})
    if size > events.MAX_TEXT:
        raise BadParam(f"{where} has {size:,} characters of messages; at most {events.MAX_TEXT:,}.")
    return messages


def _group(value: Any, where: str) -> str | int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        if len(value) > events.MAX_EXAMPLE_ID:
            raise BadParam(f"{where} has at most {events.MAX_EXAMPLE_ID} characters ({len(value):,} given).")
        return value
    raise BadParam(f"{where} must be a string or an integer, not {_kind(value)}.")


def _optional_text(value: Any, where: str, *, longest: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadParam(f"{where} must be a string, not {_kind(value)}.")
    if len(value) > longest:
        raise BadParam(f"{where} has at most {longest} characters ({len(value):,} given).")
    return value
