"""Exact maximum-weight matching used by ToolRL correctness, checked against brute force."""

import itertools
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.rewards._assignment import max_weight_matching


def brute_force(weights):
    n = len(weights)
    m = len(weights[0]) if n else 0
    best = 0
    if n <= m:
        for cols in itertools.permutations(range(m), n):
            best = max(best, sum(weights[i][c] for i, c in enumerate(cols)))
    else:
        for rows in itertools.permutations(range(n), m):
            best = max(best, sum(weights[r][j] for j, r in enumerate(rows)))
    return best


def test_beats_greedy():
    # Greedy row by row takes (0, 0) = 3 and leaves row 1 with 0; the optimum is 1 + 3 = 4.
    assert max_weight_matching([[3, 1], [3, 0]]) == (4, [(0, 1), (1, 0)])


def test_empty_and_degenerate():
    assert max_weight_matching([]) == (0, [])
    assert max_weight_matching([[]]) == (0, [])
    assert max_weight_matching([[0, 0]]) == (0, [])
    assert max_weight_matching([[5]]) == (5, [(0, 0)])


def test_more_rows_than_columns():
    total, pairs = max_weight_matching([[1], [7], [3]])
    assert (total, pairs) == (7, [(1, 0)])


def test_fractions_are_exact():
    total, _ = max_weight_matching([[Fraction(1, 3), Fraction(2, 3)], [Fraction(1, 3), Fraction(0)]])
    assert total == Fraction(1)


def test_ragged_matrix_rejected():
    with pytest.raises(ValueError):
        max_weight_matching([[1, 2], [3]])


def test_large_one_sided_is_fast():
    # A model spamming 2000 calls against 4 gold calls: O(n^2 m) keeps this trivial.
    weights = [[(i * 7 + j * 13) % 11 for j in range(2000)] for i in range(4)]
    total, pairs = max_weight_matching(weights)
    assert total == 40
    assert len({j for _, j in pairs}) == len(pairs) == 4


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda n: st.integers(1, 4).flatmap(
            lambda m: st.lists(
                st.lists(st.integers(0, 30).map(lambda k: Fraction(k, 6)), min_size=m, max_size=m),
                min_size=n,
                max_size=n,
            )
        )
    )
)
def test_matches_brute_force(weights):
    total, pairs = max_weight_matching(weights)
    assert total == brute_force(weights)
    assert sum(weights[i][j] for i, j in pairs) == total
    assert len({i for i, _ in pairs}) == len({j for _, j in pairs}) == len(pairs)
