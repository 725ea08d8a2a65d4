"""Training examples and the order they are drawn in.

The order is a pure function of (seed, epoch): each epoch is a fresh permutation, so the data
cursor (the index of the next example in the stream) is all a checkpoint needs to resume exactly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a bad line raises ValueError naming the file and line number."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {number}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}, line {number}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no examples")
    return rows


def example_id(example: dict[str, Any], index: int) -> str:
    return str(example.get("id", f"example-{index}"))


class ExampleStream:
    """Draws batches from `examples` in a seeded, per-epoch shuffled order.

    >>> stream = ExampleStream([{"id": str(i)} for i in range(5)], seed=0)
    >>> first = [e["id"] for e in stream.next_batch(3)]
    >>> cursor = stream.cursor
    >>> rest = [e["id"] for e in stream.next_batch(4)]          # crosses into epoch 2
    >>> resumed = ExampleStream([{"id": str(i)} for i in range(5)], seed=0, cursor=cursor)
    >>> [e["id"] for e in resumed.next_batch(4)] == rest
    True
    """

    def __init__(self, examples: Sequence[dict[str, Any]], *, seed: int, cursor: int = 0):
        if not examples:
            raise ValueError("no training examples")
        self.examples = list(examples)
        self.seed = seed
        self.cursor = cursor

    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.examples))

    def next_batch(self, size: int) -> list[dict[str, Any]]:
        batch = []
        for _ in range(size):
            epoch, position = divmod(self.cursor, len(self.examples))
            batch.append(self.examples[int(self._order(epoch)[position])])
            self.cursor += 1
        return batch
