"""Read-side queries of the API. Runs are reached only through the request's runs
(webapp/api/scope.py `api_runs`: the user's projects, narrowed to a token's project); every function runs a fixed number of queries whatever the page size
(rows of a page and their children are two queries, the total a third)."""

from __future__ import annotations

from django.db.models import F, Prefetch, QuerySet
from django.http import Http404

from webapp.api.models import ApiToken
from webapp.runs.ingest.texts import fill_call_texts
from webapp.runs.models import Group, GroupMember, ModuleCall, Rollout, Run
from webapp.runs.selectors import RunSearch, runs_matching


def tokens_for_user(user) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).select_related("project").order_by("-created_at", "-id")


def with_summary(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs` with `last_reward_mean` and `last_eval_reward_mean`: the values ingest keeps on the run
    (Run.last_reward, Run.last_eval_reward), under the API's names."""
    return runs.annotate(last_reward_mean=F("last_reward"), last_eval_reward_mean=F("last_eval_reward"))


def run_list_api(runs: QuerySet[Run], *, state: str = "", task: str = "", program: str = "", owner: str = "",
                 project: str = "", q: str = "", tags: list[str] = (),
                 config: list[tuple[list[str], object]] = ()) -> QuerySet[Run]:
    """`runs` (those the request may read) narrowed by the API filters (empty values do not filter):
    each tag must be one of the run's tags, and each (key path, JSON value) of `config` must equal the
    run's config there (the runs table's search, `runs_matching`)."""
    if project:
        runs = runs.filter(project__name__iexact=project)
    if state:
        runs = runs.filter(state=state)
    if task:
        runs = runs.filter(task__name=task)
    if program:
        runs = runs.filter(task__program__name=program)
    if owner:
        runs = runs.filter(owner__username=owner)
    if q:
        runs = runs.filter(name__icontains=q)
    search = RunSearch(tags=tuple(tags), config=tuple((tuple(path), value) for path, value in config))
    # A page of a list needs the project's name only (`with_project_name`), not a Project object per run.
    runs = runs.select_related(None).select_related("task", "task__program", "owner")
    return with_summary(runs_matching(runs, search))


def with_project_name(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs` with `project_name`: for a page's rows only, so the count and the page's ids join no project."""
    return runs.annotate(project_name=F("project__name"))


def run_get_api(runs: QuerySet[Run], run_id) -> Run:
    """One run of `runs` (those the request may read) with its summary annotations; Http404 otherwise."""
    run = with_summary(runs).filter(pk=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return run


def step_rollouts(run: Run, attempt: int, step: int, *, offset: int, limit: int,
                  prompts: bool = False) -> tuple[list[Rollout], int]:
    """A page of the step's rollouts in index order, their calls prefetched in order (prompts and
    chat messages only when asked: they are most of the bytes), and the total."""
    rows = Rollout.objects.filter(run=run, attempt=attempt, step=step)
    calls = ModuleCall.objects.order_by("position")
    if not prompts:
        calls = calls.defer("prompt", "messages")
    page = list(rows.order_by("index").prefetch_related(Prefetch("calls", queryset=calls))[offset:offset + limit])
    fill_call_texts([call for rollout in page for call in rollout.calls.all()])
    return page, rows.count()


def step_groups(run: Run, attempt: int, step: int, *, offset: int, limit: int,
                module: str = "") -> tuple[list[Group], int]:
    """A page of the step's groups in index order with their members (and each member's rollout
    index, joined in the members' query), and the total."""
    rows = Group.objects.filter(run=run, attempt=attempt, step=step)
    if module:
        rows = rows.filter(module=module)
    members = GroupMember.objects.order_by("position").annotate(rollout_index=F("call__rollout__index"))
    page = list(rows.order_by("index").prefetch_related(Prefetch("members", queryset=members))[offset:offset + limit])
    return page, rows.count()
