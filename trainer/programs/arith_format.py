"""Short arithmetic with a required answer format: a two-reward task the real model partly solves.

GDPO expects its gain where a model meets each reward partly from the start (Sections 4-5: format
and correctness). `toy_format` does not give that regime (for the tiny random model both rewards are
one rare token away). This task does, for `builtin:smollm2-135m-instruct`: one module, `solve`, asked
"What is 7 + 5?" and told to reply exactly "The answer is <number>.". Its output is
``{"text": <the whole reply>}`` and the suggested rewards are

- ``regex_match`` on ``text`` with pattern ``The answer is -?\\d+\\.?``: the whole reply is the
  required sentence (format, binary);
- ``numeric_match`` on ``text``: the number after the last "answer is" (else the last number) is
  the sum or difference (correctness, binary).

Measured on SmolLM2 before any training (16 problems x 4 samples, temperature 0.7, 24 new tokens):
the format holds in 8 % of replies, the number is right in 31 %; 83 % of replies ramble on to the
token limit ("7 + 7 = 14\\n\\nIn mathematics, ..."). At temperature 1 the format falls to 2 % and
correctness to 20 %. Prompts measured and set aside (format / correct, temperature 0.7):
"Reply with only the number." 0 / 27 %; "Reply in the form 'Answer: <number>'." 0 / 27 %;
"... write the final answer after ####" 0 / 5 % (temperature 1, two-digit operands).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from trainer.config import SMOLLM2_MODEL
from trainer.programs.registry import register_program
from trainer.rollouts.prompts import Message, chat_messages
from trainer.rollouts.sampling import StepResult

INSTRUCTIONS = "Reply in the form 'The answer is <number>.' and nothing else."
DEV_SIZE = 32
TRAIN_SIZE = 512


def arithmetic_examples(n: int, *, seed: int = 0, low: int = 1, high: int = 9) -> list[dict[str, Any]]:
    """`n` problems `{"id", "question", "answer"}`: a + b or a - b (never below 0), operands in [low, high].

    >>> [(e["question"], e["answer"]) for e in arithmetic_examples(2, seed=1)]
    [('What is 5 - 5?', '0'), ('What is 2 - 1?', '1')]
    """
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(n):
        a, b = (int(x) for x in rng.integers(low, high + 1, size=2))
        if rng.random() < 0.5:
            question, answer = f"What is {a} + {b}?", a + b
        else:
            a, b = max(a, b), min(a, b)
            question, answer = f"What is {a} - {b}?", a - b
        examples.append({"id": f"arith-{i}", "question": question, "answer": str(answer)})
    return examples


@dataclass(frozen=True)
class ArithState:
    question: str
    output: dict[str, str] | None = None
    done: bool = False


@register_program
class ArithFormat:
    name = "arith_format"
    title = "Arithmetic in a required answer format"
    description = ("Two-reward task where a small instruct model starts with partial skill on both: answer "
                   "'What is 7 + 5?' correctly (correctness) as exactly 'The answer is 12.' (format).")
    agents = ("solve",)
    dataset_kind = None
    example_fields = ("question", "answer")
    default_rewards = (
        {"name": "regex_match", "weight": 1.0,
         "params": {"pattern": r"The answer is -?\d+\.?", "prediction_field": "text"}},
        {"name": "numeric_match", "weight": 1.0, "params": {"prediction_field": "text"}},
    )
    # The tiny random model cannot do arithmetic: the task's defaults are the real model's settings.
    suggested_config = {"model": SMOLLM2_MODEL, "temperature": 0.7, "max_new_tokens": 24, "max_context_length": 256,
                        "group_size": 8, "rollouts_per_example": 8, "examples_per_step": 4, "learning_rate": 2e-4,
                        "steps": 40, "micro_batch_size": 16, "eval_every": 10, "eval_size": 32,
                        "rewards": [dict(r) for r in default_rewards]}
    model_suggestions = {SMOLLM2_MODEL: dict(suggested_config)}

    def generate_examples(self, split: str, *, seed: int = 0) -> list[dict[str, Any]]:
        if split == "train":
            return arithmetic_examples(TRAIN_SIZE, seed=seed)
        return arithmetic_examples(DEV_SIZE, seed=seed + 1_000)

    def start(self, example: dict[str, Any]) -> ArithState:
        return ArithState(question=example["question"])

    def has_next(self, state: ArithState) -> bool:
        return not state.done

    def next_agent(self, state: ArithState) -> str:
        return "solve"

    def process_prompt(self, state: ArithState, agent: str) -> list[Message]:
        return chat_messages(INSTRUCTIONS, state.question)

    def step(self, state: ArithState, agent: str, completion: str) -> StepResult:
        output = {"text": completion.strip()}
        return StepResult(replace(state, output=output, done=True), True, output)

    def final_output(self, state: ArithState) -> dict[str, str] | None:
        return state.output
