"""A step's per-token details (RunConfig.token_details): the `tokens` of its module calls and the
`tokens/...` step metrics (trainer.algorithms.token_metrics).

After the update, each call's tokens come from two places: the sampler (the sampled ids and, where
the backend reports them, their log-probs) and the update (`PolicyUpdater.last_token_details`: the
trainer's log-probs, entropies and top-k, over the tokens it scored, from its pass without dropout:
the one `mismatch/...` uses, so the stored gaps and the step's mean agree). Update examples are matched to
calls by (prompt, completion), as `StepSampler.policy_examples` matched them to samples; a call in
several groups (padding, duplicates) was scored with the same tokens each time, so its first example
is taken. In a many-process run each rank knows its own calls: the ranks' records are gathered, so
the fork threshold and the metrics cover the whole step, and rank 0, which writes the event,
attaches every call's tokens.

A call's `tokens` (the data contract the dashboard reads):

    {"pieces":  [str, ...],                  # each token decoded on its own, special tokens kept
     "sampler": [float | None, ...],         # the sampler's log-probs (absent when it reported none)
     "trainer": [float | None, ...],         # the update's, without dropout (None past a truncation)
     "entropy": [float | None, ...],         # nats, from the same pass
     "topk":    [[pos, [[piece, prob, id(, hex)], ...], sampled_id], ...],  # at the forks only
     "bytes":   [[pos, hex], ...]}           # sampled tokens that are part of a multi-byte character

Every list but "topk" and "bytes" has len(pieces); "trainer", "entropy" and "topk" only on calls the
update scored; "bytes" only where a sampled token's piece is not a whole character (it reads U+FFFD:
trainer/run/token_bytes.py), and an alternative's hex only on such a token. The ids let the dashboard
tell the sampled token among the alternatives by id, not by text. Floats are rounded to 4 decimals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainer.algorithms.groups import GroupMember, ModuleGroup
from trainer.algorithms.token_metrics import GroupExtremes, ScoredTokens, fork_threshold, token_metrics
from trainer.config import RunConfig
from trainer.policy import distributed
from trainer.policy.batching import PolicyExample, encode_completion
from trainer.policy.distributed import Ranks
from trainer.rollouts.trajectory import ModuleCall, Trajectory, unique_calls
from trainer.run.token_bytes import byte_pieces

DECIMALS = 4


@dataclass
class CallRecord:
    """What one rank knows of one of its calls' tokens (picklable: gathered across ranks)."""

    key: str
    module: str
    ids: list[int]
    """The completion's token ids: the sampled ones, else the completion as the update tokenized it."""
    sampler: list[float] | None
    details: dict[str, np.ndarray] | None
    """The update's details over the tokens it scored (trainer.policy.token_details.ExampleDetails)."""

    def scored(self) -> ScoredTokens | None:
        if self.details is None:
            return None
        n = len(self.details["entropy"])
        sampler = None
        if self.sampler is not None:
            sampler = np.full(n, np.nan)
            known = np.asarray(self.sampler[:n], dtype=np.float64)
            sampler[: known.size] = known
        return ScoredTokens(self.module, self.details["entropy"], self.details["logprobs"], sampler)


def call_key(call: ModuleCall) -> str:
    return call.call_id or f"object:{id(call)}"


