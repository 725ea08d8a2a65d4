"""MHGPO's multi-agent search system (paper 001, Section 4 and Appendix B): a query rewriter, BM25
retrieval, a reranker that selects documents, and an answer generator.

Formats (Appendix B): the rewriter writes `### query1; query2 ###` (more than four queries is
penalized), the reranker lists the useful candidates as `Document0, Document3` (duplicates or ids
out of range are penalized), the answerer writes a short answer (too long is penalized). Each
agent's output that cannot be parsed ends the trajectory (a format failure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainer.programs.base import failed
from trainer.programs.registry import register_program
from trainer.programs.retrieval import BM25Index, Passage, corpus_index
from trainer.rewards.mhgpo import parse_reranker_ids, parse_rewriter_queries
from trainer.rollouts.prompts import Message, chat_messages
from trainer.rollouts.sampling import StepResult

AGENTS = ("rewriter", "reranker", "answerer")


@dataclass(frozen=True)
class SearchState:
    question: str
    queries: tuple[str, ...] = ()
    candidates: tuple[Passage, ...] = ()
    selected: tuple[Passage, ...] = ()
    answer: str | None = None
    stage: int = 0  # index into AGENTS of the next agent; 3 = done


def candidates_for(index: BM25Index, queries: Sequence[str], *, per_query: int, limit: int) -> tuple[Passage, ...]:
    """The union of each query's top passages, in query order, without repeats."""
    seen, out = set(), []
    for query in queries:
        for passage in index.search(query, k=per_query):
            if passage.title not in seen:
                seen.add(passage.title)
                out.append(passage)
    return tuple(out[:limit])


@register_program
class SearchSystem:
    name = "search"
    title = "MHGPO multi-agent search (rewriter -> BM25 -> reranker -> answerer)"
    description = ("The 3-agent search system of MHGPO: rewrite the question into queries, retrieve with BM25, "
                   "select useful documents, answer briefly.")
    agents = AGENTS
    dataset_kind = "qa"
    example_fields = ("question", "answer", "supporting_titles")
    default_rewards = (
        {"name": "token_f1", "weight": 1.0, "params": {"prediction_field": "answer"}},
        {"name": "mhgpo_penalty_rewriter", "weight": 1.0, "params": {}},
        {"name": "mhgpo_penalty_reranker", "weight": 1.0, "params": {}},
        {"name": "mhgpo_penalty_answerer", "weight": 1.0, "params": {}},
    )
    options = ("corpus_path", "corpus", "per_query", "max_candidates")
    needs_corpus = True

    def __init__(self, corpus_path: str | None = None, corpus: Sequence[dict] | None = None, per_query: int = 3,
                 max_candidates: int = 8):
        self.index = corpus_index("search", corpus_path, corpus)
        self.per_query, self.max_candidates = per_query, max_candidates

    def start(self, example: dict[str, Any]) -> SearchState:
        return SearchState(question=str(example["question"]))

    def has_next(self, state: SearchState) -> bool:
        return state.stage < len(AGENTS)

    def next_agent(self, state: SearchState) -> str:
        return AGENTS[state.stage]

    def process_prompt(self, state: SearchState, agent: str) -> list[Message]:
        if agent == "rewriter":
            return chat_messages("Rewrite the question into up to four search queries, written as "
                                 "### query1; query2 ###.", f"Question: {state.question}")
        if agent == "reranker":
            docs = "\n".join(f"Document{i}: {p.render()}" for i, p in enumerate(state.candidates))
            return chat_messages("Select the documents that help answer the question; list their ids like "
                                 "'Document0, Document2'.", f"Question: {state.question}\n{docs}")
        context = "\n".join(p.render(600) for p in state.selected)
        return chat_messages("Answer the question in a few words.",
                             f"Question: {state.question}\nDocuments:\n{context}")

    def step(self, state: SearchState, agent: str, completion: str) -> StepResult:
        if agent == "rewriter":
            queries = parse_rewriter_queries(completion)
            if not queries:
                return failed(replace(state, stage=len(AGENTS)), {"queries": queries})
            candidates = candidates_for(self.index, queries, per_query=self.per_query, limit=self.max_candidates)
            return StepResult(replace(state, queries=tuple(queries), candidates=candidates, stage=1), True,
                              {"queries": queries})
        if agent == "reranker":
            ids = parse_reranker_ids(completion)
            parsed = {"ids": ids, "num_candidates": len(state.candidates)}
            if ids is None:
                return failed(replace(state, stage=len(AGENTS)), parsed)
            # Out-of-range and repeated ids are penalized (agent-specific reward), not fatal.
            selected = tuple(dict.fromkeys(state.candidates[i] for i in ids if 0 <= i < len(state.candidates)))
            return StepResult(replace(state, selected=selected, stage=2), True, parsed)
        answer = completion.strip().split("\n")[0].strip()
        if not answer:
            return failed(replace(state, stage=len(AGENTS)), {"answer": None})
        return StepResult(replace(state, answer=answer, stage=3), True, {"answer": answer})

    def final_output(self, state: SearchState) -> dict[str, Any]:
        return {"answer": state.answer, "queries": list(state.queries),
                "retrieved_titles": [p.title for p in state.candidates],
                "selected_titles": [p.title for p in state.selected]}
