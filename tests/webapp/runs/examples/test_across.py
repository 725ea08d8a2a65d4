"""The across-runs selector: one example's best answers per visit and module in several columns,
their word-level diffs down a column and against the first column, the first right step, alignment
by step and by fraction, step windows, retention, absences, and a query count that does not grow
with the visits."""

import pytest
from django.http import Http404

from tests.webapp.runs.examples.across_world import A_VISITS, B_VISITS, answers_event, run_with, visit
from tests.webapp.runs.factories import make_program
from tests.webapp.runs.seeding import ingest
from webapp.runs.examples import across
from webapp.runs.examples.across import Window, example_across, parse_columns, runs_for_example
from webapp.runs.examples.common import ExamplesRefused, parse_solved
from webapp.runs.examples.diffs import changed_words
from webapp.runs.models import ModuleCall, Run, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(owner):
    return run_with(owner, A_VISITS, name="gdpo"), run_with(owner, B_VISITS, name="grpo")


def columns_of(*runs):
    return [Window(r.pk) for r in runs]


def line(cell, module):
    return next(x for x in cell.lines if x.key == (module, 0))


def test_each_cell_is_the_best_rollouts_answer_per_module_with_its_reward_and_spread(runs):
    a, b = runs
    # The ingest keeps these texts in CallText rows, not in the calls: the selector reads them there.
    assert ModuleCall.objects.filter(rollout__run=a, completion__isnull=True).exists()
    found = example_across([a, b], columns_of(a, b), "q1")
    assert [c.label for c in found.columns] == ["gdpo", "grpo"]
    assert [row.label for row in found.rows] == ["1", "2", "3", "4"]
    first = found.rows[0].cells[0]
    assert (first.step, first.best_index, first.best_reward) == (1, 0, 0.5)
    assert [(x.label, x.text) for x in first.lines] == [("reason", "add two and two"), ("answer", "The answer is 3")]
    assert (first.low, first.high, first.rollouts, first.failures) == (0.0, 0.5, 2, 0)
    assert first.std == pytest.approx(0.25)
    assert [c.step for c in found.rows[2].cells] == [3, 3]


def test_diffs_mark_exactly_the_changed_words(runs):
    a, b = runs
    found = example_across([a, b], columns_of(a, b), "q1")
    col_a, col_b = found.columns
    # Down a column: each visit against the same run's previous one.
    assert line(col_a.cells[0], "answer").against_previous is None  # nothing before the first visit
    assert changed_words(line(col_a.cells[1], "answer").against_previous) == (["4"], ["3"])
    assert changed_words(line(col_a.cells[1], "reason").against_previous) == (["carefully"], [])
    assert changed_words(line(col_a.cells[2], "answer").against_previous) == (["indeed"], [])
    assert changed_words(line(col_a.cells[3], "answer").against_previous) == ([], [])
    assert changed_words(line(col_b.cells[2], "reason").against_previous) == (["add", "and"], ["plus"])
    # Across a row: each cell against the first column's.
    assert line(col_a.cells[0], "answer").against_first is None  # the first column itself
    assert changed_words(line(col_b.cells[0], "answer").against_first) == (["5"], ["3"])
    assert changed_words(line(col_b.cells[2], "answer").against_first) == ([], ["indeed"])
    assert changed_words(line(col_b.cells[3], "reason").against_first) == ([], ["carefully"])
    html = str(line(col_a.cells[1], "answer").previous_html)
    assert html == "The answer is <del>3</del> <ins>4</ins>"


def test_first_right_step_per_column_and_the_solved_override(runs):
    a, b = runs
    found = example_across([a, b], columns_of(a, b), "q1")
    assert [c.threshold for c in found.columns] == [1.0, 1.0]  # the weight of `correct`
    assert [c.first_right for c in found.columns] == [2, 3]
    assert [[c.first_right for c in col.cells] for col in found.columns] == [[False, True, False, False],
                                                                           [False, False, True, False]]
    assert [[c.right for c in col.cells] for col in found.columns] == [[False, True, True, True],
                                                                     [False, False, True, True]]
    lower = example_across([a, b], columns_of(a, b), "q1", solved=0.25)
    assert [c.first_right for c in lower.columns] == [1, 1]
    assert example_across([a, b], columns_of(a, b), "q1", solved=2).columns[0].first_right is None


