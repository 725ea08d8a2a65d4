"""The program: query -> BM25 over the corpus -> answer, written as any DSPy user writes it."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import bm25s
import dspy

from trainer.dspy import DSPyProgram
from trainer.dspy.adapters import MarkerFallbackAdapter


class Search:
    """BM25 over a JSONL corpus of {title, text} passages, indexed on first use."""

    def __init__(self, corpus_path: str | None):
        self.corpus_path = corpus_path

    @functools.cached_property
    def _index(self):
        if not self.corpus_path:
            raise ValueError("hotpot_qa needs a retrieval corpus: set the run's corpus_data to a JSONL of {title, text}")
        with Path(self.corpus_path).open(encoding="utf-8") as handle:
            passages = [json.loads(line) for line in handle if line.strip()]
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize([f"{p['title']} {p['text']}" for p in passages], stopwords="en",
                                       show_progress=False), show_progress=False)
        return passages, retriever

    def __call__(self, query: str, k: int = 3) -> list[str]:
        passages, retriever = self._index
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab or not any(tokens.ids):
            return []
        ids, scores = retriever.retrieve(tokens, k=min(k, len(passages)), show_progress=False)
        return [f"{passages[int(i)]['title']} | {passages[int(i)]['text'][:300]}"
                for i, s in zip(ids[0], scores[0], strict=True) if s > 0]


class HotpotQA(dspy.Module):
    def __init__(self, search: Search, k: int = 3):
        super().__init__()
        self.search, self.k = search, k
        self.generate_query = dspy.Predict("question -> query")
        self.generate_answer = dspy.Predict("context: list[str], question -> answer")

    def forward(self, question: str):
        query = self.generate_query(question=question).query
        return self.generate_answer(context=self.search(query, self.k), question=question)


def hotpot_qa(corpus_path: str | None = None, state_path: str | None = None) -> DSPyProgram:
    """Cohort's entry point: the program, with the run's corpus and, optionally, a state saved by
    DSPy's ``save()`` after prompt optimization."""
    return DSPyProgram(
        lambda: HotpotQA(Search(corpus_path)),
        name="hotpot_qa",
        title="HotpotQA (DSPy, example plugin)",
        description="Two DSPy predictors: write a search query, BM25 over the corpus, answer from the passages.",
        example_fields=("question", "answer"),
        dataset_kind="qa",  # Cohort's question/answer kind: HotpotQA rows upload as they are
        default_rewards=[{"name": "hotpot_f1", "weight": 1.0, "params": {}},
                         {"name": "hotpot_format", "weight": 1.0, "params": {}}],
        state_path=state_path,
        # Small models write unmarked answers at first; read them rather than failing every rollout,
        # and reward the markers with hotpot_format.
        adapter=MarkerFallbackAdapter(),
        needs_corpus=True,
        suggested_config={"strategy": "mmgrpo", "estimator": "gdpo", "group_size": 4, "rollouts_per_example": 4,
                          "examples_per_step": 2, "max_new_tokens": 24, "max_context_length": 1024},
    )
