"""GDPO paper Figure 3: how many distinct advantage groups GRPO, GRPO without std and GDPO produce.

For G rollouts and K binary rewards, every reward outcome of a group is enumerated: each rollout gets a
K-vector in {0, 1}^K, and outcomes that differ only in the order of the rollouts count once (the
paper's "six distinct combinations when order is ignored" for G = K = 2). Each outcome's advantages
come from Cohort's own estimators (trainer/algorithms/advantages.py), all outcomes in one call per estimator:

- GRPO: `grpo_advantages` on the reward sum, normalized by the group's std (GDPO Eq. 1-2);
- GRPO w/o std: the same with `scale="none"` (Dr. GRPO);
- GDPO: `gdpo_advantages` with each reward normalized in its group, then summed (Eq. 4-5), without the
  batch-wise step (Eq. 6), as the paper's figures leave it out: one affine map per batch changes no count.

An outcome's advantage group is the multiset of its G advantages (rounded to 6 decimals); the table
counts the distinct ones. Two sweeps as in Figure 3: K = 2 with G = 2..16, and G = 4 with K = 1..6.

    .venv/bin/python benchmarks/advantage_resolution.py [--out benchmarks/out/advantage_resolution.html]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.algorithms.advantages import gdpo_advantages, grpo_advantages  # noqa: E402

DECIMALS = 6
ROLLOUT_SWEEP = (2, list(range(2, 17)))  # (rewards, rollouts...)
REWARD_SWEEP = (4, list(range(1, 7)))  # (rollouts, rewards...)
# eps=0: the paper's formulas exactly. The training default (1e-4) would make (0, 1) and (0, 2) differ in
# the fourth decimal (0.7070 against 0.7071), an artefact of numerical safety, not a distinct signal.
ESTIMATORS = {
    "GRPO": lambda r, ids: grpo_advantages(r, ids, eps=0.0),
    "GRPO w/o std": lambda r, ids: grpo_advantages(r, ids, scale="none", eps=0.0),
    "GDPO": lambda r, ids: gdpo_advantages(r, ids, batch_norm=False, eps=0.0),
}


def outcomes(rollouts: int, rewards: int) -> np.ndarray:
    """Every reward outcome of a group, order of rollouts ignored: (N, rollouts, rewards) of 0/1."""
    vectors = np.asarray(list(itertools.product((0.0, 1.0), repeat=rewards)))  # (2^K, K)
    picks = np.asarray(list(itertools.combinations_with_replacement(range(len(vectors)), rollouts)))
    return vectors[picks]


def distinct_advantage_groups(groups: np.ndarray, estimator) -> int:
    """How many distinct multisets of advantages `estimator` gives the (N, G, K) outcomes."""
    n, g, k = groups.shape
    advantages = estimator(groups.reshape(n * g, k), np.repeat(np.arange(n), g)).reshape(n, g)
    canonical = np.sort(np.round(advantages, DECIMALS) + 0.0, axis=1)  # + 0.0: -0.0 == 0.0 as bytes
    return len(np.unique(canonical, axis=0))


def counts(rollouts: int, rewards: int) -> dict[str, int]:
    groups = outcomes(rollouts, rewards)
    return {"outcomes": len(groups), **{name: distinct_advantage_groups(groups, fn) for name, fn in ESTIMATORS.items()}}


def table() -> list[dict]:
    rewards, rollout_counts = ROLLOUT_SWEEP
    rows = [{"rollouts": g, "rewards": rewards, **counts(g, rewards)} for g in rollout_counts]
    rollouts, reward_counts = REWARD_SWEEP
    rows += [{"rollouts": rollouts, "rewards": k, **counts(rollouts, k)} for k in reward_counts]
    return rows


def figure(rows: list[dict]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"{ROLLOUT_SWEEP[0]} binary rewards",
                                                        f"{REWARD_SWEEP[0]} rollouts"))
    first = [r for r in rows if r["rewards"] == ROLLOUT_SWEEP[0] and r["rollouts"] in ROLLOUT_SWEEP[1]]
    second = [r for r in rows if r["rollouts"] == REWARD_SWEEP[0] and r["rewards"] in REWARD_SWEEP[1]]
    colors = {"GRPO": "#d62728", "GRPO w/o std": "#ff7f0e", "GDPO": "#1f77b4"}
    for name in ESTIMATORS:
        fig.add_trace(go.Scatter(x=[r["rollouts"] for r in first], y=[r[name] for r in first], name=name,
                                 mode="lines+markers", line={"color": colors[name]}), row=1, col=1)
        fig.add_trace(go.Scatter(x=[r["rewards"] for r in second], y=[r[name] for r in second], name=name,
                                 mode="lines+markers", line={"color": colors[name]}, showlegend=False), row=1, col=2)
    fig.update_xaxes(title_text="rollouts", row=1, col=1)
    fig.update_xaxes(title_text="rewards", row=1, col=2)
    fig.update_yaxes(title_text="distinct advantage groups", type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title="Distinct advantage groups (GDPO paper, Figure 3), computed by Cohort's estimators")
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/advantage_resolution.html"))
    args = parser.parse_args()
    started = time.perf_counter()
    rows = table()
    print(f"{'rollouts':>8} {'rewards':>7} {'outcomes':>9} " + " ".join(f"{n:>13}" for n in ESTIMATORS))
    for r in rows:
        print(f"{r['rollouts']:>8} {r['rewards']:>7} {r['outcomes']:>9,} " + " ".join(f"{r[n]:>13,}" for n in ESTIMATORS))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure(rows).write_html(args.out, include_plotlyjs="cdn")
    print(f"figure: {args.out}  ({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