def test_alignment_by_fraction_of_each_runs_steps(owner):
    short = run_with(owner, {2: {"q1": visit(("a", "x", 0.1))}, 4: {"q1": visit(("a", "y", 1.0))}}, total_steps=4)
    long = run_with(owner, {4: {"q1": visit(("a", "x", 0.1))}, 8: {"q1": visit(("a", "z", 0.1))}}, total_steps=8)
    by_step = example_across([short, long], columns_of(short, long), "q1")
    assert [r.label for r in by_step.rows] == ["2", "4", "8"]
    found = example_across([short, long], columns_of(short, long), "q1", align="fraction")
    assert [r.label for r in found.rows] == ["50%", "100%"]
    assert [[c.step for c in r.cells] for r in found.rows] == [[2, 4], [4, 8]]
    assert changed_words(line(found.rows[1].cells[1], "answer").against_first) == (["z"], ["y"])


def test_a_run_against_itself_in_two_windows(owner):
    run = run_with(owner, {s: {"q1": visit(("think", f"answer {s}", 1.0 if s >= 12 else 0.0))} for s in range(1, 15)},
                   total_steps=14)
    windows = parse_columns([f"{run.pk}:1-4,{run.pk}:11-14"])
    found = example_across([run, run], windows, "q1")
    assert [c.label for c in found.columns] == [f"{run} · steps 1–4", f"{run} · steps 11–14"]
    # Rows align by the step from each window's start.
    assert [r.label for r in found.rows] == ["+0", "+1", "+2", "+3"]
    assert [[c.step for c in r.cells] for r in found.rows] == [[1, 11], [2, 12], [3, 13], [4, 14]]
    assert [c.first_right for c in found.columns] == [None, 12]
    assert changed_words(line(found.rows[0].cells[1], "answer").against_first) == (["11"], ["1"])
    fraction = example_across([run, run], windows, "q1", align="fraction")
    assert [r.label for r in fraction.rows] == ["0%", "33%", "67%", "100%"]


def test_an_example_absent_from_one_column_and_from_all(runs, owner):
    a, b = runs
    found = example_across([a, b], columns_of(a, b), "q2")
    assert found.columns[1].absent == f"Run {b.pk} never drew this example."
    assert [[c and c.step for c in r.cells] for r in found.rows] == [[1, None], [3, None]]
    window = example_across([a, a], [Window(a.pk, 2, 2), Window(a.pk)], "q2")
    assert window.columns[0].absent == f"Run {a.pk} never drew this example in steps 2–2."
    with pytest.raises(Http404, match="No column drew example 'nobody'"):
        example_across([a, b], columns_of(a, b), "nobody")


def test_runs_of_different_tasks_are_refused(runs, owner):
    a, _ = runs
    other = Task.objects.create(name="other-task", title="Other", program=make_program())
    b = run_with(owner, B_VISITS)
    Run.objects.filter(pk=b.pk).update(task=other)
    b.refresh_from_db()
    with pytest.raises(ExamplesRefused, match="different tasks"):
        example_across([a, b], columns_of(a, b), "q1")


def test_retention_says_which_steps_have_no_texts(owner):
    run = run_with(owner, {s: {"q1": visit(("t", f"a{s}", 0.0))} for s in range(1, 9)},
                   config={"keep_rollouts_last_steps": 3})
    other = run_with(owner, A_VISITS)
    found = example_across([run, other], columns_of(run, other), "q1")
    assert [c.step for c in found.columns[0].cells] == [6, 7, 8]
    assert found.columns[0].retention == (f"Run {run.pk} keeps only the newest 3 steps' rollouts: "
                                          "steps before 6 have no texts.")
    assert found.columns[1].retention == ""
    assert example_across([run, other], [Window(run.pk, 6, None), Window(other.pk)], "q1").columns[0].retention == ""


def test_the_newest_attempt_of_a_step(owner, runs):
    a, b = runs
    ingest(a, [answers_event(4, {"q1": visit(("resumed", "The answer is 4", 1.0))}, attempt=2)])
    cell = example_across([a, b], columns_of(a, b), "q1").columns[0].cells[-1]
    assert (cell.step, cell.attempt, line(cell, "reason").text) == (4, 2, "resumed")


