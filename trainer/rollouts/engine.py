"""The rollout engine behind ``trainer.rollouts.sampling.fork_on`` and the MHGPO strategies (paper 001,
Algorithm 2): runs many jobs (one ``fork_on`` of one example each) together, one ``generate`` call per
agent per round across all their branches.

A *branch* is one trajectory in the making. It runs one-to-one until it first reaches its job's fork
agent; there the G completions make G branches (fork f > 0 shares the calls before the fork with fork 0,
as the same ``ModuleCall`` objects). A branch ends when the program has no next agent, when a completion
does not parse (MMGRPO 3.1: kept up to and including that call, ``failed``), or when the program's own
code raises (``trainer.rollouts.failures``): then it is ``failed`` too, with the calls made so far (the call
whose ``step`` raised included, marked not parsed) and the error in ``Trajectory.error``. Each
program call is guarded on its own, so a fork sibling that raises ends only its branch, and an error
before the fork ends the trunk once (one trajectory, not G). ``RunAbort`` and the engine's own errors
(``generate`` returning the wrong count, ``max_calls`` exceeded) propagate and fail the run.

``trainer.rollouts.sampling`` re-exports what callers use; this module is private to it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.rollouts.failures import RunAbort, describe_error
from trainer.rollouts.program import AgentProgram, Generate
from trainer.rollouts.prompts import raw_text
from trainer.rollouts.trajectory import ModuleCall, Trajectory


class _ProgramError(Exception):
    """A program method raised (not ``RunAbort``): ``description`` is its ``describe_error`` text."""

    def __init__(self, description: str):
        super().__init__(description)
        self.description = description


def _call(where: str, method: Callable[..., Any], *args: Any) -> Any:
    """``method(*args)``, with an exception from the program's code turned into ``_ProgramError``
    (``where`` names the method for the error text); ``RunAbort`` propagates untouched."""
    try:
        return method(*args)
    except RunAbort:
        raise
    except Exception as exc:
        raise _ProgramError(describe_error(exc, where)) from exc


@dataclass
class _Job:
    example: Any
    example_id: str
    fork_agent: str | None
    group_size: int
    prefix: str
    next_call: int = 0

    def call_id(self) -> str:
        self.next_call += 1
        return f"{self.prefix}/c{self.next_call - 1}"


@dataclass
class _Branch:
    job: _Job
    fork_index: int
    state: Any
    calls: list[ModuleCall] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    forked: bool = False
    failed: bool = False
    error: str | None = None

    @property
    def trajectory_id(self) -> str:
        return f"{self.job.prefix}/t{self.fork_index}"


def _finish(program: AgentProgram, branch: _Branch) -> Trajectory:
    job = branch.job
    failed, error, output = branch.failed, branch.error, None
    if not failed:
        try:
            output = _call("program final_output", program.final_output, branch.state)
        except _ProgramError as exc:
            failed, error = True, exc.description
    return Trajectory(
        example_id=job.example_id,
        calls=list(branch.calls),
        final_output=output,
        failed=failed,
        fork_point=job.fork_agent if branch.forked else None,
        group_id=job.prefix,
        trajectory_id=branch.trajectory_id,
        parent_id=f"{job.prefix}/t0" if branch.fork_index > 0 else None,
        error=error,
    )


def _next_call(program: AgentProgram, branch: _Branch, max_calls: int) -> tuple[str, Any] | None:
    """(agent, prompt) of the branch's next call; None when the program is done. A program method
    that raises raises ``_ProgramError``; too many calls is the engine's own error (RuntimeError)."""
    if not _call("program has_next", program.has_next, branch.state):
        return None
    if len(branch.calls) >= max_calls:
        raise RuntimeError(
            f"example {branch.job.example_id!r} made {max_calls} calls without finishing; "
            "raise max_calls or check the program's has_next"
        )
    agent = _call("program next_agent", program.next_agent, branch.state)
    prompt = _call(f"program process_prompt of module {agent!r}", program.process_prompt, branch.state, agent)
    return agent, prompt


