"""Step events built by hand for the credit tests, with advantages, rewards and texts the tests know,
stored through the real ingest (`webapp.runs.ingest.store.step_events_ingest`)."""

from __future__ import annotations

from webapp.runs.models import Program, Run, Task

CHAIN = ("rewriter", "reranker", "answerer")


def chain_task(modules=CHAIN) -> Task:
    program = Program.objects.get_or_create(name="credit-chain", defaults={"title": "Chain", "modules": list(modules)})[0]
    return Task.objects.get_or_create(name="credit-chain-task", defaults={"title": "Chain task", "program": program})[0]


def on_chain(run: Run) -> Run:
    """The run moved onto a three-module program (the factories' toy program has one module)."""
    run.task = chain_task()
    run.save(update_fields=["task"])
    return run


def call(cid: str, module: str, completion: str, *, prompt: str = "", propagated=None, specific: float = 0.0) -> dict:
    return {"call_id": cid, "module": module, "invocation_index": 0, "prompt": prompt or f"{module}: q",
            "completion": completion, "parsed_ok": True, "specific_reward": specific,
            "propagated_reward": propagated}


def rollout(tid: str, example: str, reward: float | None, calls: list[dict]) -> dict:
    return {"trajectory_id": tid, "example_id": example, "reward": reward, "rewards": {"f1": reward},
            "failed": False, "calls": calls}


def group(module: str, example: str, variance: float, members: list[tuple]) -> dict:
    """members: (trajectory id, call id, advantage[, padded])."""
    return {"group_id": f"{example}/{module}/{len(members)}/{variance}", "module": module, "invocation_index": 0,
            "kind": "homogeneous", "example_id": example, "reward_mean": 0.0, "reward_var": variance,
            "members": [{"trajectory_id": m[0], "call_id": m[1], "advantage": m[2], "reward": 0.0,
                         "padded": bool(m[3]) if len(m) > 3 else False} for m in members]}


def step_event(step: int, rollouts: list[dict], groups: list[dict], *, attempt: int = 1) -> dict:
    return {"type": "step", "attempt": attempt, "step": step, "metrics": {"reward/mean": 0.5},
            "rollouts": rollouts, "groups": groups}


# The constructed trajectory set: one question, three rollouts, two modules with known numbers.
REWARDS = (1.0, 0.0, 0.5)
# rewriter: propagated + specific; answerer: propagated + specific (MHGPO Eq. 4-5)
REWRITER_LOCAL = ((0.8, 0.0), (0.2, 0.0), (0.2, -0.5))
ANSWERER_LOCAL = ((1.0, 0.0), (0.0, -0.5), (0.5, 0.0))
STEP_TEXTS = {
    1: {"rewriter": ("capital of france", "france capital city", "capital of france"),
        "answerer": ("paris", "lyon", "paris is the capital")},
    2: {"rewriter": ("capital of france", "largest city in france", "capital of france"),
        "answerer": ("Paris.", "marseille", "paris capital")},
}
REWRITER_PROMPTS = ("rewrite: q0", "rewrite: q0 again", "rewrite: q0")  # rollouts 0 and 2 share the call
ADVANTAGES = {  # step -> module -> [(rollout, advantage, padded)]
    1: {"rewriter": [(0, 1.0, False), (1, -0.5, False), (2, -0.5, False), (0, 2.0, True)],
        "answerer": [(0, 1.0, False), (1, -1.0, False), (2, 0.0, False)]},
    2: {"rewriter": [(0, 0.25, False), (1, -0.25, False), (2, 0.0, False)],
        "answerer": [(0, 1.5, False), (1, -1.5, False), (2, 0.0, False)]},
}
VARIANCES = {1: {"rewriter": [0.3], "answerer": [0.7, 0.1]}, 2: {"rewriter": [0.05], "answerer": [0.9]}}


def constructed_step(step: int, *, with_groups: bool = True, extra_example: bool = True) -> dict:
    texts = STEP_TEXTS[step]
    rollouts = []
    for i, reward in enumerate(REWARDS):
        (rp, rs), (ap, aspec) = REWRITER_LOCAL[i], ANSWERER_LOCAL[i]
        rollouts.append(rollout(f"t{i}", "q0", reward, [
            call(f"w{i}", "rewriter", texts["rewriter"][i], prompt=REWRITER_PROMPTS[i], propagated=rp, specific=rs),
            call(f"a{i}", "answerer", texts["answerer"][i], prompt=f"answer {i}", propagated=ap, specific=aspec)]))
    if extra_example and step == 2:  # an input the earlier step did not draw; no reward, so no correlation pair
        rollouts.append(rollout("t9", "q9", None, [call("a9", "answerer", "rome", propagated=None)]))
    groups = []
    if with_groups:
        for module, members in ADVANTAGES[step].items():
            prefix = "w" if module == "rewriter" else "a"
            variances = VARIANCES[step][module]
            groups.append(group(module, "q0", variances[0],
                                [(f"t{r}", f"{prefix}{r}", adv, padded) for r, adv, padded in members]))
            for v in variances[1:]:  # a further group of the module: one member, its own variance
                groups.append(group(module, "q0", v, [("t1", f"{prefix}1", 0.5)]))
    return step_event(step, rollouts, groups)


def drifting_mhgpo_step(step: int, *, questions: int = 3, group_size: int = 3) -> dict:
    """A real MHGPO step through the trainer's own code: `fork_on` (MHGPO Algorithm 2) at an agent that
    moves with the step and the question, rewards that vary with the step, agent-specific penalties,
    backward propagation (Eq. 4), the groups of Eq. 5 and GRPO advantages; the answers' words drift
    from step to step, so the change between two steps is neither 0 nor 1."""
    import random

    import numpy as np

    from trainer.algorithms.advantages import grpo_advantages
    from trainer.algorithms.groups import assign_advantages, group_reward_arrays
    from trainer.algorithms.metrics import annotate_group_stats
    from trainer.algorithms.propagation import apply_specific_rewards, mhgpo_groups, propagate_rewards
    from trainer.rollouts.sampling import LinearChain, fork_on
    from trainer.rollouts.trajectory import jsonable

    rng = random.Random(step)
    words = ["paris", "capital", "france", "city", "river", "seine", "north", "europe", "lyon", "tower"]

    def generate(agent, prompts):
        return [" ".join(rng.sample(words[: 4 + min(step, 6)], k=2 + (i + step) % 3)) for i, _ in enumerate(prompts)]

    program = LinearChain(CHAIN)
    trajectories = []
    for q in range(questions):
        agent = CHAIN[(step + q) % len(CHAIN)]
        trajectories += fork_on(program, f"question {q}", agent, group_size=group_size, generate=generate,
                                example_id=f"q{q}")
    for t in trajectories:
        t.total_reward = rng.choice([0.0, 0.5, 1.0])
        t.rewards = {"f1": t.total_reward}
    apply_specific_rewards(trajectories, {"answerer": lambda c: -0.5 if len(c.completion.split()) > 3 else 0.0,
                                          "rewriter": lambda c: -0.25 if "lyon" in c.completion else 0.0})
    propagate_rewards(trajectories)
    groups = mhgpo_groups(trajectories)
    rewards, ids = group_reward_arrays(groups, source="call")
    assign_advantages(groups, grpo_advantages(rewards, ids))
    annotate_group_stats(groups, rewards)
    return jsonable({"type": "step", "attempt": 1, "step": step,
                     "metrics": {"reward/mean": float(np.mean([t.total_reward for t in trajectories]))},
                     "rollouts": [t.to_dict() for t in trajectories], "groups": [g.to_dict() for g in groups]})
