"""MHGPO agent-specific rewards: format penalties of the rewriter, reranker and answerer.

MHGPO Appendix B ("Agent-specific Rewards", following Chen et al. 2025): "the Rewriter is penalized
proportionally to the number of rewritten queries, receiving a penalty of -0.5 if more than four
rewritten queries are generated. The Reranker receives penalties based on the format and redundancy of
the selected documents, with a -0.5 penalty applied for duplicated entries or index out-of-bound
errors. The Answerer is penalized according to the length of the generated answer, incurring a -1.0
penalty if the answer is excessively long."

Each penalty is 0.0 when the output is fine and the (negative) penalty when violated. "Penalized
proportionally to the number of rewritten queries" is read as the stated step: -0.5 once the count
exceeds four, nothing otherwise. The rewriter and reranker penalties also apply to output that cannot
be parsed at all (the penalties are "based on the output format of the agent", MHGPO Section 3).

They are agent-specific: the final reward of call i of agent k is
``R_{k,i} = R^shared_{k,i} + R^spe_k(q_{k,i}, o_{k,i})`` (MHGPO Section 3, "Backward Propagation of
Rewards"), so the trainer attaches ``per_call(call)`` to each call of that agent; the reward-contract
call ``(example, prediction, trajectory)`` aggregates over the agent's calls for logging (the
format-penalty curves of MHGPO Fig. 12).

Output formats (MHGPO Appendix B prompts): rewriter ``### <query1>; <query2>; ... ###``; reranker
document ids such as ``0, 3, 2`` or ``Document0, Document3``; answerer free text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainer.rewards.base import Reward, calls_of, whitespace_token_count

__all__ = [
    "AnswererPenalty",
    "RerankerPenalty",
    "RewriterPenalty",
    "answerer_penalty",
    "parse_reranker_ids",
    "parse_rewriter_queries",
    "reranker_penalty",
    "rewriter_penalty",
]

_REWRITER_BLOCK = re.compile(r"###(.*?)###", re.DOTALL)
_RERANKER_TOKEN = re.compile(r"(?:doc(?:ument)?)?(-?[0-9]+)", re.IGNORECASE)
_RERANKER_SEPARATORS = re.compile(r"[\s,;]+")
_RERANKER_PREFIX_GAP = re.compile(r"\b(doc(?:ument)?)\s+(?=-?[0-9])", re.IGNORECASE)
_AGGREGATES = ("sum", "mean", "min")


def parse_rewriter_queries(text: str) -> list[str] | None:
    """Queries of a rewriter output ``### q1; q2; q3 ###``; ``None`` without a ``### ... ###`` block.

    Empty entries (``"a;;b"``, a trailing ``;``) are not queries. Example:
    ``parse_rewriter_queries("### who is X; where was X born ###") == ["who is X", "where was X born"]``.
    """
    if not isinstance(text, str):
        return None
    block = _REWRITER_BLOCK.search(text)
    if block is None:
        return None
    return [q.strip() for q in block.group(1).split(";") if q.strip()]


def rewriter_penalty(parsed: Any, *, max_queries: int = 4, penalty: float = -0.5) -> float:
    """MHGPO App. B rewriter penalty: ``penalty`` if more than ``max_queries`` queries, else 0.0.

    ``parsed`` is the list of queries, a ``{"queries": [...]}`` mapping, or the raw output text
    (parsed with ``parse_rewriter_queries``). Output that is none of these, or text without the
    ``### ... ###`` block, violates the required format and gets ``penalty`` too.

    Example: 5 queries -> -0.5; 4 queries -> 0.0; ``"no hashes"`` -> -0.5.
    """
    if isinstance(parsed, Mapping):
        parsed = parsed.get("queries")
    if isinstance(parsed, str):
        parsed = parse_rewriter_queries(parsed)
    if not isinstance(parsed, Sequence) or isinstance(parsed, (str, bytes)):
        return float(penalty)
    return float(penalty) if len(parsed) > max_queries else 0.0


MAX_ID_DIGITS = 18


def parse_reranker_ids(text: str) -> list[int] | None:
    """Document ids of a reranker output; ``None`` when any entry is not an id.

    Entries are separated by commas, semicolons or whitespace, optionally bracketed, each ``3``,
    ``Document3`` or ``doc 3``. Example: ``parse_reranker_ids("[Document0, Document3]") == [0, 3]``,
    ``parse_reranker_ids("0, 3, maybe 2") is None``, ``parse_reranker_ids("") == []``.
    """
    if not isinstance(text, str):
        return None
    body = _RERANKER_PREFIX_GAP.sub(r"\1", text.strip(" \t\r\n[]()."))
    ids = []
    for token in _RERANKER_SEPARATORS.split(body):
        if not token:
            continue
        match = _RERANKER_TOKEN.fullmatch(token)
        # A model can write a digit string longer than int() accepts (4,300 digits): no such
        # document exists, so it is a malformed id, not a crash of the step.
        if match is None or len(match.group(1)) > MAX_ID_DIGITS:
            return None
        ids.append(int(match.group(1)))
    return ids


def _as_ids(value: Any) -> list[int] | None:
    if isinstance(value, str):
        return parse_reranker_ids(value)
    if not isinstance(value, Sequence) or isinstance(value, bytes):
        return None
    ids = []
    for item in value:
        if isinstance(item, bool):
            return None
        if isinstance(item, int):
            ids.append(item)
        elif isinstance(item, str) and re.fullmatch(r"\s*-?[0-9]+\s*", item):
            ids.append(int(item))
        else:
            return None
    return ids


def reranker_penalty(parsed: Any, *, num_candidates: int | None = None, penalty: float = -0.5) -> float:
    """MHGPO App. B reranker penalty: ``penalty`` for duplicated ids or out-of-bound ids, else 0.0.

    ``parsed`` is a list of ids (ints or digit strings), the raw output text, or a mapping
    ``{"ids": [...], "num_candidates": n}`` (its ``num_candidates`` overrides the argument). An id is
    out of bounds when negative or ``>= num_candidates`` (only the negative check applies while the
    candidate count is unknown). Output that is not a list of ids violates the format: ``penalty``.

    Example with 5 candidates: ``[0, 3]`` -> 0.0, ``[0, 3, 0]`` -> -0.5 (duplicate), ``[0, 5]`` -> -0.5
    (index out of bound), ``"none of them"`` -> -0.5.
    """
    if isinstance(parsed, Mapping):
        num_candidates = parsed.get("num_candidates", num_candidates)
        parsed = parsed.get("ids")
    ids = _as_ids(parsed)
    if ids is None or len(set(ids)) != len(ids):
        return float(penalty)
    upper = (
        num_candidates if isinstance(num_candidates, int) and not isinstance(num_candidates, bool) else None
    )
    if any(i < 0 or (upper is not None and i >= upper) for i in ids):
        return float(penalty)
    return 0.0


def answerer_penalty(
    answer: Any,
    *,
    max_tokens: int = 20,
    penalty: float = -1.0,
    count_tokens: Callable[[str], int] = whitespace_token_count,
) -> float:
    """MHGPO App. B answerer penalty: ``penalty`` when the answer is longer than ``max_tokens``.

    The paper says "excessively long" without a number; the default 20 (whitespace tokens) is above
    every gold answer of the bundled HotpotQA data (at most 13 words) and MHGPO reports trained answers
    converge below 10 tokens. A non-text answer gets 0.0 (length cannot be judged).

    Example: a 21-word answer -> -1.0; ``"Ed Wood"`` -> 0.0.
    """
    if not isinstance(answer, str):
        return 0.0
    return float(penalty) if count_tokens(answer) > max_tokens else 0.0


def _check_penalty(value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value <= 0:
        raise ValueError(f"penalty must be a number <= 0, got {value!r}")


@dataclass(frozen=True)
class _AgentPenalty(Reward):
    """Shared trajectory-level logic: aggregate ``per_call`` over the calls of ``module``.

    ``aggregate="sum"`` (default) adds the penalties of all the agent's calls, so its range is
    (-inf, 0]; ``"mean"`` and ``"min"`` stay in [penalty, 0]. A trajectory without a call of ``module``
    gives ``None`` (the agent did not act, so its penalty is not applicable).
    """

    def _finish_init(self) -> None:
        _check_penalty(self.penalty)
        if self.aggregate not in _AGGREGATES:
            raise ValueError(f"aggregate must be one of {_AGGREGATES}, got {self.aggregate!r}")
        self._set_range(-math.inf if self.aggregate == "sum" else self.penalty, 0.0)

    def per_call(self, call: Any) -> float:
        """The agent-specific reward R^spe of one call; 0.0 for a call of another module, so a trainer
        can apply every agent's penalty to every call and each lands only on its own agent."""
        if getattr(call, "module", None) != self.module:
            return 0.0
        return self._call_penalty(call)

    def _call_penalty(self, call: Any) -> float:
        raise NotImplementedError

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        values = [self.per_call(call) for call in calls_of(trajectory, self.module)]
        if not values:
            return None
        if self.aggregate == "sum":
            return float(sum(values))
        if self.aggregate == "mean":
            return sum(values) / len(values)
        return min(values)


