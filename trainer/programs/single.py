"""Single-module programs: one LM call reads the example and writes the answer.

`SingleModuleProgram` implements the `AgentProgram` protocol once; each program gives its module
name, prompt and parser. A parser returns `(ok, parsed)`; when not ok the trajectory is a format
failure (MMGRPO 3.1) and takes the run's fallback reward.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from trainer.rollouts.prompts import Message, chat_messages
from trainer.rollouts.sampling import StepResult


@dataclass(frozen=True)
class SingleState:
    example: Any
    output: Any = None
    done: bool = False


class SingleModuleProgram:
    module: str = ""
    options: tuple[str, ...] = ()

    @property
    def agents(self) -> tuple[str, ...]:
        return (self.module,)

    def instructions(self, example: dict[str, Any]) -> str:
        """The module's instructions (the system message)."""
        raise NotImplementedError

    def inputs(self, example: dict[str, Any]) -> str:
        """The module's inputs for one example (the user message)."""
        raise NotImplementedError

    def prompt(self, example: dict[str, Any]) -> list[Message]:
        return chat_messages(self.instructions(example), self.inputs(example))

    def parse(self, completion: str) -> tuple[bool, Any]:
        raise NotImplementedError

    def output(self, completion: str, parsed: Any) -> Any:
        """The program's final output, what the rewards score (default: the parsed value)."""
        return parsed

    def start(self, example: dict[str, Any]) -> SingleState:
        return SingleState(example)

    def has_next(self, state: SingleState) -> bool:
        return not state.done

    def next_agent(self, state: SingleState) -> str:
        return self.module

    def process_prompt(self, state: SingleState, agent: str) -> list[Message]:
        return self.prompt(state.example)

    def step(self, state: SingleState, agent: str, completion: str) -> StepResult:
        ok, parsed = self.parse(completion or "")
        return StepResult(replace(state, output=self.output(completion, parsed) if ok else None, done=True),
                          ok, parsed)

    def final_output(self, state: SingleState) -> Any:
        return state.output
