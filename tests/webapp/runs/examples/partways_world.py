"""Two estimators, three seeds each, on one task, stored through the real ingest with the trainer's
own grouping and advantages, where the test knows which examples each run learned (issue 57, item 2).

Twelve steps; every step draws every example, four rollouts each, one `solver` call per rollout and
one reward, `correct` (weight 1, so an example is right at a visit when its best rollout scores 1).
A right visit's rewards are (1, 0, 1, 0), a wrong one's (0, 0, 0.5, 0). Side A is the GDPO seeds,
side B the GRPO seeds; `PLAN[example] = (A's seeds, B's seeds)`, each seed one of:

- `learned`: wrong at steps 1-6, right from step 7; `late3`: the same but wrong again at step 12;
- `always`, `never`; `lost`: right at steps 1-6, wrong after; `absent`: the example is never drawn.
"""

from __future__ import annotations

import numpy as np

from tests.webapp.runs.seeding import ingest, make_run
from trainer.algorithms.advantages import gdpo_advantages, grpo_advantages
from trainer.algorithms.grouping import form_module_level_groups
from trainer.algorithms.groups import assign_advantages, group_reward_arrays
from trainer.algorithms.metrics import annotate_group_stats, module_group_metrics
from trainer.rollouts.trajectory import ModuleCall, Trajectory, jsonable
from webapp.runs.models import Run

STEPS = 12
ROLLOUTS = 4
RIGHT, WRONG = (1.0, 0.0, 1.0, 0.0), (0.0, 0.0, 0.5, 0.0)
L, A, N, LOST, LATE3, NO = "learned", "always", "never", "lost", "late3", "absent"
PLAN = {
    "e1": ((L, L, L), (N, N, N)),
    "e2": ((L, L, L), (N, N, N)),
    "e3": ((L, L, L), (N, N, N)),
    "e4": ((N, N, N), (LATE3, LATE3, LATE3)),
    "e5": ((A, A, A), (A, A, A)),
    "e6": ((N, N, N), (LOST, LOST, LOST)),
    "e7": ((N, N, N), (N, N, N)),
    "e8": ((L, L, N), (L, N, N)),  # seed groups average: A late 2/3, B late 1/3
    "e9": ((A, A, A), (NO, NO, NO)),
}
# What partways() must say, A = GDPO, B = GRPO.
EXPECTED_ORDER = ["e1", "e2", "e3", "e4", "e8", "e6", "e5", "e7", "e9"]
EXPECTED_CATEGORY = {"e1": "learned_a", "e2": "learned_a", "e3": "learned_a", "e4": "learned_b", "e5": "solved_both",
                     "e6": "lost_b", "e7": "unsolved_both", "e8": "learned_a", "e9": "only_a"}
RULES = ({"name": "correct", "weight": 1.0},)


def right(kind: str, step: int) -> bool:
    return {L: step > 6, LATE3: 6 < step < 12, A: True, N: False, LOST: step <= 6}[kind]


def step_event(step: int, plan: dict[str, str], *, estimator: str, attempt: int = 1, wrong_all: bool = False) -> dict:
    """One step's event; `plan` maps each drawn example to its kind for this run."""
    trajectories = []
    for example, kind in plan.items():
        if kind == NO:
            continue
        rewards = WRONG if wrong_all or not right(kind, step) else RIGHT
        for i, reward in enumerate(rewards):
            call = ModuleCall("solver", 0, f"Question {example}?", f"answer {example} {reward} at {step}", True,
                              call_id=f"{example}-{step}-{i}")
            trajectories.append(Trajectory(example, [call], rewards={"correct": reward}, trajectory_id=f"{example}-{i}",
                                           total_reward=reward, final_output={"answer": str(reward)}))
    groups = form_module_level_groups(trajectories, group_size=ROLLOUTS, padding="fill", rng=step)
    rewards, ids = group_reward_arrays(groups, reward_names=["correct"])
    advantages = (gdpo_advantages if estimator == "gdpo" else grpo_advantages)(rewards, ids)
    assign_advantages(groups, advantages)
    annotate_group_stats(groups, rewards, reward_names=["correct"])
    totals = [t.total_reward for t in trajectories]
    metrics = {"reward/mean": float(np.mean(totals)), **module_group_metrics(groups, rewards, advantages)}
    return jsonable({"type": "step", "attempt": attempt, "step": step, "metrics": metrics,
                     "rollouts": [t.to_dict() for t in trajectories], "groups": [g.to_dict() for g in groups]})


def seeded_run(owner, estimator: str, seed: int, *, steps: int = STEPS, config=None, **fields) -> Run:
    plan = {example: plans[0 if estimator == "gdpo" else 1][seed] for example, plans in PLAN.items()}
    run = make_run(owner, state=Run.State.SUCCEEDED, name=f"{estimator} seed {seed}",
                   config={"strategy": "grpo", "estimator": estimator, "seed": seed, "steps": steps,
                           "rewards": [dict(r) for r in RULES], **(config or {})}, **fields)
    ingest(run, [step_event(s, plan, estimator=estimator) for s in range(1, steps + 1)])
    run.refresh_from_db()
    return run


def world(owner, **fields) -> tuple[list[Run], list[Run]]:
    """(the GDPO seeds, the GRPO seeds): side A and side B."""
    return ([seeded_run(owner, "gdpo", s, **fields) for s in range(3)],
            [seeded_run(owner, "grpo", s, **fields) for s in range(3)])
