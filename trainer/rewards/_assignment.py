"""Exact maximum-weight bipartite matching for small score matrices (no scipy).

ToolRL correctness (GDPO Appendix C) pairs predicted and gold tool calls "to maximize the total match
score". Scores are non-negative, so a maximum-weight matching equals a maximum-weight assignment of the
smaller side into the larger one (a pair with score 0 is as good as leaving both unpaired). The
Hungarian algorithm (Kuhn-Munkres, shortest augmenting paths with potentials) solves that in
O(n^2 m) for an n x m matrix with n <= m: gold lists are short (a handful of calls), so even a model
that spams hundreds of calls costs little. It works on any ordered field: callers pass ``Fraction``
scores so the optimum is exact and independent of the order of rows and columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

__all__ = ["max_weight_matching"]

Number = int | Fraction


def max_weight_matching(weights: Sequence[Sequence[Number]]) -> tuple[Number, list[tuple[int, int]]]:
    """Maximum total weight of a matching in a non-negative ``n x m`` matrix, and its pairs (row, col).

    Every row is matched to a distinct column when n <= m (and every column when n > m); pairs of
    weight 0 are dropped from the returned list since they add nothing.

    Example: ``max_weight_matching([[3, 1], [3, 0]])`` is ``(4, [(0, 1), (1, 0)])``: the greedy choice
    (0, 0) would leave row 1 with 0 and total 3.
    """
    n = len(weights)
    m = len(weights[0]) if n else 0
    if n == 0 or m == 0:
        return 0, []
    if any(len(row) != m for row in weights):
        raise ValueError("weights must be a rectangular matrix")
    if n > m:
        total, pairs = max_weight_matching([[weights[i][j] for i in range(n)] for j in range(m)])
        return total, sorted((i, j) for j, i in pairs)

    # Minimize cost = -weight. 1-indexed arrays with a virtual column 0 (e-maxx formulation).
    cost = [[-w for w in row] for row in weights]
    inf = sum(abs(w) for row in weights for w in row) + 1
    u = [0] * (n + 1)  # row potentials
    v = [0] * (m + 1)  # column potentials
    owner = [0] * (m + 1)  # owner[j] = row matched to column j (0 = none)
    way = [0] * (m + 1)
    for i in range(1, n + 1):
        owner[0] = i
        j0 = 0
        minv = [inf] * (m + 1)
        used = [False] * (m + 1)
        while True:
            used[j0] = True
            i0, delta, j1 = owner[j0], inf, 0
            for j in range(1, m + 1):
                if used[j]:
                    continue
                cur = cost[i0 - 1][j - 1] - u[i0] - v[j]
                if cur < minv[j]:
                    minv[j], way[j] = cur, j0
                if minv[j] < delta:
                    delta, j1 = minv[j], j
            for j in range(m + 1):
                if used[j]:
                    u[owner[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:  # flip the augmenting path
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    pairs = sorted((owner[j] - 1, j - 1) for j in range(1, m + 1) if owner[j])
    pairs = [(i, j) for i, j in pairs if weights[i][j] != 0]
    total = sum((weights[i][j] for i, j in pairs), 0)
    return total, pairs
