"""Where two runs part: the examples of one task ranked by how differently two runs (or two seed
groups) did on them (issue 57, item 2).

What is counted, per run and example, over the steps that drew the example (its *visits*), each
step read at its newest attempt (a resumed run re-did some steps: the newest answer wins, as in the
inspectors), over the student's rollouts only (a BetterTogether teacher's are not the run's answers):

- a visit is *right* when its best rollout's total reward reaches the solved threshold
  (`common.solved_threshold`, or `?solved=`); a visit whose rewards are all missing is not right;
- *early* is the first third of the run's visits of the example (rounded up), *late* the last third:
  with one visit both are that visit, with two the first and the last;
- `early` and `late` are the share of right visits there, `early_mean`/`late_mean` the mean reward of
  every rollout there (the mean of the visits' means), `gain` is `late - early`;
- `first_right` is the first step with a right visit (None: never), `right_at_end` whether the last
  visit was right.

A side of several runs (seeds) averages each number over its runs that drew the example; its
`first_right` is the earliest of theirs and `right_at_end` the share of them right at the end.

Categories, from each side's early and late shares (*solved* means a share of at least 1/2):

- `learned_a`: A ends solved, B does not (and B did not lose it); A may have had it from the start
  (see `early`); `learned_b` the other way round;
- `lost_a`: A was solved early and is not late, and B ends solved or did not lose it as well; when
  both lost it, the side whose share fell further (A on a tie); `lost_b` the other way round;
- `solved_both`, `unsolved_both`: both end solved, neither does (and neither lost it);
- `only_a`, `only_b`: drawn by one side's runs only; nothing to compare, listed last.

A run named on both sides counts in each side's average (a note says so; the same runs on both
sides make a table where nothing parts, and the note says that instead of refusing).

The ranking puts first the examples on which the sides ended furthest apart, `|late_A - late_B|`,
then those whose progress differed most, `|gain_A - gain_B|`, then `|late_mean_A - late_mean_B|`,
then the example id.

Cost: two queries for every run of both sides (the steps a resume re-did, then the aggregate, in the
database: per run, example and step, then per run and example with a window function): no rollout
row reaches Python, and the number of queries does not grow with runs, steps or examples. The
aggregate's rows are one per run and example.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db import connection

from webapp.runs.examples.common import ExamplesRefused, same_task, solved_threshold
from webapp.runs.ingest.retention import Retention
from webapp.runs.models import Run
from webapp.runs.params import BadParam

MAX_RUNS_PER_SIDE = 16
PAGE_ROWS, MAX_PAGE_ROWS = 200, 5000  # the page's `limit`
SOLVED_SHARE = 0.5  # a side "solves" an example when at least this share of its visits there are right
CATEGORIES = {
    "learned_a": "Learned by A, not by B",
    "learned_b": "Learned by B, not by A",
    "lost_a": "Lost by A",
    "lost_b": "Lost by B",
    "solved_both": "Solved by both",
    "unsolved_both": "Still unsolved by both",
    "only_a": "Drawn by A only",
    "only_b": "Drawn by B only",
}

# Per run, example and step (a visit), then early and late thirds by the visit's rank in its run.
# `{stale}` drops the rollouts of steps a later attempt re-did (`_stale_ranges`), `{solved}` is a CASE
# over the run ids, `{runs}` their placeholders. With an index on (run, example_id, step) that covers
# total_reward, attempt and teacher, PostgreSQL reads it in order: one index-only scan, no sort.
PER_RUN_SQL = """
WITH visits AS (
    SELECT r.run_id, r.example_id, r.step, MAX(r.total_reward) AS best, AVG(r.total_reward) AS mean,
           ROW_NUMBER() OVER w AS k, COUNT(*) OVER w AS n
    FROM runs_rollout r
    WHERE r.run_id IN ({runs}) AND r.teacher = ''{stale}
    GROUP BY r.run_id, r.example_id, r.step
    WINDOW w AS (PARTITION BY r.run_id, r.example_id ORDER BY r.step
                 ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
), ranked AS (
    SELECT run_id, example_id, step, mean, k, n,
           CASE WHEN best >= (CASE run_id {solved} END) THEN 1.0 ELSE 0.0 END AS good
    FROM visits
)
SELECT run_id, example_id, MAX(n) AS visits,
       AVG(CASE WHEN k <= (n + 2) / 3 THEN good END) AS early,
       AVG(CASE WHEN k > n - (n + 2) / 3 THEN good END) AS late,
       AVG(CASE WHEN k <= (n + 2) / 3 THEN mean END) AS early_mean,
       AVG(CASE WHEN k > n - (n + 2) / 3 THEN mean END) AS late_mean,
       MIN(CASE WHEN good > 0 THEN step END) AS first_right,
       MAX(CASE WHEN k = n THEN good END) AS right_at_end,
       MIN(step) AS first_step, MAX(step) AS last_step
FROM ranked
GROUP BY run_id, example_id
"""
# Steps stored by more than one attempt: (run, attempt, step) of every attempt but the newest.
STALE_SQL = """
SELECT m.run_id, m.attempt, m.step FROM runs_stepmetric m
WHERE m.run_id IN ({runs}) AND EXISTS (
    SELECT 1 FROM runs_stepmetric n WHERE n.run_id = m.run_id AND n.step = m.step AND n.attempt > m.attempt)
ORDER BY m.run_id, m.attempt, m.step
"""


@dataclass
class Side:
    """One side's numbers on one example (averaged over its runs that drew it)."""

    runs: int  # how many of the side's runs drew the example
    visits: int  # their visits, summed
    early: float
    late: float
    early_mean: float | None
    late_mean: float | None
    first_right: int | None
    right_at_end: float  # share of the runs right at their last visit
    first_step: int
    last_step: int

    @property
    def gain(self) -> float:
        return self.late - self.early

    @property
    def solved_early(self) -> bool:
        return self.early >= SOLVED_SHARE

    @property
    def solved_late(self) -> bool:
        return self.late >= SOLVED_SHARE

    @property
    def lost(self) -> bool:
        return self.solved_early and not self.solved_late


@dataclass
class Row:
    example_id: str
    category: str
    a: Side | None
    b: Side | None

    @property
    def category_label(self) -> str:
        return CATEGORIES[self.category]

    @property
    def sides(self) -> list[tuple[str, Side | None]]:
        return [("a", self.a), ("b", self.b)]

    @property
    def late_gap(self) -> float | None:
        return None if self.a is None or self.b is None else abs(self.a.late - self.b.late)

    @property
    def gain_gap(self) -> float | None:
        return None if self.a is None or self.b is None else abs(self.a.gain - self.b.gain)

    @property
    def mean_gap(self) -> float | None:
        if self.a is None or self.b is None or self.a.late_mean is None or self.b.late_mean is None:
            return None
        return abs(self.a.late_mean - self.b.late_mean)


@dataclass
class Partways:
    a: list[Run]
    b: list[Run]
    solved: dict[int, float]  # run id -> threshold used
    rows: list[Row]  # every example, ranked
    counts: dict[str, int]  # category -> examples, every category present (0 when none)
    notes: list[str] = field(default_factory=list)  # what is missing: runs without rollouts, retention

    @property
    def solved_label(self) -> str:
        """The threshold in words: one number, or each run's when they differ."""
        values = sorted(set(self.solved.values()))
        if len(values) == 1:
            return f"{values[0]:g}"
        return ", ".join(f"{value:g} (run {pk})" for pk, value in self.solved.items())

    def of_category(self, category: str | None) -> list[Row]:
        return self.rows if not category else [r for r in self.rows if r.category == category]


# --- query parameters (the page and the API) ------------------------------------------------------

# A side as the query names it: run ids separated by commas (spaces around them allowed), at most
# MAX_RUNS_PER_SIDE, each of at most 18 digits (below INT_PARAM_MAX). The API's schema states the same
# pattern (webapp/api/examples_views.py), so what it calls valid is exactly what is accepted.
SIDE_PATTERN = rf"^ *[0-9]{{1,18}} *(, *[0-9]{{1,18}} *){{0,{MAX_RUNS_PER_SIDE - 1}}}$"
_SIDE = re.compile(SIDE_PATTERN)


def parse_side(raw: str | None, name: str) -> list[int]:
    """The run ids of `a=5` or `a=5,7,9` (a seed group), in order, each once; BadParam says what is wrong."""
    if raw is None or not raw.strip(" "):
        raise BadParam(f"'{name}' names no run: give a run id, or several comma-separated for a seed group "
                       f"({name}=5 or {name}=5,7,9).")
    if not _SIDE.search(raw):  # search, as a schema's validator reads a pattern ('$' allows a final newline)
        raise BadParam(f"'{name}' takes up to {MAX_RUNS_PER_SIDE} run ids separated by commas ({name}=5,7,9), "
                       f"not {raw[:60]!r}.")
    return list(dict.fromkeys(int(part) for part in raw.split(",")))


def parse_kind(raw: str | None) -> str | None:
    if not raw:
        return None
    if raw not in CATEGORIES:
        raise BadParam(f"'kind' must be one of {', '.join(CATEGORIES)}, not {raw[:40]!r}.")
    return raw


# --- the table -------------------------------------------------------------------------------------

def _check(a: Sequence[Run], b: Sequence[Run]) -> None:
    if not a or not b:
        raise ExamplesRefused("Both sides need at least one run: a=<run id>[,<id>...]&b=<run id>[,<id>...].")
    for name, side in (("A", a), ("B", b)):
        if len(side) > MAX_RUNS_PER_SIDE:
            raise ExamplesRefused(f"Side {name} has {len(side)} runs; at most {MAX_RUNS_PER_SIDE} per side.")
    same_task([*a, *b])


def _stale_ranges(ids: list[int]) -> list[tuple[int, int, int, int]]:
    """(run, attempt, first step, last step) of the step ranges a later attempt re-did (a resume re-does
    the steps after its checkpoint: a range or two per resume, whatever the run's length)."""
    with connection.cursor() as cursor:
        cursor.execute(STALE_SQL.format(runs=", ".join("%s" for _ in ids)), ids)
        ranges: list[list[int]] = []
        for run_id, attempt, step in cursor.fetchall():
            last = ranges[-1] if ranges else None
            if last is not None and last[:2] == [run_id, attempt] and last[3] == step - 1:
                last[3] = step
            else:
                ranges.append([run_id, attempt, step, step])
    return [tuple(r) for r in ranges]


def per_run_rows(runs: Sequence[Run], solved: dict[int, float]) -> list[tuple]:
    """The SQL aggregate: (run_id, example_id, visits, early, late, early_mean, late_mean,
    first_right, right_at_end, first_step, last_step) per run and example. Two queries: the steps
    re-done by a later attempt (their older rollouts are left out, as the inspectors show the newest
    attempt of a step), then the aggregate."""
    ids = [r.pk for r in runs]
    stale = _stale_ranges(ids)
    stale_sql = "".join(" AND NOT (r.run_id = %s AND r.attempt = %s AND r.step BETWEEN %s AND %s)" for _ in stale)
    cases = " ".join("WHEN %s THEN %s" for _ in ids)
    # Placeholders are filled in text order: the IN list and the stale ranges (in `visits`), then the CASE.
    params = [*ids, *(v for r in stale for v in r), *(v for pk in ids for v in (pk, float(solved[pk])))]
    sql = PER_RUN_SQL.format(runs=", ".join("%s" for _ in ids), stale=stale_sql, solved=cases)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _side(found: list[tuple]) -> Side | None:
    if not found:
        return None

    def mean(values):
        kept = [float(v) for v in values if v is not None]
        return sum(kept) / len(kept) if kept else None

    firsts = [f for f in (row[7] for row in found) if f is not None]
    return Side(runs=len(found), visits=sum(int(row[2]) for row in found),
                early=mean(row[3] for row in found) or 0.0, late=mean(row[4] for row in found) or 0.0,
                early_mean=mean(row[5] for row in found), late_mean=mean(row[6] for row in found),
                first_right=min(firsts) if firsts else None,
                right_at_end=mean(row[8] for row in found) or 0.0,
                first_step=min(int(row[9]) for row in found), last_step=max(int(row[10]) for row in found))


def category(a: Side | None, b: Side | None) -> str:
    """The example's category (see the module docstring)."""
    if a is None:
        return "only_b"
    if b is None:
        return "only_a"
    if a.solved_late and b.solved_late:
        return "solved_both"
    if a.solved_late:
        return "lost_b" if b.lost else "learned_a"
    if b.solved_late:
        return "lost_a" if a.lost else "learned_b"
    if a.lost and b.lost:
        return "lost_a" if -a.gain >= -b.gain else "lost_b"
    if a.lost:
        return "lost_a"
    if b.lost:
        return "lost_b"
    return "unsolved_both"


def _rank_key(row: Row):
    compared = row.a is not None and row.b is not None
    return (not compared, -(row.late_gap or 0.0), -(row.gain_gap or 0.0), -(row.mean_gap or 0.0), row.example_id)


def _overlap_notes(a: Sequence[Run], b: Sequence[Run]) -> list[str]:
    """A run on both sides is no error (the table stays true), but the page says what it means."""
    a_ids, b_ids = [r.pk for r in a], [r.pk for r in b]
    if set(a_ids) == set(b_ids):
        return ["Both sides are the same runs: every example reads the same on both, and nothing parts. Choose "
                "other runs for one side; to see a run against itself at two checkpoints, open one example "
                "across runs."]
    both = [pk for pk in a_ids if pk in b_ids]
    if both:
        return [f"Run{'s' if len(both) > 1 else ''} {', '.join(map(str, both))} "
                f"{'are' if len(both) > 1 else 'is'} on both sides: counted in each side's average."]
    return []


def _notes(runs: Sequence[Run], seen: set[int]) -> list[str]:
    """What the table cannot count: runs with no rollouts, steps whose rollouts retention dropped."""
    notes = []
    for run in runs:
        if run.pk not in seen:
            notes.append(f"Run {run.pk} ({run.name or run.task.name}) has no rollouts stored"
                         f"{' yet' if run.current_step == 0 else ''}: it counts on no example.")
            continue
        retention = Retention.of(run)
        last_dropped = run.current_step - retention.last_steps
        if retention.active and last_dropped >= 1:
            every = f", except every {retention.every}th," if retention.every else ""
            notes.append(f"Run {run.pk} {retention.describe()}: steps 1–{last_dropped}{every} have no rollouts, so "
                         "its early visits are the earliest steps it kept (step metrics, not counted here, "
                         "keep every step).")
    return notes


def partways(a: Sequence[Run], b: Sequence[Run], *, solved: float | None = None) -> Partways:
    """Every example of side `a` and side `b` (runs the caller may read), ranked; ExamplesRefused when
    they cannot be compared (no run on a side, different tasks, too many runs). A run on both sides is
    read once and counted on each, with a note (the same runs on both sides: nothing parts)."""
    a, b = list(a), list(b)
    _check(a, b)
    if solved is not None and not math.isfinite(solved):
        raise ExamplesRefused("'solved' must be a finite number.")
    thresholds = {run.pk: solved if solved is not None else solved_threshold(run) for run in [*a, *b]}
    by_example: dict[str, tuple[list, list]] = {}
    a_ids, b_ids = {r.pk for r in a}, {r.pk for r in b}
    seen = set()
    everyone = list({r.pk: r for r in [*a, *b]}.values())  # a run on both sides is read once
    for row in per_run_rows(everyone, thresholds):
        seen.add(row[0])
        sides = by_example.setdefault(row[1], ([], []))
        if row[0] in a_ids:
            sides[0].append(row)
        if row[0] in b_ids:
            sides[1].append(row)
    rows = []
    for example_id, (found_a, found_b) in by_example.items():
        side_a, side_b = _side(found_a), _side(found_b)
        rows.append(Row(example_id, category(side_a, side_b), side_a, side_b))
    rows.sort(key=_rank_key)
    counts = dict.fromkeys(CATEGORIES, 0)
    for row in rows:
        counts[row.category] += 1
    return Partways(a, b, thresholds, rows, counts, _overlap_notes(a, b) + _notes(everyone, seen))


def row_dict(row: Row) -> dict:
    """One row as the API and the client show it: a flat dict, `a_*` and `b_*` per side."""
    out = {"example_id": row.example_id, "category": row.category, "late_gap": row.late_gap,
           "gain_gap": row.gain_gap}
    for name, side in (("a", row.a), ("b", row.b)):
        values = {"runs": 0, "visits": 0, "early": None, "late": None, "gain": None, "early_mean": None,
                  "late_mean": None, "first_right": None, "right_at_end": None, "first_step": None,
                  "last_step": None}
        if side is not None:
            values.update(runs=side.runs, visits=side.visits, early=side.early, late=side.late, gain=side.gain,
                          early_mean=side.early_mean, late_mean=side.late_mean, first_right=side.first_right,
                          right_at_end=side.right_at_end, first_step=side.first_step, last_step=side.last_step)
        out.update({f"{name}_{key}": value for key, value in values.items()})
    return out