@dataclass(frozen=True)
class RewriterPenalty(_AgentPenalty):
    """MHGPO rewriter penalty over a trajectory: ``penalty`` (-0.5) per call with > ``max_queries`` (4)
    queries or an unparseable output. ``per_call(call)`` gives one call's value.

    Example: a trajectory with one rewriter call whose parsed output has 5 queries -> -0.5.
    """

    name = "mhgpo_penalty_rewriter"
    value_range = (-math.inf, 0.0)

    module: str = "rewriter"
    max_queries: int = 4
    penalty: float = -0.5
    aggregate: str = "sum"

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_queries, bool)
            or not isinstance(self.max_queries, int)
            or self.max_queries < 0
        ):
            raise ValueError(f"max_queries must be a non-negative int, got {self.max_queries!r}")
        self._finish_init()

    def _call_penalty(self, call: Any) -> float:
        # Judged on ``parsed`` when ``parsed_ok``; an unparseable output violates the format.
        if not getattr(call, "parsed_ok", False):
            return float(self.penalty)
        return rewriter_penalty(
            getattr(call, "parsed", None), max_queries=self.max_queries, penalty=self.penalty
        )


@dataclass(frozen=True)
class RerankerPenalty(_AgentPenalty):
    """MHGPO reranker penalty over a trajectory: ``penalty`` (-0.5) per call with duplicated ids,
    out-of-bound ids (needs ``num_candidates``, or a mapping ``parsed`` that carries it) or an
    unparseable output. ``per_call(call)`` gives one call's value.

    Example with ``num_candidates=5``: parsed ``[1, 1]`` -> -0.5, ``[4, 0]`` -> 0.0.
    """

    name = "mhgpo_penalty_reranker"
    value_range = (-math.inf, 0.0)

    module: str = "reranker"
    num_candidates: int | None = None
    penalty: float = -0.5
    aggregate: str = "sum"

    def __post_init__(self) -> None:
        n = self.num_candidates
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise ValueError(f"num_candidates must be a non-negative int or None, got {n!r}")
        self._finish_init()

    def _call_penalty(self, call: Any) -> float:
        # Judged on ``parsed`` when ``parsed_ok``; an unparseable output violates the format.
        if not getattr(call, "parsed_ok", False):
            return float(self.penalty)
        return reranker_penalty(
            getattr(call, "parsed", None), num_candidates=self.num_candidates, penalty=self.penalty
        )


