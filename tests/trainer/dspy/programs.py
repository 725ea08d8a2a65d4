"""Small real DSPy programs for the tests, and a scripted LM that writes ChatAdapter-marked answers.

``MultiHop`` is the DSPy test plugin's program (tests/plugins/cohort-dspy-plugin), imported from the
installed plugin so the unit tests and the end-to-end runs train the same code.
"""

from __future__ import annotations

import itertools
import threading

import dspy
from cohort_dspy_plugin.program import MultiHop  # noqa: F401  (re-exported for the tests)


class Add(dspy.Module):
    """One predictor adding two numbers: the program the real-model tests optimize and train."""

    def __init__(self):
        super().__init__()
        self.solve = dspy.Predict("question -> answer")

    def forward(self, question):
        return self.solve(question=question)


class Flaky(dspy.Module):
    """Not deterministic given its LM answers: a tool result changes from run to run."""

    _runs = itertools.count()

    def __init__(self):
        super().__init__()
        self.query = dspy.Predict("question -> query")
        self.answer = dspy.Predict("question, context -> answer")

    def forward(self, question):
        query = self.query(question=question).query
        return self.answer(question=question, context=f"{query} (lookup #{next(self._runs)})")


class Crashes(dspy.Module):
    """Its tool raises after the first call for questions containing 'boom'."""

    def __init__(self):
        super().__init__()
        self.query = dspy.Predict("question -> query")
        self.answer = dspy.Predict("question, context -> answer")

    def forward(self, question):
        query = self.query(question=question).query
        if "boom" in question:
            raise ConnectionError("search service unreachable")
        return self.answer(question=question, context=query)


class ScriptedLM:
    """``generate(agent, prompts)`` answering each prompt with a marked, numbered field value.

    Thread-safe counter; records each call's (agent, number of prompts) so tests can count batches.
    """

    def __init__(self, fields: dict[str, str] | None = None, unmarked: set[str] = frozenset()):
        self.fields = fields or {}
        self.unmarked = set(unmarked)
        self.batches: list[tuple[str, int]] = []
        self._count = itertools.count()
        self._lock = threading.Lock()

    def __call__(self, agent: str, prompts: list) -> list[str]:
        self.batches.append((agent, len(prompts)))
        field = self.fields.get(agent, agent)
        out = []
        for _ in prompts:
            with self._lock:
                n = next(self._count)
            value = f"{field} {n}"
            out.append(value if agent in self.unmarked else f"[[ ## {field} ## ]]\n{value}\n\n[[ ## completed ## ]]")
        return out
