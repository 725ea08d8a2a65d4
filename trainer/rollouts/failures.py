"""What happens when a program or a reward raises during a rollout.

A program's code (``AgentProgram.start``, ``has_next``, ``next_agent``, ``process_prompt``, ``step``,
``final_output``) or a reward function that raises fails *that trajectory*, not the run: the trajectory
ends there with the calls made so far (like a format failure, MMGRPO Section 3.1), is ``failed``, gets
the format-failure fallback reward, and records what happened in ``Trajectory.error`` (text built by
``describe_error``), which the dashboard's trajectory inspector shows. One bad example, or a tool that
times out now and then, should cost a few rollouts, not a day of training.

A bug that fails most rollouts, though, must stop the run before it trains on fallback rewards alone:
``raise_if_mostly_errors`` fails the step when more than half of its trajectories raised, with the
first error as the run's error.

Two kinds of exception are never turned into a trajectory error:

- the engine's own errors (``generate`` returning the wrong number of completions, a program exceeding
  ``max_calls``, a misconfiguration): they are raised outside the program's code and propagate;
- ``RunAbort``, which a program (or a reward) raises on purpose to stop the whole run, e.g. when a
  DSPy program replayed for an MHGPO fork diverges from its record (``trainer.dspy.ReplayDivergence``),
  since every later step would be wrong too. Subclass it for such errors.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from trainer.rollouts.trajectory import Trajectory

__all__ = [
    "MAX_ERROR_CHARS",
    "RolloutErrors",
    "RunAbort",
    "call_rewards",
    "describe_error",
    "raise_if_mostly_errors",
    "reward_value",
]

MAX_ERROR_CHARS = 2000
"""The most characters ``describe_error`` returns (an event log line and a database row per rollout)."""
MAX_MESSAGE_CHARS = 800
TRACEBACK_FRAMES = 3


class RunAbort(Exception):
    """Raised by a program (or a reward) to fail the whole run at once instead of one trajectory.

    Any other exception from a program's or a reward's code fails only the trajectory it happened
    in. Raise (a subclass of) ``RunAbort`` when the error means every rollout of the run is wrong,
    e.g. ``trainer.dspy.ReplayDivergence``: a program that is not deterministic given its LM answers
    cannot be forked by replay at all.

    Example::

        class LostIndex(RunAbort):
            '''The retrieval index disappeared: no rollout can be right any more.'''
    """


class RolloutErrors(RuntimeError):
    """More than half of a step's trajectories raised: a bug in the program or a reward, not bad
    luck. Fails the run with the first error (``Trainer.run`` reports it as the run's error)."""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_error(exc: BaseException, where: str) -> str:
    """The text stored in ``Trajectory.error``: ``"Type: message"``, where it happened, and the last
    ``TRACEBACK_FRAMES`` frames of the traceback, at most ``MAX_ERROR_CHARS`` characters (a long
    message is clipped, then the traceback is cut from its start).

    The first frame of ``exc.__traceback__`` is the one that caught it (the engine's), so it is left
    out: the frames shown are the program's or the reward's own.

    Example::

        >>> try:
        ...     {}["answer"]
        ... except KeyError as exc:
        ...     print(describe_error(exc, "reward 'exact_match'").splitlines()[:2])
        ["KeyError: 'answer'", "  in reward 'exact_match'"]
    """
    message = str(exc)
    headline = _clip(f"{type(exc).__name__}: {message}" if message else type(exc).__name__, MAX_MESSAGE_CHARS)
    head = f"{headline}\n  in {where}"
    frames = traceback.extract_tb(exc.__traceback__)[1:][-TRACEBACK_FRAMES:]
    if not frames:
        return _clip(head, MAX_ERROR_CHARS)
    title = f"\nTraceback (most recent call last, {len(frames)} frame{'s' if len(frames) > 1 else ''}):\n"
    body = "".join(traceback.format_list(frames)).rstrip()
    room = MAX_ERROR_CHARS - len(head) - len(title)
    if room < 40:
        return _clip(head, MAX_ERROR_CHARS)
    if len(body) > room:
        body = "…" + body[-(room - 1):]
    return head + title + body


def reward_value(name: str, value: Any) -> float | None:
    """A reward function's return value as the float the trainer stores, or ``None``.

    A reward returns a number (int, float, bool or a NumPy number; NaN counts as unknown later, as
    ever) or ``None``; anything else raises ``TypeError`` naming the reward and what it returned, which
    fails the trajectory like any error in the reward (and the run, when it happens to most of them).

    Example::

        >>> reward_value("f1", True), reward_value("f1", None)
        (1.0, None)
        >>> reward_value("my_reward", "abc")
        Traceback (most recent call last):
        ...
        TypeError: reward 'my_reward' returned 'abc' (str); a reward returns a float or None
    """
    if value is None:
        return None
    if isinstance(value, int | float | np.integer | np.floating | np.bool_):  # bool is an int
        return float(value)
    shown = _clip(repr(value), 200)
    raise TypeError(f"reward {name!r} returned {shown} ({type(value).__name__}); a reward returns a float or None")


def call_rewards(trajectory: Trajectory, example: Any, rewards: Mapping[str, Callable[..., Any]],
                 names: Sequence[str]) -> str | None:
    """Set ``trajectory.rewards[name] = rewards[name](example, final_output, trajectory)`` for each
    of ``names``, in order. Returns ``None`` when every reward gave a number or ``None``, else the error
    text of the first that raised or returned something else (the later ones are not called): the
    caller fails the trajectory with it. ``RunAbort`` propagates.

    Example::

        >>> t = Trajectory("e", final_output="Paris")
        >>> call_rewards(t, {}, {"one": lambda e, o, t: 1, "bad": lambda e, o, t: "abc"}, ["one", "bad"])
        "TypeError: reward 'bad' returned 'abc' (str); a reward returns a float or None"
        >>> t.rewards
        {'one': 1.0}
    """
    for name in names:
        try:
            value = rewards[name](example, trajectory.final_output, trajectory)
        except RunAbort:
            raise
        except Exception as exc:
            return describe_error(exc, f"reward {name!r}")
        try:
            trajectory.rewards[name] = reward_value(name, value)
        except TypeError as exc:  # our own check: its traceback would only show reward_value
            return f"TypeError: {exc}"
    return None


def raise_if_mostly_errors(trajectories: Sequence[Trajectory], where: str) -> None:
    """Raise ``RolloutErrors`` when more than half of ``trajectories`` raised (have an ``error``).

    Format failures do not count: a completion that does not parse is the model's doing, an error
    is the code's. Each trajectory counts once: an error before an MHGPO fork ends the trunk before
    it forks, so it is one trajectory, not G. ``where`` names the batch ("step 3").

    Example::

        >>> ok, bad = Trajectory("a"), Trajectory("b", failed=True, error="ValueError: x\\n  in program start")
        >>> raise_if_mostly_errors([ok, bad], "step 1")  # half is not more than half
        >>> raise_if_mostly_errors([bad, bad, ok], "step 2")
        Traceback (most recent call last):
        ...
        trainer.rollouts.failures.RolloutErrors: 2 of 3 trajectories raised in step 2; first error (example 'b'): ValueError: x
          in program start
    """
    raised = [t for t in trajectories if t.error]
    if not raised or 2 * len(raised) <= len(trajectories):
        return
    first = raised[0]
    raise RolloutErrors(
        f"{len(raised)} of {len(trajectories)} trajectories raised in {where}; "
        f"first error (example {first.example_id!r}): {first.error}"
    )