def _run_jobs(
    program: AgentProgram, jobs: Sequence[_Job], generate: Generate, *, max_calls: int
) -> list[list[Trajectory]]:
    """Run every job's fork_on together, one ``generate`` call per agent per round."""
    done: list[list[tuple[int, Trajectory]]] = [[] for _ in jobs]
    job_index = {id(job): i for i, job in enumerate(jobs)}

    def finish(branch: _Branch) -> None:
        done[job_index[id(branch.job)]].append((branch.fork_index, _finish(program, branch)))

    active = []
    for job in jobs:
        try:
            active.append(_Branch(job, 0, _call("program start", program.start, job.example)))
        except _ProgramError as exc:
            finish(_Branch(job, 0, None, failed=True, error=exc.description))
    while active:
        requests: list[tuple[_Branch, str, Any, int]] = []
        for branch in active:
            try:
                next_call = _next_call(program, branch, max_calls)
            except _ProgramError as exc:
                finish(dataclasses.replace(branch, failed=True, error=exc.description))
                continue
            if next_call is None:
                finish(branch)
                continue
            agent, prompt = next_call
            # Algorithm 2: one-to-one everywhere except the first time the fork agent is reached.
            copies = branch.job.group_size if (not branch.forked and agent == branch.job.fork_agent) else 1
            requests.append((branch, agent, prompt, copies))
        completions = _generate_by_agent(generate, requests)
        active = []
        for (branch, agent, prompt, _), outs in zip(requests, completions, strict=True):
            is_fork = not branch.forked and agent == branch.job.fork_agent
            for f, completion in enumerate(outs):
                child = _extend(program, branch, agent, prompt, completion, is_fork, f)
                if child.failed:
                    finish(child)
                else:
                    active.append(child)
    return [[traj for _, traj in sorted(items, key=lambda item: item[0])] for items in done]


def _generate_by_agent(
    generate: Generate, requests: Sequence[tuple[_Branch, str, Any, int]]
) -> list[list[str]]:
    by_agent: dict[str, list[int]] = {}
    for i, (_, agent, _, _) in enumerate(requests):
        by_agent.setdefault(agent, []).append(i)
    out: list[list[str]] = [[] for _ in requests]
    for agent, indices in by_agent.items():
        prompts = [requests[i][2] for i in indices for _ in range(requests[i][3])]
        completions = list(generate(agent, prompts))
        if len(completions) != len(prompts):
            raise ValueError(f"generate returned {len(completions)} completions for {len(prompts)} prompts")
        pos = 0
        for i in indices:
            out[i] = completions[pos : pos + requests[i][3]]
            pos += requests[i][3]
    return out


def _extend(
    program: AgentProgram, branch: _Branch, agent: str, prompt: Any, completion: str, is_fork: bool, f: int
) -> _Branch:
    job = branch.job
    index = branch.counts.get(agent, 0)
    state, parsed_ok, parsed, error = branch.state, False, None, None
    try:
        result = _call(f"program step of module {agent!r}", program.step, branch.state, agent, completion)
        state, parsed_ok, parsed = result.state, bool(result.parsed_ok), result.parsed
    except _ProgramError as exc:
        error = exc.description  # the call stays, not parsed: the branch ends at it
    # A RenderedPrompt is the text the model saw, carrying its messages; a bare message list (no
    # tokenizer in sight, e.g. a scripted LM in a test) is kept as plain text and its messages.
    text, messages = (prompt, getattr(prompt, "messages", None)) if isinstance(prompt, str) else (raw_text(prompt), prompt)
    call = ModuleCall(
        module=agent,
        invocation_index=index,
        prompt=text,
        completion=completion,
        parsed_ok=parsed_ok,
        messages=[dict(m) for m in messages] if messages is not None else None,
        parsed=parsed,
        call_id=job.call_id(),
        parent_id=branch.calls[-1].call_id if branch.calls else None,
        group_id=f"{job.prefix}/{agent}#{index}",
    )
    # Fork f > 0 is a new trajectory sharing the prefix calls (the same objects) with fork 0.
    return _Branch(
        job=job,
        fork_index=f if is_fork else branch.fork_index,
        state=state,
        calls=[*branch.calls, call],
        counts={**branch.counts, agent: index + 1},
        forked=branch.forked or is_fork,
        failed=not parsed_ok,
        error=error,
    )


def _jobs(
    examples: Sequence[Any], example_ids: Sequence[str] | None, fork_agents: Sequence[str | None], group_size: int
) -> list[_Job]:
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    ids = [str(i) for i in range(len(examples))] if example_ids is None else [str(e) for e in example_ids]
    if len(ids) != len(examples):
        raise ValueError(f"{len(ids)} example_ids for {len(examples)} examples")
    jobs, seen = [], {}
    for example, example_id, agent in zip(examples, ids, fork_agents, strict=True):
        prefix = f"{example_id}/fork:{agent}"
        # The same example twice in a batch (a padded epoch) must not share ids.
        seen[prefix] = seen.get(prefix, 0) + 1
        if seen[prefix] > 1:
            prefix = f"{prefix}@{seen[prefix] - 1}"
        jobs.append(_Job(example, example_id, agent, group_size, prefix))
    return jobs
