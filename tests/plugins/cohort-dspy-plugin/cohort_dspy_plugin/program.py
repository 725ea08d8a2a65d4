"""A plain DSPy program, written without any knowledge of Cohort, and the factory that registers it."""

from __future__ import annotations

import dspy

from trainer.dspy import DSPyProgram
from trainer.dspy.adapters import MarkerFallbackAdapter


class MultiHop(dspy.Module):
    """Two predictors; ``query`` runs ``hops`` times (a variable number of calls per example)."""

    def __init__(self):
        super().__init__()
        self.query = dspy.Predict("question, notes: list[str] -> query")
        self.answer = dspy.Predict("question, notes: list[str] -> answer")

    def forward(self, question, hops=1):
        notes: list[str] = []
        for _ in range(int(hops)):
            notes.append(self.query(question=question, notes=notes).query)
        return self.answer(question=question, notes=notes)


def multihop(state_path: str | None = None) -> DSPyProgram:
    return DSPyProgram(
        MultiHop, name="dspy_multihop", title="DSPy multi-hop (test plugin)", inputs=("question", "hops"),
        example_fields=("question", "hops", "answer"), state_path=state_path, adapter=MarkerFallbackAdapter(),
        default_rewards=[{"name": "dspy_overlap", "weight": 1.0, "params": {}},
                         {"name": "dspy_concise", "weight": 1.0, "params": {}}],
    )
