"""Read side of "one example across runs" (issue 57, item 1): the answers one training example got
in several runs of one task (or one run in several step windows), one column per run or window,
one row per step that drew it, aligned by step or by fraction of training.

Each cell is a visit (a step that drew the example, its newest attempt, as the inspectors show it):
its best rollout's answer per module call (that rollout's completion of each call, in call order),
its total reward, and the spread of the visit's rollout rewards (min-max and std). Each answer is
diffed word by word (webapp/runs/examples/diffs.py) against the same call of the column's previous
visit and against the first column's answer in the same row. A column's *first right* step is its
first visit whose best reward reaches the solved threshold (webapp/runs/examples/common.py).

Five queries per column whatever the number of visits, rollouts and calls (tests assert it at two
sizes): the visits, their rollouts' rewards, the best rollouts' calls, the texts of those calls kept
in CallText rows (webapp/runs/ingest/texts.py, decoded by its `decode_texts`), and the first right step. At most `VISITS_CAP`
visits per column, the newest; `older_columns` gives the windows of the next page of older ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import pstdev

from django.db.models import Count, Exists, Min, OuterRef, Q, QuerySet
from django.http import Http404

from webapp.runs.examples.common import same_task, solved_threshold
from webapp.runs.examples.diffs import Piece, diff_html, word_diff
from webapp.runs.ingest.retention import Retention
from webapp.runs.ingest.texts import texts_by_key
from webapp.runs.inspector.history import newest_attempt
from webapp.runs.models import ModuleCall, Rollout, Run
from webapp.runs.params import INT_PARAM_MAX, BadParam

VISITS_CAP = 200  # per column: two columns of 200 visits answer in about 0.3 s (a page of about 0.5 MB)
MIN_COLUMNS, MAX_COLUMNS = 2, 8
ALIGNS = ("step", "fraction")
FRACTION_BINS = 100  # align=fraction: rows are percents of training
EXAMPLE_ID_MAX = 200  # Rollout.example_id's max_length
CANDIDATES_LIMIT = 50  # runs offered by the example history's form
COLUMN = re.compile(r"(\d{1,19})(?::(\d{0,19})-(\d{0,19}))?")


@dataclass(frozen=True)
class Window:
    """A column as the query names it: a run, optionally restricted to steps [start, end]."""

    run_id: int
    start: int | None = None
    end: int | None = None

    def __str__(self) -> str:
        if self.start is None and self.end is None:
            return str(self.run_id)
        return f"{self.run_id}:{'' if self.start is None else self.start}-{'' if self.end is None else self.end}"

    @property
    def windowed(self) -> bool:
        return self.start is not None or self.end is not None


def parse_columns(values: Sequence[str]) -> list[Window]:
    """The columns of `runs=5,7` (or `runs=5&runs=7`, what a form's checkboxes send), each
    `<id>` or `<id>:<from>-<to>` (either bound may be empty); BadParam says what is wrong."""
    parts = [p.strip() for value in values for p in value.split(",") if p.strip()]
    windows = []
    for part in parts:
        match = COLUMN.fullmatch(part)
        if match is None:
            raise BadParam(f"'runs' takes run ids, each optionally with a step window (5 or 5:0-100), not {part[:40]!r}.")
        run_id, start, end = (int(g) if g else None for g in match.groups())
        if any(v is not None and v > INT_PARAM_MAX for v in (run_id, start, end)):
            raise BadParam(f"{part!r}: a run id or step is at most {INT_PARAM_MAX}.")
        if start is not None and end is not None and start > end:
            raise BadParam(f"{part!r}: the window's first step {start} is after its last step {end}.")
        windows.append(Window(run_id, start, end))
    if not MIN_COLUMNS <= len(windows) <= MAX_COLUMNS:
        raise BadParam(f"'runs' names {MIN_COLUMNS} to {MAX_COLUMNS} columns (runs or run windows), not {len(windows)}.")
    if len(set(windows)) != len(windows):
        twice = next(str(w) for w in windows if windows.count(w) > 1)
        raise BadParam(f"'runs' names column {twice} twice.")
    return windows


def parse_align(raw: str | None) -> str:
    align = raw or "step"
    if align not in ALIGNS:
        raise BadParam(f"'align' must be one of {', '.join(ALIGNS)}, not {align[:40]!r}.")
    return align


def parse_example(raw: str | None) -> str:
    if raw is None or raw == "":
        raise BadParam("'example' is required: the id of the example to show across runs.")
    if len(raw) > EXAMPLE_ID_MAX:
        raise BadParam(f"An example id has at most {EXAMPLE_ID_MAX} characters.")
    return raw


# --- what the page shows ------------------------------------------------------------------------------

@dataclass
class Line:
    """One module call of a visit's best rollout: its answer and its diffs (None: nothing to diff with)."""

    key: tuple[str, int]  # (module, invocation index)
    text: str
    against_previous: list[Piece] | None = None  # the column's previous visit, same call
    against_first: list[Piece] | None = None  # the first column's cell in the same row, same call

    @property
    def label(self) -> str:
        module, invocation = self.key
        return module if invocation == 0 else f"{module} #{invocation + 1}"

    @property
    def previous_html(self):
        return diff_html(self.against_previous) if self.against_previous is not None else None

    @property
    def first_html(self):
        return diff_html(self.against_first) if self.against_first is not None else None

    @property
    def changed_from_first(self) -> bool:
        return self.against_first is not None and any(p.op != "same" for p in self.against_first)


@dataclass
class Cell:
    """A visit of the example in one column."""

    step: int
    attempt: int
    rollouts: int
    failures: int
    rewards: list[float] = field(default_factory=list)
    best_index: int | None = None
    best_reward: float | None = None
    lines: list[Line] = field(default_factory=list)
    right: bool = False
    first_right: bool = False
    key: float = 0.0  # where the row aligns (a step from the window's start, or a percent of training)
    url: str = ""  # the trajectory inspector of this visit (the view sets it)

    @property
    def low(self) -> float | None:
        return min(self.rewards) if self.rewards else None

    @property
    def high(self) -> float | None:
        return max(self.rewards) if self.rewards else None

    @property
    def std(self) -> float | None:
        return pstdev(self.rewards) if len(self.rewards) > 1 else (0.0 if self.rewards else None)


@dataclass
class Column:
    run: Run
    window: Window
    threshold: float
    cells: list[Cell]  # oldest visit first
    first_right: int | None  # the first step (in the window) whose best reward reached the threshold
    capped: bool  # older visits exist than the page shows
    retention: str  # "" or why some steps have no rollouts
    absent: str  # "" or that the run never drew the example (in the window)
    history_url: str = ""  # the run's history of this example (the view sets it)

    @property
    def label(self) -> str:
        if not self.window.windowed:
            return str(self.run)
        start = self.window.start if self.window.start is not None else 0
        end = self.window.end if self.window.end is not None else "end"
        return f"{self.run} · steps {start}–{end}"

    @property
    def older_window(self) -> Window | None:
        """This column's window for the page of older visits (None when there are none)."""
        if not self.capped:
            return None
        return Window(self.window.run_id, self.window.start, self.cells[0].step - 1)


@dataclass
class Row:
    label: str
    cells: list[Cell | None]


@dataclass
class Across:
    example_id: str
    align: str
    solved: float | None  # the ?solved= override, if any
    columns: list[Column]
    rows: list[Row]

    @property
    def capped(self) -> bool:
        return any(c.capped for c in self.columns)

    def older_columns(self) -> list[Window]:
        """The `runs=` of the next page: capped columns end before their oldest shown visit."""
        return [c.older_window or c.window for c in self.columns]


# --- the selector ------------------------------------------------------------------------------------

def _in_window(queryset, window: Window):
    if window.start is not None:
        queryset = queryset.filter(step__gte=window.start)
    if window.end is not None:
        queryset = queryset.filter(step__lte=window.end)
    return queryset


def _retention_note(run: Run, window: Window) -> str:
    """Why steps of this window have no rollouts ("" when retention kept them all)."""
    retention = Retention.of(run)
    if not retention.active:
        return ""
    kept_from = run.current_step - retention.last_steps + 1
    if kept_from <= max(window.start or 0, 1):
        return ""
    every = f" (and every {retention.every}th step)" if retention.every else ""
    return (f"Run {run.pk} keeps only the newest {retention.last_steps} steps' rollouts{every}: "
            f"steps before {kept_from} have no texts.")


def _texts(run: Run, example_id: str, keys: set[tuple[int, int]]) -> dict[tuple[int, int], dict]:
    """The decoded CallText rows of these (attempt, step) visits of one example: one query."""
    found = texts_by_key(run.pk, {(attempt, step, example_id) for attempt, step in keys})
    return {(attempt, step): texts for (attempt, step, _), texts in found.items()}


def _column(run: Run, window: Window, example_id: str, threshold: float, limit: int) -> Column:
    rollouts = _in_window(Rollout.objects.filter(run=run, example_id=example_id, attempt=newest_attempt(run)), window)
    rows = list(rollouts.values("step", "attempt").annotate(rollouts=Count("id"), failures=Count("id", filter=Q(failed=True)))
                .order_by("-step")[:limit + 1])
    retention = _retention_note(run, window)
    if not rows:
        where = f" in steps {window.start or 0}–{'end' if window.end is None else window.end}" if window.windowed else ""
        absent = f"Run {run.pk} never drew this example{where}."
        return Column(run, window, threshold, [], None, False, retention, absent)
    capped = len(rows) > limit
    cells = [Cell(r["step"], r["attempt"], r["rollouts"], r["failures"]) for r in reversed(rows[:limit])]
    by_step = {c.step: c for c in cells}
    best: dict[int, tuple[tuple, int]] = {}  # step -> (rank, rollout id)
    # order_by(): Rollout's default ordering starts with "run", which would join the runs table to sort.
    for pk, step, index, reward in (rollouts.filter(step__gte=cells[0].step, step__lte=cells[-1].step).order_by()
                                    .values_list("pk", "step", "index", "total_reward")):
        if reward is not None:
            by_step[step].rewards.append(reward)
        # The best rollout: the highest total reward, the lowest index among equals; unrewarded ones last.
        rank = (reward is not None, reward if reward is not None else 0.0, -index)
        if step not in best or rank > best[step][0]:
            best[step] = (rank, pk)
    step_of = {}
    for step, ((rewarded, reward, index), pk) in best.items():
        by_step[step].best_reward, by_step[step].best_index = (reward if rewarded else None), -index
        step_of[pk] = step
    calls = list(ModuleCall.objects.filter(rollout_id__in=step_of).order_by("rollout_id", "position")
                 .values_list("rollout_id", "position", "module", "invocation_index", "completion"))
    missing = {(by_step[step_of[c[0]]].attempt, step_of[c[0]]) for c in calls if c[4] is None}
    texts = _texts(run, example_id, missing)
    for rollout_id, position, module, invocation, completion in calls:
        cell = by_step[step_of[rollout_id]]
        if completion is None:
            completion = texts.get((cell.attempt, cell.step), {}).get((cell.best_index, position), ("", None, ""))[2]
        cell.lines.append(Line((module, invocation), completion or ""))
    first = (rollouts.filter(total_reward__gte=threshold).aggregate(first=Min("step"))["first"])
    for cell in cells:
        cell.right = cell.best_reward is not None and cell.best_reward >= threshold
        cell.first_right = cell.step == first
    return Column(run, window, threshold, cells, first, capped, retention, "")


def _diff_down_the_column(column: Column) -> None:
    previous: dict[tuple[str, int], str] | None = None
    for cell in column.cells:
        if previous is not None:
            for line in cell.lines:
                if line.key in previous:
                    line.against_previous = word_diff(previous[line.key], line.text)
        previous = {line.key: line.text for line in cell.lines}


def _total_steps(run: Run, window: Window, cells: list[Cell]) -> tuple[int, int]:
    """(first, last) step of the span a fraction is taken of: the window, or the run's planned steps
    (its newest stored step, or its newest visit, for a run that planned none)."""
    start = window.start or 0
    end = window.end if window.end is not None else (run.total_steps or run.current_step
                                                     or (cells[-1].step if cells else 0))
    return start, max(end, start + 1)


def _align(columns: list[Column], align: str) -> list[Row]:
    """Rows of cells at one alignment key: the step from the window's start (`step`), or the percent
    of the column's steps (`fraction`). A column with two visits at one key (two in one percent)
    gets a second row there."""
    slots: dict[tuple[float, int], list[Cell | None]] = {}
    for c, column in enumerate(columns):
        seen: dict[float, int] = {}
        start, end = _total_steps(column.run, column.window, column.cells)
        for cell in column.cells:
            if align == "step":
                cell.key = cell.step - start
            else:
                cell.key = round(min(max((cell.step - start) / (end - start), 0.0), 1.0) * FRACTION_BINS)
            k = seen.get(cell.key, 0)
            seen[cell.key] = k + 1
            slots.setdefault((cell.key, k), [None] * len(columns))[c] = cell
    windowed = any(col.window.start for col in columns)
    rows = []
    for (key, _), cells in sorted(slots.items()):
        if align == "fraction":
            label = f"{key:g}%"
        else:
            label = f"+{key:g}" if windowed else f"{key:g}"
        first = cells[0]
        if first is not None:
            for cell in cells[1:]:
                for line in cell.lines if cell is not None else []:
                    theirs = next((f.text for f in first.lines if f.key == line.key), None)
                    if theirs is not None:
                        line.against_first = word_diff(theirs, line.text)
        rows.append(Row(label, cells))
    return rows


def example_across(runs: Sequence[Run], windows: Sequence[Window], example_id: str, *, align: str = "step",
                   solved: float | None = None, limit: int = VISITS_CAP) -> Across:
    """The example's visits in each column (`windows[i]` of `runs[i]`, the runs already read through
    the request's access), aligned into rows. ExamplesRefused when the runs train different tasks,
    Http404 when no column ever drew the example."""
    if len(runs) != len(windows):
        raise ValueError("one run per window")
    same_task(runs)
    columns = [_column(run, window, example_id, solved_threshold(run) if solved is None else solved, limit)
               for run, window in zip(runs, windows, strict=True)]
    if all(c.absent for c in columns):
        names = ", ".join(f"run {c.run.pk}" for c in columns)
        raise Http404(f"No column drew example {example_id!r} ({names}): nothing to compare.")
    for column in columns:
        _diff_down_the_column(column)
    return Across(example_id, align, solved, columns, _align(columns, align))


def runs_for_example(readable: QuerySet[Run], run: Run, example_id: str, *, limit: int = CANDIDATES_LIMIT) -> list[Run]:
    """Other runs of `run`'s task among `readable` that drew `example_id`, newest first: what the
    example history offers to open it in (one query; the (run, example_id, step) index answers it)."""
    drew = Rollout.objects.filter(run=OuterRef("pk"), example_id=example_id)
    return list(readable.filter(task_id=run.task_id).exclude(pk=run.pk).filter(Exists(drew))
                .order_by("-created_at", "-id")[:limit])
