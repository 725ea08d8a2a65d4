"""Realistic step events for the inspector tests, built with the trainer's own sampling, grouping,
advantage and metric code, and stored through the real ingest service.

- `hover_step_event`: a HoVer-style program (MMGRPO Section 5): per hop a `create_query` call and a
  `summarize` call, stopping after 1-3 hops, some rollouts failing to parse (their last call), so
  call counts vary; MMGRPO module-level groups with PadGroups `fill` and up-sampling to G.
- `collapse_step_event`: one example whose rewards (format, correct) are (1,0), (0,1), (0,1), (0,0):
  GRPO on the sum gives (1,0) and (0,1) the same advantage, GDPO does not (GDPO paper, Section 2).
- `constant_step_event`: one example whose rollouts all get the same reward (a flat line everywhere).
- `mhgpo_step_event`: Fork-on-First on a rewriter -> reranker -> answerer chain (MHGPO Algorithm 3),
  rewards propagated backward, agent-specific penalties, homogeneous and heterogeneous groups.
- `error_step_event`: the same, but the program's `step` raises for one fork of the first question
  (`Trajectory.error`, trainer/rollouts/failures.py): that branch ends with the format-failure reward.
"""

from __future__ import annotations

import itertools
import random
import re

import numpy as np

from trainer.algorithms.advantages import grpo_advantages
from trainer.algorithms.grouping import form_module_level_groups
from trainer.algorithms.groups import assign_advantages, group_reward_arrays
from trainer.algorithms.metrics import annotate_group_stats, module_group_metrics, zero_variance_share
from trainer.algorithms.propagation import apply_specific_rewards, mhgpo_groups, propagate_rewards
from trainer.rollouts.sampling import LinearChain, StepResult, fork_on_first
from trainer.rollouts.trajectory import ModuleCall, Trajectory, jsonable
from webapp.runs.ingest.store import step_events_ingest

HOVER_REWARDS = ("recall", "format")
WORDS = ("river", "album", "born", "city", "film", "novel", "league", "museum", "author", "capital")


def _event(step: int, trajectories, groups, rewards, advantages, *, attempt: int = 1, extra=None) -> dict:
    totals = [t.reward for t in trajectories if t.reward is not None]
    metrics = {"reward/mean": float(np.mean(totals)) if totals else None,
               "failure_rate": float(np.mean([t.failed for t in trajectories]))}
    metrics.update(module_group_metrics(groups, rewards, advantages))
    total = np.nansum(rewards, axis=1) if np.ndim(rewards) == 2 else rewards
    metrics["zero_var_share"] = zero_variance_share(total, [gi for gi, g in enumerate(groups) for _ in g.members])
    metrics.update(extra or {})
    return jsonable({"type": "step", "attempt": attempt, "step": step, "metrics": metrics,
                     "rollouts": [t.to_dict() for t in trajectories], "groups": [g.to_dict() for g in groups]})


def _mmgrpo(step, trajectories, *, group_size, names, attempt=1, extra=None) -> dict:
    groups = form_module_level_groups(trajectories, group_size=group_size, padding="fill", rng=step)
    rewards, ids = group_reward_arrays(groups, reward_names=list(names))  # (M, K)
    advantages = grpo_advantages(rewards, ids)
    assign_advantages(groups, advantages)
    annotate_group_stats(groups, rewards, reward_names=list(names))
    return _event(step, trajectories, groups, rewards, advantages, attempt=attempt, extra=extra)


def hover_trajectories(step: int, *, examples: int, rollouts: int, seed: int = 0, prompt_words: int = 30):
    """HoVer-style rollouts with 1-3 hops (2-6 calls); about one in six fails to parse its last call."""
    rng = random.Random(seed * 7919 + step)
    trajectories = []
    for e in range(examples):
        claim = " ".join(rng.choice(WORDS) for _ in range(prompt_words))
        for r in range(rollouts):
            hops = rng.randint(1, 3)
            failed = rng.random() < 0.17
            calls, notes = [], []
            for hop in range(hops):
                query = f"Query: {rng.choice(WORDS)} {rng.choice(WORDS)} {claim.split()[hop]}"
                calls.append(ModuleCall("create_query", hop, f"Claim: {claim}\nNotes: {notes}", query, True))
                note = f"Notes: {rng.choice(WORDS)} {rng.choice(WORDS)} Enough: {'yes' if hop == hops - 1 else 'no'}"
                calls.append(ModuleCall("summarize", hop, f"Claim: {claim}\nPassages for {query}", note, True))
                notes.append(note)
            if failed:
                calls[-1].parsed_ok = False
                calls[-1].completion = "I am not sure"
            for j, call in enumerate(calls):
                call.call_id = f"e{e}r{r}c{j}"
            recall = None if failed else round(rng.choice([0.0, 0.5, 1.0]), 2)
            fmt = 0.0 if failed else 1.0
            trajectories.append(Trajectory(f"claim-{e}", calls, rewards={"recall": recall, "format": fmt},
                                           failed=failed, trajectory_id=f"e{e}r{r}",
                                           total_reward=-1.0 if failed else recall + fmt,
                                           final_output={"titles": [f"T{e}-{r}"]}))
    return trajectories


