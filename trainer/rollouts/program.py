"""What a program is to the trainer: the multi-agent system interface of MHGPO's Algorithm 2
(``AgentProgram``), the LM it calls (``Generate``), what reading a completion returns
(``StepResult``), and ``LinearChain``, the smallest complete program.

Built-in programs (``trainer.programs``), DSPy programs (``trainer.dspy``) and plugins implement
``AgentProgram``; the samplers (``trainer.rollouts.sampling``) run them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from trainer.rollouts.failures import RunAbort

__all__ = ["AgentProgram", "Generate", "LinearChain", "StepResult", "entry_agent", "numbered"]

Generate = Callable[[str, list[str]], Sequence[str]]
"""``generate(agent, prompts)`` returns one completion per prompt (a prompt repeated G times at a fork
must get G independent samples)."""


@dataclass(frozen=True)
class StepResult:
    """What ``AgentProgram.step`` returns: the next state, whether the completion parsed, and the
    parser's output (stored as ``ModuleCall.parsed``).

    Example: ``StepResult(state=("q", ("rewritten",)), parsed_ok=True, parsed="rewritten")``.
    """

    state: Any
    parsed_ok: bool
    parsed: Any = None


@runtime_checkable
class AgentProgram(Protocol):
    """The multi-agent system interface of MHGPO's Algorithm 2.

    ``agents`` lists the agent (module) names in pipeline order (the A_1..A_n that IS and RR range
    over). ``step`` must not mutate ``state``: the G forks all continue from the same state.
    ``LinearChain`` below is a complete minimal implementation.

    Example::

        >>> isinstance(LinearChain(("rewriter", "reranker", "answerer")), AgentProgram)
        True
    """

    agents: Sequence[str]

    def start(self, example: Any) -> Any:
        """The initial state, holding the question (Algorithm 2: o <- q)."""
        ...

    def has_next(self, state: Any) -> bool:
        """MAS.has_next_agent(o)."""
        ...

    def next_agent(self, state: Any) -> str:
        """MAS.next_agent(o): the agent that acts next."""
        ...

    def process_prompt(self, state: Any, agent: str) -> Any:
        """MAS.process_prompt(o, A): the prompt q for ``agent``: chat messages (``trainer.rollouts.prompts``)
        or plain text."""
        ...

    def step(self, state: Any, agent: str, completion: str) -> StepResult:
        """Read ``agent``'s completion o into a new state."""
        ...

    def final_output(self, state: Any) -> Any:
        """The system's final response, for the reward."""
        ...


@dataclass(frozen=True)
class LinearChain:
    """The smallest ``AgentProgram``: each agent of ``agents`` acts once, in order; its prompt holds
    the question and the previous outputs; an empty completion does not parse. A reference for real
    programs (trainer/programs/) and the program of the examples in this module.

    Example::

        >>> chain = LinearChain(("rewriter", "answerer"))
        >>> state = chain.start("Who wrote Hamlet?")
        >>> chain.next_agent(state), chain.process_prompt(state, "rewriter")
        ('rewriter', 'rewriter: Who wrote Hamlet?')
        >>> step = chain.step(state, "rewriter", "Hamlet author")
        >>> step.parsed_ok, chain.process_prompt(step.state, "answerer"), chain.has_next(step.state)
        (True, 'answerer: Who wrote Hamlet? | Hamlet author', True)
    """

    agents: tuple[str, ...]

    def start(self, example: Any) -> tuple[str, tuple[str, ...]]:
        return (str(example), ())

    def has_next(self, state: tuple[str, tuple[str, ...]]) -> bool:
        return len(state[1]) < len(self.agents)

    def next_agent(self, state: tuple[str, tuple[str, ...]]) -> str:
        return self.agents[len(state[1])]

    def process_prompt(self, state: tuple[str, tuple[str, ...]], agent: str) -> str:
        return " | ".join([f"{agent}: {state[0]}", *state[1]])

    def step(self, state: tuple[str, tuple[str, ...]], agent: str, completion: str) -> StepResult:
        text = completion.strip()
        return StepResult((state[0], (*state[1], text)), bool(text), text or None)

    def final_output(self, state: tuple[str, tuple[str, ...]]) -> Any:
        return state[1][-1] if state[1] else None


def numbered(agent: str, prompts: list[str]) -> list[str]:
    # The docstrings' stand-in LM: completion i of a request is "<first 3 letters of agent><i>".
    return [f"{agent[:3]}{i}" for i in range(len(prompts))]


def entry_agent(program: AgentProgram, example: Any) -> str:
    """The first agent to handle ``example`` (Algorithm 3: A_c0 <- MAS.next_agent(q)).

    Example::

        >>> entry_agent(LinearChain(("rewriter", "reranker", "answerer")), "q?")
        'rewriter'
    """
    return program.next_agent(program.start(example))


def _entry_agent_or_none(program: AgentProgram, example: Any) -> str | None:
    """``entry_agent``, or None when the program raises there: the engine starts the example again
    and records that error on its trajectory. ``RunAbort`` propagates."""
    try:
        return entry_agent(program, example)
    except RunAbort:
        raise
    except Exception:
        return None
