"""``word_math``: a two-module DSPy program that SmolLM2-135M-Instruct partly solves, for the MMGRPO
paper's Table 1 at laptop scale (the Experiment page: unadapted, prompt-optimized, MMGRPO,
BetterTogether).

A short word problem ("Mia has 7 cards. Mia gets 2 more cards. How many cards does Mia have now?") goes
through two predictors: ``extract`` writes the calculation ("7 + 2"), ``solve`` computes it and replies
with the number alone. The program returns both. The suggested rewards read the final ``answer``:

- ``regex_match`` with pattern ``-?\\d+\\.?``: the reply is the bare number (format, binary);
- ``numeric_match``: its last number is the right one (correctness, binary).

The examples are generated (add or take away, operands 1-9) and carry the intermediate ``expression``,
as GSM8K carries its rationale: MIPROv2 and ``BootstrapFewShotWithRandomSearch`` may show labeled
demos of it; the rewards never read it.

Prompts use ``PlainChatAdapter``. Measured before any training on 32 dev problems, temperature 0.7, 24
new tokens (format / correct): with ``ChatAdapter``'s marker layout 0.00 / 0.03; plain turns 0.00 /
0.06 (the model explains instead of answering); plain turns with two hand-written demos per module
0.59 / 0.12, with four 0.66 / 0.16. Replying "The answer is N." instead of the bare number: 0.03 /
0.09 zero-shot, 0.91 / 0.19 with two demos, set aside because the bare number lets a labeled demo
(the example's own answer) show the format.
"""

from __future__ import annotations

from typing import Any

import dspy
import numpy as np

from trainer.config import SMOLLM2_MODEL
from trainer.dspy.adapters import PlainChatAdapter
from trainer.dspy.program import DSPyProgram

__all__ = ["WordMath", "WordMathProgram", "word_math", "word_problems"]

EXTRACT_INSTRUCTIONS = "Write the calculation that answers the question, like 3 + 4."
SOLVE_INSTRUCTIONS = "Compute the expression. Reply with only the number."
DEV_SIZE = 64
TRAIN_SIZE = 512
_NAMES = ("Tom", "Ann", "Sam", "Mia", "Ben", "Lea", "Noor", "Ivan")
_ITEMS = ("apples", "pens", "cards", "books", "coins", "eggs", "stamps", "shells")


def word_problems(n: int, *, seed: int = 0, low: int = 1, high: int = 9) -> list[dict[str, Any]]:
    """`n` problems `{"id", "question", "expression", "answer"}`: a + b or a - b (never below 0).

    >>> [(e["expression"], e["answer"]) for e in word_problems(2, seed=3)]
    [('6 + 9', '15'), ('4 - 3', '1')]
    """
    rng = np.random.default_rng(seed)
    problems = []
    for i in range(n):
        a, b = (int(x) for x in rng.integers(low, high + 1, size=2))
        name, item = _NAMES[int(rng.integers(len(_NAMES)))], _ITEMS[int(rng.integers(len(_ITEMS)))]
        if rng.random() < 0.5:
            question = f"{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does {name} have now?"
            expression, answer = f"{a} + {b}", a + b
        else:
            a, b = max(a, b), min(a, b)
            question = f"{name} has {a} {item}. {name} gives away {b} {item}. How many {item} does {name} have left?"
            expression, answer = f"{a} - {b}", a - b
        problems.append({"id": f"word-math-{i}", "question": question, "expression": expression,
                         "answer": str(answer)})
    return problems


class WordMath(dspy.Module):
    """extract (question -> expression), then solve (expression -> answer)."""

    def __init__(self):
        super().__init__()
        self.extract = dspy.Predict(dspy.Signature("question -> expression", EXTRACT_INSTRUCTIONS))
        self.solve = dspy.Predict(dspy.Signature("expression -> answer", SOLVE_INSTRUCTIONS))

    def forward(self, question: str):
        expression = self.extract(question=question).expression
        return dspy.Prediction(expression=expression, answer=self.solve(expression=expression).answer)


DEFAULT_REWARDS = (
    {"name": "regex_match", "weight": 1.0, "params": {"pattern": r"-?\d+\.?", "prediction_field": "answer"}},
    {"name": "numeric_match", "weight": 1.0, "params": {"prediction_field": "answer"}},
)
# The settings the Experiment on this task was measured with (README, "The paper's Table 1").
SUGGESTED_CONFIG = {
    "model": SMOLLM2_MODEL, "strategy": "mmgrpo", "estimator": "gdpo", "temperature": 0.7, "max_new_tokens": 24,
    "max_context_length": 512, "group_size": 8, "rollouts_per_example": 8, "examples_per_step": 2,
    "learning_rate": 3e-4, "steps": 20, "micro_batch_size": 16, "eval_every": 20, "eval_size": 48,
    "checkpoint_every": 20, "prompt_optimizer": "bootstrap_rs", "prompt_optimizer_trials": 1,
    "prompt_optimizer_demos": 2, "prompt_optimizer_labeled_demos": 2,
    "rewards": [dict(r) for r in DEFAULT_REWARDS],
}


class WordMathProgram(DSPyProgram):
    """The program with its generated examples (no dataset to upload)."""

    def generate_examples(self, split: str, *, seed: int = 0) -> list[dict[str, Any]]:
        if split == "train":
            return word_problems(TRAIN_SIZE, seed=seed)
        return word_problems(DEV_SIZE, seed=seed + 1_000)


def word_math(state_path: str | None = None) -> WordMathProgram:
    """Cohort's entry point (``cohort.programs``), optionally with a state saved by DSPy's ``save()``."""
    return WordMathProgram(
        WordMath, name="word_math", title="Word problems in two modules (DSPy)",
        description=("Two DSPy predictors for SmolLM2-135M-Instruct: extract writes the calculation of a short "
                     "word problem, solve replies with the number alone (format and correctness rewards)."),
        inputs=("question",), example_fields=("question", "expression", "answer"),
        default_rewards=[dict(r) for r in DEFAULT_REWARDS], state_path=state_path,
        adapter=PlainChatAdapter(), suggested_config=SUGGESTED_CONFIG)
