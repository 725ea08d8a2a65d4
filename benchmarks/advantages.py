"""Time module-level grouping + GDPO advantages against a straightforward per-group Python loop.

Batch: 512 questions x 16 rollouts x 3 modules (one call each) x 3 rewards = 24,576 module calls in
1,536 groups of 16. Both paths start from the same flat per-call arrays (trajectory, example and
module of each call, in trajectory order, and the per-trajectory reward matrix) and produce one GDPO
advantage per call; the script checks that they agree before printing the timings.

- vectorized: ``relative_invocation_indices`` + ``module_group_codes`` (MMGRPO Algorithm 1's key)
  and ``gdpo_advantages`` (GDPO Eq. 4-6), no Python loop over calls or groups;
- loop: a dict keyed by (example, module, invocation index) built call by call, then for each group
  and reward a NumPy mean/std, then the batch normalization.

For information it also times the object path the trainer uses for padded groups
(``form_module_level_groups`` with ``fill`` + ``group_reward_arrays`` + ``gdpo_advantages``).

Run: ``.venv/bin/python benchmarks/advantages.py``
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer.algorithms.advantages import gdpo_advantages  # noqa: E402
from trainer.algorithms.grouping import (  # noqa: E402
    form_module_level_groups,
    module_group_codes,
    relative_invocation_indices,
)
from trainer.algorithms.groups import group_reward_arrays  # noqa: E402
from trainer.rollouts.trajectory import ModuleCall, Trajectory  # noqa: E402

QUESTIONS, ROLLOUTS, MODULES, REWARDS = 512, 16, 3, 3
EPS = 1e-4
REPEATS = 7


def make_batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    n_traj = QUESTIONS * ROLLOUTS
    # Per trajectory: a binary format reward, a graded correctness reward, a length reward with some
    # missing values (a reward function that returned None).
    traj_rewards = np.column_stack([
        rng.integers(0, 2, n_traj).astype(float),
        rng.integers(-3, 4, n_traj).astype(float),
        rng.random(n_traj),
    ])  # (T, K)
    traj_rewards[rng.random(n_traj) < 0.02, 2] = np.nan
    traj_of_call = np.repeat(np.arange(n_traj), MODULES)  # (N,) calls listed in trajectory order
    module_of_call = np.tile(np.arange(MODULES), n_traj)  # (N,)
    example_of_traj = np.repeat(np.arange(QUESTIONS), ROLLOUTS)  # (T,)
    return traj_rewards, traj_of_call, module_of_call, example_of_traj


def vectorized(traj_rewards, traj_of_call, module_of_call, example_of_traj):
    invocation = relative_invocation_indices(traj_of_call, module_of_call)
    groups = module_group_codes(example_of_traj[traj_of_call], module_of_call, invocation)
    return gdpo_advantages(traj_rewards[traj_of_call], groups, eps=EPS)


def loop(traj_rewards, traj_of_call, module_of_call, example_of_traj):
    groups: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    seen: dict[tuple[int, int], int] = defaultdict(int)
    for i, (t, m) in enumerate(zip(traj_of_call.tolist(), module_of_call.tolist(), strict=True)):
        groups[(int(example_of_traj[t]), m, seen[(t, m)])].append(i)
        seen[(t, m)] += 1
    rewards = traj_rewards[traj_of_call]  # (N, K)
    summed = np.zeros(len(rewards))
    signal = np.zeros(len(rewards), dtype=bool)
    for members in groups.values():
        block = rewards[members]  # (G, K)
        for k in range(block.shape[1]):
            col = block[:, k]
            known = ~np.isnan(col)
            values = col[known]
            if values.size < 2 or values.max() == values.min():
                continue
            adv = (values - values.mean()) / (values.std(ddof=1) + EPS)
            idx = np.asarray(members)[known]
            summed[idx] += adv
            signal[idx] = True
    present = ~np.isnan(rewards).all(axis=1)
    batch = summed[present]
    return np.where(signal, (summed - batch.mean()) / (batch.std(ddof=1) + EPS), 0.0)


def objects(trajectories):
    groups = form_module_level_groups(trajectories, group_size=ROLLOUTS, padding="fill")
    rewards, ids = group_reward_arrays(groups, reward_names=["format", "correct", "length"])
    return gdpo_advantages(rewards, ids, eps=EPS)


def best_of(fn, *args) -> tuple[float, list[float]]:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times), times


def main() -> None:
    data = make_batch()
    fast_out = vectorized(*data)
    slow_out = loop(*data)
    if not np.allclose(fast_out, slow_out, atol=1e-9):
        raise SystemExit(f"paths disagree: max diff {np.abs(fast_out - slow_out).max()}")
    fast, fast_all = best_of(vectorized, *data)
    slow, slow_all = best_of(loop, *data)

    traj_rewards, traj_of_call, module_of_call, example_of_traj = data
    names = ["format", "correct", "length"]
    trajectories = [
        Trajectory(
            f"q{example_of_traj[t]}",
            [ModuleCall(f"m{m}", 0, "prompt", "completion", True) for m in range(MODULES)],
            rewards={n: (None if np.isnan(v) else float(v)) for n, v in zip(names, traj_rewards[t], strict=True)},
            trajectory_id=str(t),
        )
        for t in range(QUESTIONS * ROLLOUTS)
    ]
    obj_out = objects(trajectories)
    if not np.allclose(np.sort(obj_out), np.sort(fast_out), atol=1e-9):
        raise SystemExit("object path disagrees with the vectorized path")
    obj, _ = best_of(objects, trajectories)

    n_calls = len(traj_of_call)
    n_groups = QUESTIONS * MODULES
    print(f"batch: {QUESTIONS} questions x {ROLLOUTS} rollouts x {REWARDS} rewards x {MODULES} modules "
          f"= {n_calls} calls in {n_groups} groups (best of {REPEATS})")
    print(f"vectorized grouping + GDPO : {fast * 1e3:8.2f} ms  (median {statistics.median(fast_all) * 1e3:.2f} ms)")
    print(f"per-group Python loop      : {slow * 1e3:8.2f} ms  (median {statistics.median(slow_all) * 1e3:.2f} ms)")
    print(f"speed-up                   : {slow / fast:8.1f}x  (target >= 20x)")
    print(f"object path (Algorithm 1 with fill + SelectKDiverse, then GDPO): {obj * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
