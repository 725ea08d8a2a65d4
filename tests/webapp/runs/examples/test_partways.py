"""The part-ways selector on seeded runs (two estimators, three seeds each, real ingest) whose learned
examples the test knows (tests/webapp/runs/examples/partways_world.py)."""

import pytest

from tests.webapp.runs.examples.partways_world import (
    EXPECTED_CATEGORY,
    EXPECTED_ORDER,
    PLAN,
    seeded_run,
    step_event,
    world,
)
from tests.webapp.runs.factories import make_program
from tests.webapp.runs.seeding import ingest, make_run
from webapp.runs.examples.common import ExamplesRefused
from webapp.runs.examples.partways import CATEGORIES, partways, row_dict
from webapp.runs.models import Run, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def sides(owner):
    return world(owner)


def test_the_examples_gdpo_learned_rank_first_and_the_counts_are_right(sides, django_assert_num_queries):
    gdpo, grpo = sides
    with django_assert_num_queries(2):  # every run of both sides: the re-done steps, one aggregate
        found = partways(gdpo, grpo)
    assert [r.example_id for r in found.rows] == EXPECTED_ORDER
    assert {r.example_id: r.category for r in found.rows} == EXPECTED_CATEGORY
    assert found.counts == {"learned_a": 4, "learned_b": 1, "lost_a": 0, "lost_b": 1, "solved_both": 1,
                            "unsolved_both": 1, "only_a": 1, "only_b": 0}
    assert list(found.counts) == list(CATEGORIES)
    assert found.solved == {r.pk: 1.0 for r in [*gdpo, *grpo]}  # the sum of the rewards' weights
    assert found.notes == []


def test_each_side_averages_its_seeds(sides):
    gdpo, grpo = sides
    rows = {r.example_id: r for r in partways(gdpo, grpo).rows}
    e1, e8, e4, e6 = rows["e1"], rows["e8"], rows["e4"], rows["e6"]
    # 12 visits: early = steps 1-4, late = steps 9-12.
    assert (e1.a.runs, e1.a.visits, e1.a.early, e1.a.late, e1.a.first_right, e1.a.right_at_end) == (3, 36, 0.0, 1.0, 7, 1.0)
    assert (e1.b.early, e1.b.late, e1.b.first_right, e1.b.right_at_end) == (0.0, 0.0, None, 0.0)
    assert e1.a.early_mean == pytest.approx(0.125) and e1.a.late_mean == pytest.approx(0.5)
    assert e8.a.late == pytest.approx(2 / 3) and e8.b.late == pytest.approx(1 / 3)
    assert e8.a.right_at_end == pytest.approx(2 / 3) and e8.a.first_right == 7
    assert e8.late_gap == pytest.approx(1 / 3)
    assert e4.b.late == 0.75 and e4.b.right_at_end == 0.0  # right at 9-11, wrong again at 12
    assert e6.b.early == 1.0 and e6.b.late == 0.0 and e6.b.gain == -1.0 and e6.gain_gap == 1.0
    assert rows["e9"].b is None and (rows["e9"].a.first_step, rows["e9"].a.last_step) == (1, 12)


def test_swapping_the_sides_swaps_the_categories(sides):
    gdpo, grpo = sides
    swapped = {r.example_id: r.category for r in partways(grpo, gdpo).rows}
    assert swapped["e1"] == "learned_b" and swapped["e4"] == "learned_a" and swapped["e6"] == "lost_a"
    assert swapped["e9"] == "only_b"


def test_one_run_a_side(sides):
    gdpo, grpo = sides
    rows = {r.example_id: r for r in partways([gdpo[2]], [grpo[0]]).rows}
    assert rows["e8"].category == "learned_b"  # GDPO seed 2 never learned e8, GRPO seed 0 did
    assert rows["e8"].a.late == 0.0 and rows["e8"].b.late == 1.0


