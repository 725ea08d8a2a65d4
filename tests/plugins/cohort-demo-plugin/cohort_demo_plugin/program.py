"""`demo_echo`: read a question, answer with one word. Small enough for Cohort's tiny model.

It reads uploaded rows with the fields `question` and `answer` and declares no dataset kind of
Cohort's, so the web app offers a generic kind built from `example_fields` for its dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from trainer.rollouts.prompts import chat_messages
from trainer.rollouts.sampling import StepResult


@dataclass(frozen=True)
class EchoState:
    question: str
    answer: str | None = None
    done: bool = False


class DemoEcho:
    """An `AgentProgram` class: metadata as class attributes, as in Cohort's built-in programs."""

    name = "demo_echo"
    title = "Demo: answer in one word (test plugin)"
    description = "One module reads the question and answers with its first word."
    agents = ("echo",)
    example_fields = ("question", "answer")
    dataset_kind = None
    default_rewards = ({"name": "demo_overlap", "weight": 1.0, "params": {}},
                       {"name": "demo_len", "weight": 1.0, "params": {"limit": 20}})
    tokenizer_corpus = ("Question: say apple\napple", "Question: say river\nriver")
    suggested_config = {"temperature": 2.0, "max_new_tokens": 3, "max_context_length": 64, "group_size": 4,
                        "rollouts_per_example": 4, "examples_per_step": 2, "steps": 3, "micro_batch_size": 32,
                        "eval_every": 0}

    def __init__(self, title: str | None = None):
        if title:
            self.title = title

    def start(self, example: dict[str, Any]) -> EchoState:
        return EchoState(question=example["question"])

    def has_next(self, state: EchoState) -> bool:
        return not state.done

    def next_agent(self, state: EchoState) -> str:
        return "echo"

    def process_prompt(self, state: EchoState, agent: str):
        return chat_messages("Answer with one word.", f"Question: {state.question}")

    def step(self, state: EchoState, agent: str, completion: str) -> StepResult:
        words = (completion or "").split()
        if not words:
            return StepResult(replace(state, done=True), False, None)
        return StepResult(replace(state, answer=words[0], done=True), True, words[0])

    def final_output(self, state: EchoState) -> str | None:
        return state.answer


FACTORY_CALLS: list[dict[str, Any]] = []  # what demo_factory was called with (the tests count the calls)


def demo_factory(corpus_path: str | None = None) -> DemoEcho:
    """A factory entry point: Cohort calls it with the options its signature accepts."""
    FACTORY_CALLS.append({"corpus_path": corpus_path})
    return DemoEcho(title=f"Demo from a factory (corpus: {corpus_path or 'none'})")