def _answer_text(call: Any) -> Any:
    parsed = getattr(call, "parsed", None) if getattr(call, "parsed_ok", False) else None
    if isinstance(parsed, Mapping):
        parsed = parsed.get("answer")
    elif parsed is not None and not isinstance(parsed, str):
        parsed = getattr(parsed, "answer", None)
    return parsed if isinstance(parsed, str) else getattr(call, "completion", None)


@dataclass(frozen=True)
class AnswererPenalty(_AgentPenalty):
    """MHGPO answerer penalty over a trajectory: ``penalty`` (-1.0) per call whose answer is longer than
    ``max_tokens`` (20, by ``count_tokens``). The answer is the parsed output (a string, or its
    ``answer`` field/attribute) or, when parsing failed, the raw completion. ``per_call(call)`` gives
    one call's value.

    Example: an answerer call with parsed ``"Ed Wood"`` -> 0.0.
    """

    name = "mhgpo_penalty_answerer"
    value_range = (-math.inf, 0.0)

    module: str = "answerer"
    max_tokens: int = 20
    penalty: float = -1.0
    count_tokens: Callable[[str], int] = whitespace_token_count
    aggregate: str = "sum"

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 0:
            raise ValueError(f"max_tokens must be a non-negative int, got {self.max_tokens!r}")
        self._finish_init()

    def _call_penalty(self, call: Any) -> float:
        # Judged on the answer text: the parsed answer, or the raw completion when parsing failed.
        return answerer_penalty(
            _answer_text(call),
            max_tokens=self.max_tokens,
            penalty=self.penalty,
            count_tokens=self.count_tokens,
        )