def test_the_newest_attempt_of_a_step_wins(owner, sides):
    gdpo, grpo = sides
    # GDPO seed 0 resumed at step 10: its attempt 2 got everything wrong at steps 10-12, and did not
    # draw e5 there: attempt 1's visits of e5 at those steps are gone with the rest of the old steps.
    plan = {example: plans[0][0] for example, plans in PLAN.items() if example != "e5"}
    ingest(gdpo[0], [step_event(s, plan, estimator="gdpo", attempt=2, wrong_all=True) for s in range(10, 13)])
    rows = {r.example_id: r for r in partways([gdpo[0]], [grpo[0]]).rows}
    assert rows["e1"].a.visits == 12 and rows["e1"].a.late == 0.25  # step 9 right, 10-12 wrong
    assert rows["e1"].a.right_at_end == 0.0 and rows["e1"].category == "unsolved_both"
    assert (rows["e5"].a.visits, rows["e5"].a.last_step, rows["e5"].a.late) == (9, 9, 1.0)
    assert rows["e5"].category == "solved_both"


def test_solved_overrides_the_threshold(sides):
    gdpo, grpo = sides
    found = partways(gdpo, grpo, solved=0.5)  # a wrong visit's best (0.5) is now right
    assert set(found.solved.values()) == {0.5}
    assert found.counts["solved_both"] == 8 and found.counts["only_a"] == 1


def test_refusals(owner, sides):
    gdpo, grpo = sides
    with pytest.raises(ExamplesRefused, match="at least one run"):
        partways([], grpo)
    other_task = Task.objects.create(name="other-task", title="Other", program=make_program())
    elsewhere = make_run(owner, name="elsewhere")
    elsewhere.task = other_task
    elsewhere.save(update_fields=["task"])
    with pytest.raises(ExamplesRefused, match="different tasks"):
        partways(gdpo, [elsewhere])
    with pytest.raises(ExamplesRefused, match="finite"):
        partways(gdpo, grpo, solved=float("nan"))


def test_a_run_without_rollouts_and_one_whose_retention_dropped_steps_are_named(owner, sides):
    gdpo, _ = sides
    empty = make_run(owner, state=Run.State.QUEUED, name="not started")
    found = partways(gdpo, [empty])
    assert found.notes == [f"Run {empty.pk} (not started) has no rollouts stored yet: it counts on no example."]
    assert {r.category for r in found.rows} == {"only_a"}

    kept = seeded_run(owner, "grpo", 0, config={"keep_rollouts_last_steps": 4})
    found = partways(gdpo, [kept])
    assert len(found.notes) == 1 and f"Run {kept.pk} keeps the rollouts of the newest 4 steps" in found.notes[0]
    assert "steps 1–8" in found.notes[0]
    rows = {r.example_id: r for r in found.rows}
    # Only steps 9-12 survive: its early third is steps 9-10 ... the rewards of what survived still count.
    assert rows["e4"].b.visits == 4 and rows["e4"].b.first_step == 9 and rows["e4"].b.first_right == 9


def test_a_run_on_both_sides_is_counted_on_each_with_a_note(sides):
    gdpo, grpo = sides
    same = partways([gdpo[0]], [gdpo[0]])
    assert same.notes[0].startswith("Both sides are the same runs: every example reads the same on both")
    assert {r.late_gap for r in same.rows} == {0.0} and same.counts["learned_a"] == same.counts["learned_b"] == 0
    overlap = partways([gdpo[0], grpo[0]], [grpo[0], grpo[1]])
    assert overlap.notes == [f"Run {grpo[0].pk} is on both sides: counted in each side's average."]
    e1 = next(r for r in overlap.rows if r.example_id == "e1")
    assert (e1.a.runs, e1.a.late, e1.b.runs, e1.b.late) == (2, 0.5, 2, 0.0)


def test_row_dict_is_flat(sides):
    gdpo, grpo = sides
    row = row_dict(partways(gdpo, grpo).rows[0])
    assert row["example_id"] == "e1" and row["category"] == "learned_a"
    assert row["a_late"] == 1.0 and row["b_late"] == 0.0 and row["a_runs"] == 3 and row["late_gap"] == 1.0
    only = row_dict(partways(gdpo, grpo).rows[-1])
    assert only["b_runs"] == 0 and only["b_late"] is None
