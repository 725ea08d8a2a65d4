"""Multi-hop claim verification, HoVer style (MMGRPO Section 5: a program whose number of module
calls varies): at each hop one module writes a search query, BM25 retrieves passages, and a second
module writes notes and says whether it has found enough. It stops after `max_hops` or when the
notes say `Enough: yes`, so trajectories differ in length and module-level groups need padding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainer.programs.base import failed, tagged_field
from trainer.programs.registry import register_program
from trainer.programs.retrieval import Passage, corpus_index
from trainer.rollouts.prompts import Message, chat_messages
from trainer.rollouts.sampling import StepResult


@dataclass(frozen=True)
class HopState:
    claim: str
    hop: int = 0
    next_module: str = "create_query"
    notes: tuple[str, ...] = ()
    retrieved: tuple[Passage, ...] = ()
    last: tuple[Passage, ...] = ()
    done: bool = False


@register_program
class HoverMultiHop:
    name = "hover"
    title = "HoVer multi-hop claim retrieval"
    description = ("Per hop: write a query, retrieve with BM25, take notes; stops when the notes say enough. "
                   "Rewarded by recall of the claim's supporting titles.")
    agents = ("create_query", "summarize")
    dataset_kind = "claim"
    example_fields = ("claim", "supporting_titles")
    default_rewards = ({"name": "title_recall", "weight": 1.0, "params": {"prediction_field": "titles"}},)
    options = ("corpus_path", "corpus", "max_hops", "per_query")
    needs_corpus = True

    def __init__(self, corpus_path: str | None = None, corpus: Sequence[dict] | None = None, max_hops: int = 3,
                 per_query: int = 3):
        self.index = corpus_index("hover", corpus_path, corpus)
        self.max_hops, self.per_query = max_hops, per_query

    def start(self, example: dict[str, Any]) -> HopState:
        return HopState(claim=str(example["claim"]))

    def has_next(self, state: HopState) -> bool:
        return not state.done

    def next_agent(self, state: HopState) -> str:
        return state.next_module

    def process_prompt(self, state: HopState, agent: str) -> list[Message]:
        notes = "\n".join(f"- {n}" for n in state.notes) or "(none yet)"
        if agent == "create_query":
            return chat_messages("Find evidence for the claim. Write one search query as 'Query: ...'.",
                                 f"Claim: {state.claim}\nNotes so far:\n{notes}")
        passages = "\n".join(p.render() for p in state.last) or "(nothing found)"
        return chat_messages("Write 'Notes: ...' with what matters for the claim, then 'Enough: yes' or 'Enough: no'.",
                             f"Claim: {state.claim}\nNotes so far:\n{notes}\nNew passages:\n{passages}")

    def step(self, state: HopState, agent: str, completion: str) -> StepResult:
        if agent == "create_query":
            query = tagged_field(completion, "query")
            if not query:
                return failed(replace(state, done=True), None)
            found = tuple(self.index.search(query, k=self.per_query))
            seen = {p.title for p in state.retrieved}
            new = tuple(p for p in found if p.title not in seen)
            return StepResult(replace(state, retrieved=state.retrieved + new, last=found, next_module="summarize"),
                              True, {"query": query, "titles": [p.title for p in found]})
        notes = tagged_field(completion, "notes")
        enough = (tagged_field(completion, "enough") or "").lower().startswith("yes")
        if notes is None:
            return failed(replace(state, done=True), None)
        hop = state.hop + 1
        done = enough or hop >= self.max_hops
        return StepResult(replace(state, notes=state.notes + (notes,), hop=hop, next_module="create_query", done=done),
                          True, {"notes": notes, "enough": enough})

    def final_output(self, state: HopState) -> dict[str, Any]:
        return {"titles": [p.title for p in state.retrieved], "notes": list(state.notes), "hops": state.hop}
