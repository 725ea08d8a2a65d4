"""Read-side queries for runs. Views and consumers fetch objects only through these scoped getters,
so a stranger's id is a 404 everywhere, never a leak and never a bare `.get(id=)`."""

import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    Case,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    OrderBy,
    Q,
    QuerySet,
    When,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, Now
from django.http import Http404
from django.utils import timezone

from webapp.json_keys import json_path
from webapp.projects.models import Membership, Project, Role
from webapp.projects.selectors import readable_project_ids
from webapp.runs.models import EXTERNAL_PROGRAM, Run, StepMetric, Task


def run_list_for_user(user, *, ids_first: bool = False) -> QuerySet[Run]:
    """Runs the user may read: those of the projects they are a member of (any role); staff every run;
    anonymous users none. (A share link reads through webapp/runs/access.py `run_read`.)

    `ids_first` (a list of many runs: the runs table, the API list): read the user's project ids first, one
    more query, and filter on the ids themselves; PostgreSQL then plans with their runs' count (a bitmap
    or index scan) instead of a membership subquery (a hash join over every run of every project)."""
    if not user.is_authenticated:
        return Run.objects.none()
    runs = Run.objects.select_related("task", "task__program", "owner", "project")
    projects = readable_project_ids(user)
    if projects is None:
        return runs
    if ids_first:
        projects = list(projects.order_by().values_list("project_id", flat=True))
    return runs.filter(project_id__in=projects)


def run_linked(run_id: int) -> Run | None:
    """The run a share link names (the link was checked by webapp/sharing), with what its pages read."""
    return Run.objects.select_related("task", "task__program", "owner", "project").filter(pk=run_id).first()


def run_move_targets(user, run: Run) -> QuerySet:
    """The projects `run` may move to by `user`'s hand: where its owner is at least a member, and so is
    `user` (staff: wherever the owner is); its own project among them."""
    writers = [Role.MEMBER, Role.ADMIN]
    owners = Membership.objects.filter(user_id=run.owner_id, role__in=writers).values("project_id")
    targets = Project.objects.filter(pk__in=owners)
    if not user.is_staff:
        targets = targets.filter(pk__in=Membership.objects.filter(user_id=user.pk, role__in=writers).values("project_id"))
    return (targets | Project.objects.filter(pk=run.project_id)).distinct().order_by("name")


def launchable_tasks() -> QuerySet[Task]:
    """The tasks Cohort's worker can train: all but those created for runs trained elsewhere, whose
    program is no registered one (webapp/runs/ingest/external.py)."""
    return Task.objects.exclude(program__name=EXTERNAL_PROGRAM)


def run_get_for_user(user, run_id) -> Run:
    """The run with this id if the user may see it; Http404 otherwise (also for a malformed id)."""
    return run_get_among(run_list_for_user(user), run_id)


