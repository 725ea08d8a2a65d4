"""Grade-school math (GSM8K): one module solves the problem and ends with '#### <number>' (the GDPO
math setup, Section 4.2: correctness plus a length reward)."""

from __future__ import annotations

from typing import Any

from trainer.programs.registry import register_program
from trainer.programs.single import SingleModuleProgram
from trainer.rewards.numeric import extract_final_number


@register_program
class MathSolver(SingleModuleProgram):
    name = "math"
    title = "Math word problems (GSM8K)"
    description = "One module reasons step by step and ends with '#### <number>'."
    module = "solver"
    agents = ("solver",)
    dataset_kind = "math"
    example_fields = ("question", "answer")
    default_rewards = (
        {"name": "numeric_match", "weight": 1.0, "params": {}},
        {"name": "length", "weight": 1.0, "params": {"limit": 400}, "condition_on": "numeric_match", "threshold": 1.0},
    )

    def instructions(self, example: dict[str, Any]) -> str:
        return "Solve the problem step by step. End with '#### <number>'."

    def inputs(self, example: dict[str, Any]) -> str:
        return f"Problem: {example['question']}"

    def parse(self, completion: str) -> tuple[bool, Any]:
        number = extract_final_number(completion)
        return number is not None, number

    def output(self, completion: str, parsed: Any) -> Any:
        # The rewards see the whole solution: numeric match reads its final number, length its size.
        return completion
