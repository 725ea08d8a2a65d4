"""Replay one module of a stored trajectory: MHGPO's fork at an agent (paper 001, Algorithm 2
``fork_on``), started from a recorded trajectory instead of from the question.

``replay_call`` answers every call before ``position`` with the completion the trajectory recorded
(checking that the program asks the same module, with the same prompt, in the same order: a program
that goes elsewhere cannot be replayed, and says so in a ``ReplayMismatch``), samples G completions
for the call at ``position`` from ``generate``, and continues each of the G forks one-to-one, as
``fork_on`` does after its fork agent. The prefix calls are the same ``ModuleCall`` objects in every
fork, carrying the recorded texts byte for byte.

The rewards are the run's own: ``trainer.algorithms.scoring.BatchScorer.score``, which the training
loop calls on every step's rollouts (the caller scores what this returns; see
``trainer.run.replay``). Like the engine (``trainer.rollouts.engine``), a program method that raises
inside a fork fails that fork alone, with the error in ``Trajectory.error``; a completion that does not
parse ends its fork there (MMGRPO 3.1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainer.rollouts.failures import RunAbort, describe_error
from trainer.rollouts.program import AgentProgram, Generate, LinearChain  # noqa: F401 - LinearChain: the doctests
from trainer.rollouts.program import numbered as _numbered  # noqa: F401 - the doctests' LM
from trainer.rollouts.prompts import raw_text
from trainer.rollouts.trajectory import ModuleCall, Trajectory

__all__ = ["MAX_GROUP_SIZE", "RecordedCall", "ReplayMismatch", "replay_call"]

MAX_GROUP_SIZE = 16
"""The most alternatives one replay samples (the web app's bound too)."""


class ReplayMismatch(ValueError):
    """The program does not retrace the stored trajectory: another module, another prompt, a stored
    completion that no longer parses, or the program stopping early. The message says where."""


@dataclass(frozen=True)
class RecordedCall:
    """One stored call as the replay needs it: the module, the prompt text the model saw, the
    completion. Example: ``RecordedCall("rewriter", "rewriter: q?", "rew0")``."""

    module: str
    prompt: str
    completion: str


@dataclass
class _Fork:
    index: int
    state: Any
    calls: list[ModuleCall]
    counts: dict[str, int]
    failed: bool = False
    error: str | None = None
    done: bool = False


def _text(prompt: Any) -> str:
    # The engine stores a rendered prompt as its text and a bare message list as its raw text.
    return str(prompt) if isinstance(prompt, str) else raw_text(prompt)


def _first_difference(a: str, b: str) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"first difference at character {at}: stored {a[at:at + 40]!r}, now {b[at:at + 40]!r}"


def _guarded(where: str, method: Callable[..., Any], *args: Any) -> Any:
    """A prefix call of the program: an exception there means the trajectory cannot be replayed."""
    try:
        return method(*args)
    except RunAbort:
        raise
    except Exception as exc:
        raise ReplayMismatch(f"the program raised while replaying the stored calls: {describe_error(exc, where)}") from exc


def _replay_prefix(program: AgentProgram, example: Any, recorded: Sequence[RecordedCall], position: int,
                   example_id: str) -> tuple[Any, list[ModuleCall], dict[str, int], Any]:
    """The state after the recorded calls before ``position``, those calls, the per-module counts,
    and the prompt of the call at ``position`` (checked against the stored one)."""
    state = _guarded("program start", program.start, example)
    calls: list[ModuleCall] = []
    counts: dict[str, int] = {}
    for i, rec in enumerate(recorded[: position + 1]):
        if not _guarded("program has_next", program.has_next, state):
            raise ReplayMismatch(f"the program finished after {i} calls, but the stored trajectory has a call "
                                 f"{i} ({rec.module}): it does not replay deterministically")
        agent = _guarded("program next_agent", program.next_agent, state)
        if agent != rec.module:
            raise ReplayMismatch(f"call {i}: the program asks module {agent!r}, the stored trajectory {rec.module!r}: "
                                 "it does not replay deterministically")
        prompt = _guarded(f"program process_prompt of module {agent!r}", program.process_prompt, state, agent)
        if _text(prompt) != rec.prompt:
            raise ReplayMismatch(f"call {i} ({agent}): the program builds another prompt than the stored one "
                                 f"({_first_difference(rec.prompt, _text(prompt))}): it does not replay "
                                 "deterministically")
        if i == position:
            return state, calls, counts, prompt
        result = _guarded(f"program step of module {agent!r}", program.step, state, agent, rec.completion)
        if not result.parsed_ok:
            raise ReplayMismatch(f"call {i} ({agent}): its stored completion no longer parses, so the stored "
                                 "trajectory cannot be retraced")
        index = counts.get(agent, 0)
        calls.append(ModuleCall(
            module=agent, invocation_index=index, prompt=rec.prompt, completion=rec.completion, parsed_ok=True,
            parsed=result.parsed, messages=_messages(prompt), call_id=f"{example_id}/replay/c{i}",
            parent_id=calls[-1].call_id if calls else None, group_id=None))
        counts[agent] = index + 1
        state = result.state
    raise AssertionError("unreachable: the loop returns at position")


def _messages(prompt: Any) -> list[dict[str, str]] | None:
    messages = getattr(prompt, "messages", None) if isinstance(prompt, str) else prompt
    return [dict(m) for m in messages] if messages is not None else None


def _step(program: AgentProgram, fork: _Fork, agent: str, prompt: Any, completion: str, call_id: str,
          group_id: str | None) -> None:
    """Reads one completion into the fork (the engine's ``_extend``, in place)."""
    index = fork.counts.get(agent, 0)
    parsed_ok, parsed = False, None
    try:
        result = program.step(fork.state, agent, completion)
        fork.state, parsed_ok, parsed = result.state, bool(result.parsed_ok), result.parsed
    except RunAbort:
        raise
    except Exception as exc:  # this fork ends at the call, not parsed, with the error
        fork.error = describe_error(exc, f"program step of module {agent!r}")
    fork.calls.append(ModuleCall(
        module=agent, invocation_index=index, prompt=_text(prompt), completion=completion, parsed_ok=parsed_ok,
        parsed=parsed, messages=_messages(prompt), call_id=call_id,
        parent_id=fork.calls[-1].call_id if fork.calls else None, group_id=group_id))
    fork.counts[agent] = index + 1
    fork.failed = not parsed_ok


def _next(program: AgentProgram, fork: _Fork, max_calls: int) -> tuple[str, Any] | None:
    try:
        if not program.has_next(fork.state):
            return None
        if len(fork.calls) >= max_calls:
            raise RuntimeError(f"a replayed fork made {max_calls} calls without finishing; check the program's has_next")
        agent = program.next_agent(fork.state)
        return agent, program.process_prompt(fork.state, agent)
    except (RunAbort, RuntimeError):
        raise
    except Exception as exc:
        fork.failed, fork.error = True, describe_error(exc, "program next call")
        return None


def replay_call(program: AgentProgram, example: Any, recorded: Sequence[RecordedCall], position: int, *,
                group_size: int, generate: Generate, example_id: str = "0", max_calls: int = 64) -> list[Trajectory]:
    """G new trajectories of ``example`` that share the recorded calls before ``position``, each with
    a fresh sample at ``position`` and fresh one-to-one calls after it (MHGPO Algorithm 2's fork, at
    the call ``position`` of a stored trajectory). Raises ``ReplayMismatch`` when the program does not
    retrace the recorded calls, ``ValueError`` for a position or group size out of range.

    Example (rewriter -> reranker -> answerer, replaying the reranker of a stored trajectory, G=2)::

        >>> chain = LinearChain(("rewriter", "reranker", "answerer"))
        >>> stored = [RecordedCall("rewriter", "rewriter: q?", "kept"),
        ...           RecordedCall("reranker", "reranker: q? | kept", "old"),
        ...           RecordedCall("answerer", "answerer: q? | kept | old", "old answer")]
        >>> forks = replay_call(chain, "q?", stored, 1, group_size=2, generate=_numbered, example_id="q")
        >>> [[c.completion for c in t.calls] for t in forks]
        [['kept', 'rer0', 'ans0'], ['kept', 'rer1', 'ans1']]
        >>> forks[1].calls[0] is forks[0].calls[0], forks[1].parent_id, [t.final_output for t in forks]
        (True, 'q/replay:reranker/t0', ['ans0', 'ans1'])
    """
    if not 0 <= position < len(recorded):
        raise ValueError(f"call position {position} is outside the stored trajectory's {len(recorded)} calls")
    if not 1 <= group_size <= MAX_GROUP_SIZE:
        raise ValueError(f"group_size must be between 1 and {MAX_GROUP_SIZE}, got {group_size}")
    state, prefix, counts, prompt = _replay_prefix(program, example, recorded, position, example_id)
    agent = recorded[position].module
    prefix_id = f"{example_id}/replay:{agent}"
    completions = list(generate(agent, [prompt] * group_size))
    if len(completions) != group_size:
        raise ValueError(f"generate returned {len(completions)} completions for {group_size} prompts")
    forks = [_Fork(f, state, list(prefix), dict(counts)) for f in range(group_size)]
    group = f"{prefix_id}/{agent}#{counts.get(agent, 0)}"  # the G fork calls: one homogeneous group
    for fork, completion in zip(forks, completions, strict=True):
        _step(program, fork, agent, prompt, completion, f"{prefix_id}/f{fork.index}/c{position}", group)
    # One-to-one after the fork; one generate call per agent per round, across the forks.
    while True:
        requests: dict[str, list[tuple[_Fork, Any]]] = {}
        for fork in forks:
            if fork.done or fork.failed:
                continue
            nxt = _next(program, fork, max_calls)
            if nxt is None:
                fork.done = True
                continue
            requests.setdefault(nxt[0], []).append((fork, nxt[1]))
        if not requests:
            break
        for name, items in requests.items():
            outs = list(generate(name, [p for _, p in items]))
            if len(outs) != len(items):
                raise ValueError(f"generate returned {len(outs)} completions for {len(items)} prompts")
            for (fork, p), completion in zip(items, outs, strict=True):
                _step(program, fork, name, p, completion, f"{prefix_id}/f{fork.index}/c{len(fork.calls)}",
                      f"{prefix_id}/{name}#{fork.counts.get(name, 0)}")
    return [_finish(program, fork, prefix_id, example_id, agent) for fork in forks]


def _finish(program: AgentProgram, fork: _Fork, prefix_id: str, example_id: str, agent: str) -> Trajectory:
    output, failed, error = None, fork.failed, fork.error
    if not failed:
        try:
            output = program.final_output(fork.state)
        except RunAbort:
            raise
        except Exception as exc:
            failed, error = True, describe_error(exc, "program final_output")
    return Trajectory(example_id=example_id, calls=list(fork.calls), final_output=output, failed=failed,
                      fork_point=agent, group_id=prefix_id, trajectory_id=f"{prefix_id}/t{fork.index}",
                      parent_id=f"{prefix_id}/t0" if fork.index > 0 else None, error=error)