def hover_step_event(step: int, *, examples: int = 2, rollouts: int = 4, group_size: int = 5, attempt: int = 1,
                     seed: int = 0, extra=None) -> dict:
    trajectories = hover_trajectories(step, examples=examples, rollouts=rollouts, seed=seed)
    return _mmgrpo(step, trajectories, group_size=group_size, names=HOVER_REWARDS, attempt=attempt, extra=extra)


def collapse_step_event(step: int = 1, *, members: int = 4) -> dict:
    """One example, one module; the first four rewards are the GDPO paper's collapsing pattern,
    more members repeat it (so the number of members can grow while the distinct counts stay)."""
    pattern = [(1.0, 0.0), (0.0, 1.0), (0.0, 1.0), (0.0, 0.0)]
    trajectories = []
    for i in range(members):
        fmt, correct = pattern[i % 4]
        call = ModuleCall("answerer", 0, "Q: capital of France?", ["<think/>Paris", "Paris", "paris!", "Lyon"][i % 4] +
                          f" ({i})", True, call_id=f"c{i}")
        trajectories.append(Trajectory("q-collapse", [call], rewards={"format": fmt, "correct": correct},
                                       trajectory_id=f"t{i}", total_reward=fmt + correct))
    return _mmgrpo(step, trajectories, group_size=members, names=("format", "correct"))


def constant_step_event(step: int = 1, *, value: float = 0.56662966, members: int = 4, extra=None) -> dict:
    """One example ("q-constant"), one module, every rollout rewarded `value`: no reward variance,
    every advantage 0 (the degenerate-axis case of every chart, issue 27)."""
    trajectories = [Trajectory("q-constant", [ModuleCall("answerer", 0, "Q: 2 + 2?", f"4 ({i})", True, call_id=f"k{i}")],
                               rewards={"correct": value}, trajectory_id=f"k{i}", total_reward=value)
                    for i in range(members)]
    return _mmgrpo(step, trajectories, group_size=members, names=("correct",), extra=extra)


def mhgpo_step_event(step: int, *, questions: int = 2, group_size: int = 3, attempt: int = 1) -> dict:
    counter = itertools.count()
    program = LinearChain(("rewriter", "reranker", "answerer"))

    def generate(agent, prompts):
        return [f"{agent} says {next(counter) % 5}" if agent != "reranker" or i % 5 else "" for i, _ in enumerate(prompts)]

    trajectories = fork_on_first(program, [f"question {q} " + "context " * 20 for q in range(questions)],
                                 group_size=group_size, generate=generate,
                                 example_ids=[f"q{q}" for q in range(questions)])
    return _mhgpo(step, trajectories, attempt=attempt)


class CrashingChain(LinearChain):
    """A chain whose `step` raises ZeroDivisionError on a completion that holds CRASH."""

    def step(self, state, agent, completion):
        if "CRASH" in completion:
            return StepResult(state, True, len(completion) / 0)
        return super().step(state, agent, completion)


def error_step_event(step: int = 1, *, questions: int = 2, group_size: int = 3) -> dict:
    """FoF on `CrashingChain`: the reranker's step raises for fork 1 of q0 (its rollout index 1)."""

    def generate(agent, prompts):
        return ["CRASH" if agent == "reranker" and p.startswith("reranker: question 0") and i == 1 else f"{agent} says {i}"
                for i, p in enumerate(prompts)]

    trajectories = fork_on_first(CrashingChain(("rewriter", "reranker", "answerer")),
                                 [f"question {q}" for q in range(questions)], group_size=group_size, generate=generate,
                                 example_ids=[f"q{q}" for q in range(questions)])
    return _mhgpo(step, trajectories)


