"""Grade-school math (GSM8K) with one solver module (GDPO paper 002, Section 4.2: a binary
correctness reward on the extracted final answer, plus a length reward conditioned on it, Eq. 8).

The module solves step by step and ends with `#### <number>` (GSM8K's own marker) or
`Answer: <number>`. Without such a marker followed by a number the completion does not parse (a
format failure). The number is read with `trainer.rewards.numeric.extract_final_number`, the very
function `numeric_match` uses, so the parsed answer is the one the reward scores. Parsed output and
final output: `{"answer": <number>, "text": <completion>}` (integers as ints).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from trainer.programs.base import Module, SingleModuleProgram
from trainer.programs.registry import register_program
from trainer.rewards.numeric import extract_final_number

_MARKER = re.compile(r"####|\banswer\s*(?:is|:|=)", re.IGNORECASE)
_DIGIT = re.compile(r"\d")


def solve_prompt(question: str) -> str:
    return f"Solve the problem step by step, then end with '#### <number>'.\nProblem: {question}\nSolution:"


def parse_solution(text: str) -> tuple[bool, dict[str, Any] | None]:
    markers = list(_MARKER.finditer(text))
    # The format: the last marker has a number after it on its line ("#### 18", "Answer: 18").
    committed = bool(markers) and _DIGIT.search(text[markers[-1].end() :].split("\n", 1)[0]) is not None
    number = extract_final_number(text) if committed else None
    if number is None:
        return False, None
    return True, {
        "answer": int(number) if number.is_integer() and abs(number) < 2**53 else number,
        "text": text,
    }


@register_program
class MathSolver(SingleModuleProgram):
    name = "math"
    title = "Math word problems (GSM8K)"
    description = "One module reasons step by step and ends with '#### <number>'; scored on the number."
    agents = ("solver",)
    dataset_kind = "math"
    example_fields = ("question",)
    gold_fields = ("answer",)
    default_rewards = (
        {"name": "numeric_match", "params": {"prediction_field": "answer"}},
        # GDPO 4.2.1: the length reward counts only for correct answers (Eq. 8 with t = 1).
        {"name": "length", "params": {"limit": 400}, "condition_on": "numeric_match", "threshold": 1.0},
    )

    def __init__(self) -> None:
        self.module = Module("solver", solve_prompt, parse_solution, "problem -> steps, #### <number>")

    def final(self, example: Mapping[str, Any], completion: str, parsed: Any) -> dict[str, Any]:
        return dict(parsed)
