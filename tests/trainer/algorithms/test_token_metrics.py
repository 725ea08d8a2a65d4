"""The step's tokens/... metrics (trainer/algorithms/token_metrics.py) on hand-made completions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainer.algorithms.token_metrics import GroupExtremes, ScoredTokens, fork_threshold, token_metrics


def test_metric_values_on_a_hand_made_step():
    # Rewriter: two completions; the first with the sampler's log-probs, one of them 0.2 nats off.
    high = ScoredTokens("rewriter", np.array([2.0, 1.0, 3.0]), np.log([0.5, 0.5, 0.25]),
                        np.log([0.5, 0.5, 0.25]) + np.array([0.0, 0.2, 0.05]))
    low = ScoredTokens("rewriter", np.array([0.0]), np.log([0.9]))  # no sampler log-probs: the trainer's
    # Answerer: one completion, a sampler log-prob missing at its second token.
    answer = ScoredTokens("answerer", np.array([4.0, 0.0]), np.log([0.2, 1.0]), np.array([np.log(0.2), np.nan]))
    extremes = [GroupExtremes("rewriter", best=low, worst=high), GroupExtremes("answerer", best=answer, worst=answer)]
    out = token_metrics([high, low, answer], extremes, per_module=True)

    every = [2.0, 1.0, 3.0, 0.0, 4.0, 0.0]
    assert out["tokens/entropy/mean"] == pytest.approx(10 / 6)
    assert [out[f"tokens/entropy/p{q}"] for q in (10, 50, 90)] == pytest.approx(np.quantile(every, [0.1, 0.5, 0.9]))
    assert out["tokens/entropy/best"] == pytest.approx((0.0 + 2.0) / 2)  # low's mean, answer's mean
    assert out["tokens/entropy/worst"] == pytest.approx((2.0 + 2.0) / 2)  # high's mean, answer's mean
    # Tokens with both log-probs: high's three and answer's first; one gap (0.2) above 0.1 nats.
    assert out["tokens/mismatch/share"] == pytest.approx(1 / 4)
    assert out["tokens/mismatch/max"] == pytest.approx(0.2)
    sampled = [0.5, 0.5 * math.exp(0.2), 0.25 * math.exp(0.05), 0.9, 0.2, 1.0]  # the trainer's where no sampler's
    assert out["tokens/prob/mean"] == pytest.approx(np.mean(sampled))
    # Per module, the same names with the module appended.
    assert out["tokens/entropy/mean/rewriter"] == pytest.approx(6 / 4)
    assert out["tokens/entropy/mean/answerer"] == pytest.approx(2.0)
    assert out["tokens/entropy/best/rewriter"] == 0.0 and out["tokens/entropy/worst/rewriter"] == 2.0
    assert out["tokens/mismatch/share/answerer"] == 0.0 and out["tokens/prob/mean/answerer"] == pytest.approx(0.6)


def test_one_module_gets_no_per_module_names_and_no_sampler_no_mismatch():
    out = token_metrics([ScoredTokens("echo", np.array([1.0, 2.0]), np.log([0.5, 0.5]))])
    assert sorted(out) == ["tokens/entropy/mean", "tokens/entropy/p10", "tokens/entropy/p50", "tokens/entropy/p90",
                           "tokens/prob/mean"]
    assert token_metrics([]) == {}


def test_forks_are_the_top_share_of_the_steps_entropies():
    entropies = [np.arange(10.0), np.arange(10.0, 20.0)]
    threshold = fork_threshold(entropies, 0.1)
    assert threshold == pytest.approx(np.quantile(np.arange(20.0), 0.9))
    assert sum(int((e >= threshold).sum()) for e in entropies) == 2
    assert fork_threshold(entropies, 1.0) == 0.0  # every token a fork
    assert fork_threshold([np.array([np.nan, 1.0])], 0.5) == 1.0


def test_the_modules_examples_hold():
    import doctest

    import trainer.algorithms.token_metrics as module

    assert doctest.testmod(module).failed == 0
