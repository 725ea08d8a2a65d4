"""The step-event contract: what a trainer reports about a run, and the bounds every reader holds it to.

A trainer's events are JSON objects, one a line of its `events.jsonl`, each with a `type`: `status`,
`step` (with its rollouts, their module calls and, when the run keeps them, each call's per-token
details) and `prompts`. Cohort's trainer writes them (`trainer/run/reporting.py`); the web app's
ingest stores them; a trainer elsewhere posts the logging API's form of a step (prompt, completion,
rewards per rollout), which the API checks, and the SDK checks before it sends. All of them read the
bounds below from this module when they check, so each bound is declared once and a change here is
a change everywhere. This module imports nothing outside the standard library: the trainer, `webapp/`
and `cohort/` (whose SDK is standard library only) all import it.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal, NotRequired, TypedDict

# --- bounds ----------------------------------------------------------------------------------------

# The largest value of a PostgreSQL integer column: a step, a run's whole-number settings (its steps
# above all), a sweep's sampler seed and options all end in one.
INT32_MAX = 2**31 - 1
MAX_STEP = INT32_MAX

# A step.
MAX_METRICS_PER_STEP, MAX_METRIC_KEY = 500, 200
MAX_ROLLOUTS_PER_STEP = 4096
# Distinct reward names and modules of one step: each adds derived metric keys (reward/<name>, three or
# four per module), which must stay in proportion to the metrics a step may send.
MAX_REWARD_NAMES_PER_STEP = MAX_MODULES_PER_STEP = 32

# A rollout, and its module calls.
MAX_REWARDS_PER_ROLLOUT, MAX_REWARD_NAME = 32, 100
MAX_TEXT = 100_000  # characters of a prompt or a completion (a list of messages: all of their text)
MAX_MODULE, MAX_EXAMPLE_ID = 100, 200

# A step's timeline (trainer/run/pipeline.py `StepSpans`): at most MAX_SPANS_PER_STEP bars, each on a lane
# named in at most MAX_LANE characters and called at most MAX_SPAN_NAME.
MAX_SPANS_PER_STEP, MAX_LANE, MAX_SPAN_NAME = 64, 50, 200

# A call's per-token details: at most MAX_TOKENS tokens, each token's text at most MAX_PIECE characters;
# a log-prob at most MAX_LOGPROB (0, and rounding), an entropy at least 0; all finite.
MAX_TOKENS, MAX_PIECE = 32_768, 1_000
MAX_LOGPROB = 1e-3
TOKEN_ARRAYS = ("tokens", "logprobs", "entropies")  # a logged rollout's per-token arrays

# A run as a trainer elsewhere starts it (the logging API, the SDK's `cohort.init`), and its labels
# wherever it starts (the launch form and the API too).
CLIENT_ID_PATTERN = r"[A-Za-z0-9_.-]{1,64}"
SLUG_PATTERN = r"[-a-zA-Z0-9_]+"
MAX_TASK, MAX_ORIGIN, MAX_ERROR = 100, 40, 10_000
MAX_NAME_CHARS, MAX_NOTES_CHARS = 200, 20_000
MAX_TAGS, MAX_TAG_CHARS = 20, 40
MAX_TOTAL_STEPS = 10_000_000
MAX_CONFIG_BYTES = 64 * 1024

# The origins of runs read from another trainer's files (trainer/importers): a copy of a source that may
# grow, so importing it again updates the run, and a new step reopens it (webapp/runs/ingest/external.py).
IMPORT_ORIGINS = ("wandb", "tensorboard", "verl")

# A post of the logging API carries at most this many steps.
MAX_STEPS_PER_POST = 100


def finite_or_none(value: Any) -> float | None:
    """A metric, a reward, a log-prob as every reader keeps it: a finite float (from any real number,
    numpy's too), or None for None, NaN, the infinities and what is no number (JSON has no spelling for
    NaN, and no float column takes it)."""
    if not isinstance(value, numbers.Real):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def step_in_bounds(step: Any) -> bool:
    """A step number every reader stores: a whole number from 0 to MAX_STEP (never a bool)."""
    return isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= MAX_STEP


# --- the events, as the trainer writes them -------------------------------------------------------


class StatusEvent(TypedDict):
    """The run's life: `running` when an attempt starts (with what it trains on), then how it ended
    (`succeeded`, `failed` with its error, `cancelled`)."""

    type: Literal["status"]
    state: str
    step: NotRequired[int]
    attempt: NotRequired[int]
    total_steps: NotRequired[int]
    gpus: NotRequired[int]
    processes: NotRequired[int]
    error: NotRequired[str]


class TokensEvent(TypedDict):
    """A call's per-token details: every list but `topk` and `bytes` has one entry per piece; `trainer`,
    `entropy` and `topk` only on calls the update scored (trainer/run/token_details.py says how)."""

    pieces: list[str]
    sampler: NotRequired[list[float | None]]
    trainer: NotRequired[list[float | None]]
    entropy: NotRequired[list[float | None]]
    topk: NotRequired[list[list[Any]]]
    bytes: NotRequired[list[list[Any]]]


class CallEvent(TypedDict):
    """One module call of a rollout (trainer/rollouts/trajectory.py `ModuleCall.to_dict`)."""

    call_id: str
    parent_id: str | None
    module: str
    invocation_index: int
    prompt: str
    messages: list[dict[str, Any]] | None
    completion: str
    parsed_ok: bool
    parsed: Any
    specific_reward: float | None
    propagated_reward: float | None
    reward: float | None
    advantage: float | None
    group_id: str | None
    tokens: NotRequired[TokensEvent]


class RolloutEvent(TypedDict):
    """One rollout of a step (`Trajectory.to_dict`): its example, its calls, its rewards."""

    trajectory_id: str
    parent_id: str | None
    example_id: str
    calls: list[CallEvent]
    rewards: dict[str, float | None]
    total_reward: float | None
    reward: float | None
    final_output: Any
    failed: bool
    teacher: str | None
    fork_point: Any
    group_id: str | None
    policy_version: NotRequired[int | None]  # the updates its sampler's weights had had (trainer/run/pipeline.py)
    error: str | None


class GroupMemberEvent(TypedDict):
    call_id: str
    trajectory_id: str
    padded: bool
    duplicated: bool
    advantage: float | None
    reward: float | None
    reward_components: dict[str, float | None]


class GroupEvent(TypedDict):
    """A module-level group of the step (trainer/algorithms/groups.py `ModuleGroup.to_dict`)."""

    group_id: str
    example_id: str
    module: str
    invocation_index: int | None
    kind: str
    reward_mean: float | None
    reward_var: float | None
    similarity: float | None
    members: list[GroupMemberEvent]


class SpanEvent(TypedDict):
    """One bar of the run's timeline: what one process did from `start` to `end` (seconds since the
    epoch, the trainer's clock) during the step; `policy_version` on a generation, the weights it sampled with."""

    lane: str
    name: str
    start: float
    end: float
    policy_version: NotRequired[int]


