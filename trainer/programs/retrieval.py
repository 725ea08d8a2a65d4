"""BM25 retrieval over a corpus of {title, text} passages (bm25s: a maintained, numpy-only BM25)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.data import read_jsonl


@dataclass(frozen=True)
class Passage:
    title: str
    text: str

    def render(self, limit: int = 300) -> str:
        return f"{self.title} | {self.text[:limit]}"


class BM25Index:
    """Top-k passages for a query. Built once per corpus and reused by every rollout."""

    def __init__(self, passages: Sequence[dict[str, Any]]):
        import bm25s

        if not passages:
            raise ValueError("the retrieval corpus is empty")
        self.passages = [Passage(str(p.get("title", "")), str(p.get("text", ""))) for p in passages]
        self._bm25s = bm25s
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25s.tokenize([f"{p.title} {p.text}" for p in self.passages], stopwords="en",
                                            show_progress=False), show_progress=False)

    def search(self, query: str, k: int = 3) -> list[Passage]:
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab or not any(tokens.ids):
            return []  # a query of stopwords only matches nothing
        k = min(k, len(self.passages))
        ids, scores = self.retriever.retrieve(tokens, k=k, show_progress=False)
        return [self.passages[int(i)] for i, s in zip(ids[0], scores[0], strict=True) if s > 0]


@functools.lru_cache(maxsize=4)
def index_for_file(path: str) -> BM25Index:
    return BM25Index(read_jsonl(Path(path)))


def corpus_index(program: str, corpus_path: str | None, corpus: Sequence[dict[str, Any]] | None) -> BM25Index:
    """The index of an in-memory corpus or of a JSONL file (cached); a clear error without either."""
    if corpus is not None:
        return BM25Index(corpus)
    if corpus_path is not None:
        return index_for_file(str(corpus_path))
    raise ValueError(f"the {program} program needs a retrieval corpus: set corpus_data to a JSONL of "
                     "{title, text} passages (a dataset of kind 'corpus').")
