"""Runs whose answers the across-runs tests know, stored through the real ingest: a two-module program
("reason" then "answer"), its rollouts grouped and their advantages computed by the trainer's own
code (tests/webapp/runs/seeding.py), each step's best answer chosen by the test."""

from __future__ import annotations

from tests.webapp.runs.seeding import _mmgrpo, ingest, make_run
from trainer.rollouts.trajectory import ModuleCall, Trajectory
from webapp.runs.models import Run

REWARDS = ("correct",)
CONFIG = {"strategy": "grpo", "padding": "fill", "rewards": [{"name": "correct", "weight": 1.0}]}


def answers_event(step: int, answers: dict[str, list[tuple[str, str, float]]], *, attempt: int = 1) -> dict:
    """A step whose example `e`'s rollouts are `answers[e]`: (reasoning, answer, reward) each."""
    trajectories = []
    for example, rollouts in answers.items():
        for r, (reason, answer, reward) in enumerate(rollouts):
            calls = [ModuleCall("reason", 0, f"Q {example}: think", reason, True, call_id=f"{example}-{r}-0"),
                     ModuleCall("answer", 0, f"Q {example}: {reason}", answer, True, call_id=f"{example}-{r}-1")]
            trajectories.append(Trajectory(example, calls, rewards={"correct": reward}, trajectory_id=f"{example}-{r}",
                                           total_reward=reward))
    size = max(len(v) for v in answers.values())
    return _mmgrpo(step, trajectories, group_size=size, names=REWARDS, attempt=attempt)


def visit(best: tuple[str, str, float], other_reward: float = 0.0) -> list[tuple[str, str, float]]:
    """A visit's rollouts: `best` first, then a worse one (a wrong guess)."""
    return [best, ("I guess", "no idea at all", other_reward)]


def run_with(owner, visits: dict[int, dict[str, list]], *, name: str = "", total_steps: int = 0, config=None,
             **fields) -> Run:
    run = make_run(owner, config={**CONFIG, **(config or {})}, name=name, state=Run.State.SUCCEEDED, **fields)
    if total_steps:
        Run.objects.filter(pk=run.pk).update(total_steps=total_steps)
        run.refresh_from_db()
    ingest(run, [answers_event(step, answers) for step, answers in sorted(visits.items())])
    run.refresh_from_db()
    return run


# Run A learns q1 at step 2; run B at step 3 and differs in its words.
A_VISITS = {
    1: {"q1": visit(("add two and two", "The answer is 3", 0.5)), "q2": visit(("hmm", "blue", 0.2))},
    2: {"q1": visit(("add two and two carefully", "The answer is 4", 1.0))},
    3: {"q1": visit(("add two and two carefully", "The answer is 4 indeed", 1.0)), "q2": visit(("sky", "blue sky", 0.4))},
    4: {"q1": visit(("add two and two carefully", "The answer is 4 indeed", 1.0))},
}
B_VISITS = {
    1: {"q1": visit(("two plus two", "The answer is 5", 0.25))},
    2: {"q1": visit(("two plus two", "The answer is 22", 0.25))},
    3: {"q1": visit(("add two and two", "The answer is 4", 1.0))},
    4: {"q1": visit(("add two and two", "The answer is 4", 1.0))},
}