def run_get_among(runs: QuerySet[Run], run_id) -> Run:
    """The run of `runs` with this id; Http404 otherwise (also for a malformed id): a run the caller may
    not read is as absent as a missing one."""
    try:
        run_id = int(run_id)
    except (TypeError, ValueError):
        raise Http404("No such run.") from None
    run = runs.filter(pk=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return run


def step_metrics_after(run: Run, *, after_seq: int, limit: int) -> list[dict]:
    """The stored step metrics of a run with seq > after_seq, oldest first, at most `limit`."""
    rows = (
        StepMetric.objects.filter(run=run, seq__gt=after_seq)
        .order_by("seq")
        .values("seq", "attempt", "step", "metrics")[:limit]
    )
    return list(rows)


def runs_page(runs: QuerySet[Run], offset: int, limit: int) -> list[Run]:
    """One page of `runs`, in their order, read in two steps: the page's ids from a narrow query (no
    joins beyond what the order needs), then those runs with their joins. A user's runs lie in several
    projects, interleaved with everyone else's: for a search or a sort no index yields them in order, so
    PostgreSQL sorts every match, and with the joins in the same query it joined every match (300 for a
    page of 50) before sorting (benchmarks/lab_tables.py)."""
    ids = list(runs.values_list("pk", flat=True)[offset:offset + limit])
    found = {run.pk: run for run in runs.order_by().filter(pk__in=ids)}
    return [found[pk] for pk in ids if pk in found]


# The runs table's sort keys (`?sort=key` ascending, `?sort=-key` descending) and their columns.
# Every order ends with the id, so rows with equal values keep one order across pages.
RUN_SORTS: dict[str, str] = {
    "name": "name", "state": "state", "task": "task__name", "steps": "current_step",
    "last_reward": "last_reward", "best_reward": "best_reward", "last_eval_reward": "last_eval_reward",
    "duration": "elapsed", "gpu_hours": "gpu_elapsed", "owner": "owner__username", "created": "created_at",
    "storage": "storage_bytes",
}
DEFAULT_SORT = "-created"
# What a table row shows (notes: its inline edit form); not the config (annotated instead) or the error.
TABLE_FIELDS = (
    "id", "name", "state", "current_step", "total_steps", "best_reward", "last_reward", "last_eval_reward",
    "tags", "notes", "archived_at", "gpus", "storage_bytes", "origin", "created_at", "started_at", "finished_at",
    "task__name", "task__title",
    "task__program__name", "task__program__title", "owner__username", "project__name", "project__personal_of_id",
)


@dataclass(frozen=True)
class RunSearch:
    """A parsed search box: every part must match (see RunFilterForm for the syntax)."""

    text: tuple[str, ...] = ()  # a run's name contains it, or one of its tags does
    tags: tuple[str, ...] = ()  # a tag equals it
    config: tuple[tuple[tuple[str, ...], Any], ...] = ()  # (key path, JSON value) equals the config's
    projects: tuple[str, ...] = ()  # the run's project is one of these (names, any case)


def run_list_filtered(user, *, state: str = "", task=None, program=None, owner: str = "", project: str = "",
                      q: str = "", search: RunSearch | None = None, archived: bool = False, sort: str = DEFAULT_SORT,
                      **_ignored) -> QuerySet[Run]:
    """`run_list_for_user` narrowed by the runs table's filters (empty values do not filter), in
    `sort` order, as table rows: strategy and estimator annotated, the config itself not loaded.

    `q` alone is a name search (callers that do not parse the search box); `search` is the parsed
    box. Archived runs are left out unless `archived`.
    """
    runs = run_list_for_user(user, ids_first=True)
    if not archived:
        runs = runs.filter(archived_at__isnull=True)
    if state:
        runs = runs.filter(state=state)
    if task is not None:
        runs = runs.filter(task=task)
    if program is not None:
        runs = runs.filter(task__program=program)
    if owner:
        runs = runs.filter(owner__username=owner)
    if project:
        runs = runs.filter(project__name__iexact=project)
    if search is None and q:
        search = RunSearch(text=(q,))
    if search is not None:
        runs = runs_matching(runs, search)
    runs = runs.only(*TABLE_FIELDS).annotate(
        strategy=KT("config__strategy"), estimator=KT("config__estimator"),
        elapsed=ELAPSED, gpu_elapsed=ExpressionWrapper(ELAPSED * GPUS, output_field=DurationField()),
    )
    return runs.order_by(*run_ordering(sort))


# SQLite multiplies a duration by an IntegerField only (not a PositiveSmallIntegerField).
GPUS = ExpressionWrapper(F("gpus"), output_field=IntegerField())
# A run's duration: from its start to its end, or, while it runs, to now; but a run trained elsewhere
# (which Cohort only hears from) to its trainer's last post, its heartbeat, so a lost one stops
# counting where its trainer stopped posting. `run_elapsed` is the same for one run in Python.
LAST_HEARD = Case(When(~Q(origin=Run.ORIGIN_COHORT), then=F("heartbeat_at")), default=Now(),
                  output_field=DateTimeField())
ELAPSED = ExpressionWrapper(Coalesce(F("finished_at"), LAST_HEARD, Now()) - F("started_at"),
                            output_field=DurationField())


def run_elapsed(run: Run, now: dt.datetime | None = None) -> dt.timedelta | None:
    """The run's duration as the runs table's ELAPSED column computes it; None before it started."""
    if run.started_at is None:
        return None
    end = run.finished_at or (run.heartbeat_at if run.is_external else None) or now or timezone.now()
    return end - run.started_at


# Sort keys whose column can be empty: those runs come last either way. (NULLS LAST on a NOT NULL
# column would stop PostgreSQL from reading it in index order.)
NULLABLE_SORTS = frozenset({"last_reward", "best_reward", "last_eval_reward", "duration", "gpu_hours"})


def run_ordering(sort: str) -> list[OrderBy]:
    """ORDER BY for a sort key of RUN_SORTS (KeyError otherwise), the id breaking ties. The reward
    columns have indexes in these orders (Run.Meta.indexes; high to low: migration 0006, PostgreSQL)."""
    key = sort.removeprefix("-")
    descending = sort.startswith("-")
    nulls_last = True if key in NULLABLE_SORTS else None
    column = F(RUN_SORTS[key])
    first = column.desc(nulls_last=nulls_last) if descending else column.asc(nulls_last=nulls_last)
    return [first, F("id").desc() if descending else F("id").asc()]


def runs_matching(runs: QuerySet[Run], search: RunSearch) -> QuerySet[Run]:
    """`runs` narrowed to those matching every part of `search` (the runs table and the API); several
    `project:` terms mean any of those projects."""
    if search.projects:
        in_any = Q()
        for name in search.projects:
            in_any |= Q(project__name__iexact=name)
        runs = runs.filter(in_any)
    for text in search.text:
        # Tags are slugs, so a slug-like text can only match inside one tag of the stored JSON text.
        matches = Q(name__icontains=text)
        if TAG_TEXT.fullmatch(text):
            matches |= Q(tags__icontains=text)
        runs = runs.filter(matches)
    for tag in search.tags:
        # The quoted tag in the list's JSON text: exact, on PostgreSQL and SQLite alike.
        runs = runs.filter(tags__icontains=json.dumps(tag))
    for i, (path, value) in enumerate(search.config):
        # An explicit key path: a key named like a lookup (`gt`, `contains`) stays a key, `-9` too.
        name = f"_config_{i}"
        runs = runs.alias(**{name: json_path("config", path, list_indexes=True)}).filter(**{name: value})
    return runs


TAG_TEXT = re.compile(r"[a-z0-9][a-z0-9._-]*", re.IGNORECASE)