def test_visits_are_capped_newest_first_with_the_windows_of_older_ones(runs, monkeypatch):
    a, b = runs
    found = example_across([a, b], columns_of(a, b), "q1", limit=3)
    assert [c.step for c in found.columns[0].cells] == [2, 3, 4] and found.capped
    assert [str(w) for w in found.older_columns()] == [f"{a.pk}:-1", f"{b.pk}:-1"]
    older = example_across([a, b], found.older_columns(), "q1", limit=3)
    assert [c.step for c in older.columns[0].cells] == [1] and not older.capped


def test_external_runs_of_the_same_task(owner, runs):
    """A run trained elsewhere (TRL), logged through the API's own ingest onto the same task: one call
    per rollout (module "completion"), its reward the components' sum."""
    from webapp.runs.ingest.external import DEFAULT_MODULE, external_run_start, external_steps_log

    a, _ = runs
    external, _ = external_run_start(owner, client_id="trl-1", task=a.task.name, origin="trl")
    external_steps_log(external, [{"step": step, "rollouts": [
        {"prompt": "Q q1", "completion": answer, "rewards": {"correct": reward}, "example_id": "q1", "group": "q1"},
        {"prompt": "Q q1", "completion": "no idea", "rewards": {"correct": 0.0}, "example_id": "q1", "group": "q1"}]}
        for step, answer, reward in ((1, "It is 5", 0.0), (2, "It is 4", 1.0))])
    assert external.is_external and external.task_id == a.task_id
    found = example_across([a, external], columns_of(a, external), "q1")
    column = found.columns[1]
    assert column.threshold == 1.0 and column.first_right == 2
    assert [[(x.label, x.text) for x in c.lines] for c in column.cells] == [[(DEFAULT_MODULE, "It is 5")],
                                                                          [(DEFAULT_MODULE, "It is 4")]]
    assert changed_words(column.cells[1].lines[0].against_previous) == (["4"], ["5"])


def test_runs_offered_by_the_history_form(owner, runs, stranger):
    a, b = runs
    never = run_with(owner, {1: {"q9": visit(("x", "y", 0.0))}})
    strangers = run_with(stranger, B_VISITS)
    readable = Run.objects.filter(owner=owner)
    assert runs_for_example(readable, a, "q1") == [b]
    assert never not in runs_for_example(Run.objects.all(), a, "q1")
    assert strangers in runs_for_example(Run.objects.all(), a, "q1")


@pytest.mark.parametrize("raw, message", [
    (["5"], "2 to 8 columns"),
    ([",".join(str(i) for i in range(1, 10))], "2 to 8 columns"),
    (["5,x"], "run ids"),
    (["5:a-b,6"], "run ids"),
    (["5:9-3,6"], "after its last step"),
    (["5,5"], "twice"),
    (["5," + "9" * 19], "at most"),
])
def test_malformed_columns_are_refused_with_a_message(raw, message):
    with pytest.raises(across.BadParam, match=message):
        parse_columns(raw)


def test_columns_from_a_form_and_from_a_list():
    assert parse_columns(["5", "7:3-"]) == [Window(5), Window(7, 3, None)]
    assert parse_columns(["5, 7:-9"]) == [Window(5), Window(7, None, 9)]
    assert str(Window(7, 3, None)) == "7:3-" and str(Window(7, 2, 9)) == "7:2-9"


@pytest.mark.parametrize("parse, raw, message", [
    (across.parse_align, "epoch", "'align' must be one of step, fraction"),
    (parse_solved, "lots", "'solved' must be a number"),
    (parse_solved, "nan", "must be a number"),
    (parse_solved, "1e999", "finite"),
    (across.parse_example, "", "'example' is required"),
    (across.parse_example, "x" * 201, "at most 200"),
])
def test_malformed_align_solved_example(parse, raw, message):
    with pytest.raises(across.BadParam, match=message):
        parse(raw)


def test_query_count_does_not_grow_with_the_visits(owner, django_assert_max_num_queries):
    def pair(steps, rollouts):
        runs = [run_with(owner, {s: {"q1": [(f"r{s} {i}", f"a {s} {i}", (s * i) % 3 / 2) for i in range(rollouts)],
                                     "q2": visit(("x", "y", 0.0))} for s in range(1, steps + 1)}) for _ in range(2)]
        return runs, columns_of(*runs)

    small, large = pair(2, 2), pair(30, 6)
    with django_assert_max_num_queries(10) as small_queries:
        example_across(*small, "q1")
    with django_assert_max_num_queries(len(small_queries.captured_queries)):
        found = example_across(*large, "q1")
    assert len(found.rows) == 30 and all(len(c.cells) == 30 for c in found.columns)