class StepTokenDetails:
    """Attaches a step's per-token details to its calls and computes their metrics."""

    def __init__(self, config: RunConfig, tokenizer: Any, agents: Sequence[str], ranks: Ranks):
        self.mode = config.token_details
        self.fork_share = config.token_fork_share
        self.tokenizer = tokenizer
        self.per_module = len(agents) > 1
        self.ranks = ranks

    def attach(self, trajectories: Sequence[Trajectory], groups: Sequence[ModuleGroup],
               examples: Sequence[PolicyExample], details: Sequence[dict[str, np.ndarray] | None],
               samples: Mapping[tuple[str, str], Any], local_ids: set[str]) -> dict[str, float]:
        """Sets `tokens` on the step's calls (rank 0) and returns the `tokens/...` metrics (every rank).

        `examples` and `details`: the update's examples on this rank and its details of each, in order
        (empty when no update ran); `samples`: this rank's samples by (prompt, completion);
        `local_ids`: the example ids this rank sampled. Collective in a many-process run."""
        modules = {id(m.call): g.module for g in groups for m in g.members}  # a teacher's call: its student module
        records = self._local_records(trajectories, modules, examples, details, samples, local_ids)
        by_key = {r.key: r for r in distributed.gather(records, self.ranks)}
        scored = {key: s for key, r in by_key.items() if (s := r.scored()) is not None}
        extremes = []
        for group in groups:
            best, worst = extreme_members(group)
            if best is None or best.reward == worst.reward:
                continue  # the metric compares members whose rewards differ
            best_key, worst_key = call_key(best.call), call_key(worst.call)
            if best_key in scored and worst_key in scored:
                extremes.append(GroupExtremes(group.module, scored[best_key], scored[worst_key]))
        metrics = token_metrics(list(scored.values()), extremes, per_module=self.per_module)
        if self.ranks.is_main:
            threshold = fork_threshold([s.entropy for s in scored.values()], self.fork_share)
            self._set_tokens(trajectories, groups, by_key, threshold)
        return metrics

    def _local_records(self, trajectories, modules, examples, details, samples, local_ids) -> list[CallRecord]:
        trained: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        for example, detail in zip(examples, details, strict=False):
            if detail is not None:
                trained.setdefault((example.prompt, example.completion), detail)  # the first of its copies
        records = []
        for call in unique_calls(t for t in trajectories if t.example_id in local_ids):
            key = (call.prompt, call.completion)
            sample, detail = samples.get(key), trained.get(key)
            if sample is None and detail is None:
                continue  # neither sampled with token ids here nor scored: nothing per token
            ids = list(sample.token_ids) if sample is not None else encode_completion(self.tokenizer, call.completion)
            logprobs = list(sample.logprobs) if sample is not None and sample.logprobs is not None else None
            records.append(CallRecord(call_key(call), modules.get(id(call), call.module), ids, logprobs, detail))
        return records

    def _set_tokens(self, trajectories, groups, records: dict[str, CallRecord], threshold: float) -> None:
        if self.mode == "sampled":
            chosen = {call_key(m.call) for g in groups for m in extreme_members(g) if m is not None}
        else:
            chosen = set(records)
        wanted = [records[k] for k in chosen if k in records]
        ids = {i for r in wanted for i in r.ids}
        for r in wanted:
            if r.details is not None:
                ids.update(r.details["topk_ids"][r.details["entropy"] >= threshold].reshape(-1).tolist())
        pieces = self._pieces(ids)
        hexes = byte_pieces(self.tokenizer, pieces)
        built: dict[str, dict[str, Any]] = {}
        for call in unique_calls(trajectories):
            key = call_key(call)
            if key in chosen and key in records:
                if key not in built:
                    built[key] = call_tokens(records[key], pieces, threshold, hexes)
                call.tokens = built[key]

    def _pieces(self, ids: set[int]) -> dict[int, str]:
        """Each id decoded on its own, special tokens kept (the contract's pieces), in one batch."""
        ordered = sorted(ids)
        texts = self.tokenizer.batch_decode([[i] for i in ordered], skip_special_tokens=False) if ordered else []
        return dict(zip(ordered, texts, strict=True))


def extreme_members(group: ModuleGroup) -> tuple[GroupMember | None, GroupMember | None]:
    """The group's highest- and lowest-reward members (the first of equals): both None when no
    member has a reward, the same member when all rewards are equal."""
    rated = [m for m in group.members if m.reward is not None and math.isfinite(m.reward)]
    if not rated:
        return None, None
    return max(rated, key=lambda m: m.reward), min(rated, key=lambda m: m.reward)


def call_tokens(record: CallRecord, pieces: Mapping[int, str], threshold: float,
                hexes: Mapping[int, str] | None = None) -> dict[str, Any]:
    """One call's `tokens` (module docstring): every list of len(record.ids), `None` past what the
    update scored; top-k only where the entropy is at least `threshold`. `hexes`: the bytes of the ids
    that are part of a multi-byte character (`byte_pieces`)."""
    hexes = hexes or {}
    n = len(record.ids)
    tokens: dict[str, Any] = {"pieces": [pieces[i] for i in record.ids]}
    sampled_bytes = [[pos, hexes[i]] for pos, i in enumerate(record.ids) if i in hexes]
    if sampled_bytes:
        tokens["bytes"] = sampled_bytes
    if record.sampler is not None:
        tokens["sampler"] = _padded(record.sampler, n)
    if record.details is not None:
        entropy = record.details["entropy"][:n]
        tokens["trainer"] = _padded(record.details["logprobs"], n)
        tokens["entropy"] = _padded(entropy, n)
        ids, probs = record.details["topk_ids"], record.details["topk_probs"]
        tokens["topk"] = [[int(pos), [_alternative(int(i), p, pieces, hexes)
                                      for i, p in zip(ids[pos].tolist(), _rounded(probs[pos]), strict=True)],
                           int(record.ids[pos])]
                          for pos in np.flatnonzero(entropy >= threshold).tolist()]
    return tokens


def _alternative(token_id: int, prob: float | None, pieces: Mapping[int, str], hexes: Mapping[int, str]) -> list:
    """[piece, prob, id], and the id's bytes where it is part of a multi-byte character."""
    return [pieces[token_id], prob, token_id] + ([hexes[token_id]] if token_id in hexes else [])


def _rounded(values: Any) -> list[float | None]:
    """Plain floats rounded to DECIMALS; NaN and infinities become None."""
    array = np.round(np.asarray(values, dtype=np.float64), DECIMALS)
    return [v if math.isfinite(v) else None for v in array.tolist()]


def _padded(values: Any, n: int) -> list[float | None]:
    """`values` rounded, cut or padded with None to n entries (None: a token the source did not score)."""
    out = _rounded(values)[:n]
    return out + [None] * (n - len(out))