def _mhgpo(step: int, trajectories, *, attempt: int = 1) -> dict:
    for i, t in enumerate(trajectories):
        t.rewards = {"f1": None if t.failed else (i % 3) / 2}
        t.total_reward = -1.0 if t.failed else (i % 3) / 2
    apply_specific_rewards(trajectories, {"answerer": lambda c: -0.5 if len(c.completion.split()) > 2 else 0.0})
    propagate_rewards(trajectories)
    groups = mhgpo_groups(trajectories)
    rewards, ids = group_reward_arrays(groups, source="call")
    advantages = grpo_advantages(rewards, ids)
    assign_advantages(groups, advantages)
    annotate_group_stats(groups, rewards)
    return _event(step, trajectories, groups, rewards, advantages, attempt=attempt)


def make_run(owner, *, config: dict | None = None, **fields):
    """`factories.make_run` with a chosen config (the strategy decides how groups are read)."""
    from tests.webapp.runs.factories import make_run as make_plain_run

    run = make_plain_run(owner, **fields)
    if config is not None:
        run.config = {"steps": 4, **config}
        run.save(update_fields=["config"])
    return run


def ingest(run, events) -> None:
    step_events_ingest(run, list(events))


END_OF_TURN = "<|im_end|>"


def with_token_details(event: dict, *, seed: int = 0, fork_share: float = 0.2, topk: int = 3) -> dict:
    """The event with per-token details on every call, shaped as the trainer sends them
    (trainer/rollouts/trajectory.py `ModuleCall.tokens`): a word or a space per piece plus an
    end-of-turn token the text skips, deterministic log-probs and entropies, and alternatives at
    the positions whose entropy is in the step's top `fork_share`."""
    rng = random.Random(seed)
    calls = {}  # a call shared by forks gets one set of details
    for t in event["rollouts"]:
        for c in t["calls"]:
            key = c.get("call_id") or id(c)
            if key not in calls:
                pieces = [p for p in re.split(r"(\s+)", c["completion"]) if p] + [END_OF_TURN]
                entropy = [round(rng.uniform(0.0, 3.0), 4) for _ in pieces]
                trainer = [round(-rng.uniform(0.0, 4.0), 4) for _ in pieces]
                sampler = [round(lp + rng.choice([0.0, 0.0, 0.05, -0.3]), 4) for lp in trainer]
                calls[key] = {"pieces": pieces, "sampler": sampler, "trainer": trainer, "entropy": entropy}
            c["tokens"] = calls[key]
    every = sorted(e for d in calls.values() for e in d["entropy"])
    threshold = every[int(len(every) * (1 - fork_share))] if every else 0.0
    for details in calls.values():
        details["topk"] = [[i, [[details["pieces"][i], 0.4]] + [[f" alt{j}", round(0.3 / (j + 1), 4)] for j in range(topk - 1)]]
                           for i, e in enumerate(details["entropy"]) if e >= threshold]
    return event


def with_byte_fork(event: dict, *, example: str = "claim-0", entropy: float = 2.95) -> dict:
    """`with_token_details`' event with " 😀" (F0 9F 98 80) added to the first call of the example's
    first rollout as a byte-level BPE tokenizer splits it: a space, then two byte tokens that each
    decode to U+FFFD, the trainer sending their bytes; the last is a fork between two byte tokens that
    read alike (ids 501 and 502, 501 sampled) and " ok"."""
    call = next(t for t in event["rollouts"] if t["example_id"] == example)["calls"][0]
    tokens = {key: list(value) for key, value in call["tokens"].items()}  # its own copy: not the other calls'
    k = len(tokens["pieces"]) - 1  # before the end-of-turn token
    call["completion"] += " 😀"
    tokens["pieces"][k:k] = [" ", "\ufffd", "\ufffd"]
    tokens["sampler"][k:k] = tokens["trainer"][k:k] = [-0.1, -0.2, -0.69]
    tokens["entropy"][k:k] = [0.05, 0.3, entropy]
    tokens["topk"] = [[pos + 3 if pos >= k else pos, alternatives] for pos, alternatives in tokens["topk"]]
    tokens["topk"].append([k + 2, [["\ufffd", 0.5, 501, "9880"], ["\ufffd", 0.45, 502, "9881"], [" ok", 0.05, 503]], 501])
    tokens["bytes"] = [[k + 1, "f09f"], [k + 2, "9880"]]
    call["tokens"] = tokens
    return event