class StepEvent(TypedDict):
    """One finished training step, keyed by (attempt, step): storing it twice stores it once."""

    type: Literal["step"]
    attempt: int
    step: int
    metrics: dict[str, float | None]
    rollouts: list[RolloutEvent]
    groups: list[GroupEvent]
    spans: NotRequired[list[SpanEvent]]


def span_checked(span: Any) -> SpanEvent | None:
    """A timeline bar as every reader keeps it, or None for one that is not: a lane and a name (text
    within their bounds), a finite start and end (the earlier of the two is its start: a bar is the
    time between them, and a schema cannot say which comes first), and, if any, a whole
    `policy_version` (one that is not makes the bar none)."""
    if not isinstance(span, dict):
        return None
    lane, name = span.get("lane"), span.get("name")
    start, end = finite_or_none(span.get("start")), finite_or_none(span.get("end"))
    if not (isinstance(lane, str) and 0 < len(lane) <= MAX_LANE and isinstance(name, str)
            and 0 < len(name) <= MAX_SPAN_NAME and start is not None and end is not None):
        return None
    version = span.get("policy_version")
    if version is not None and not step_in_bounds(version):
        return None
    checked: SpanEvent = {"lane": lane, "name": name, "start": min(start, end), "end": max(start, end)}
    if version is not None:
        checked["policy_version"] = version
    return checked
