"""Reads for replays: the call a replay names (scoped to a run the reader reads), the replays of a call
or of an inspector page, and who may start one (any member or admin of the run's project, staff; not a
viewer, not a share link's reader)."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.http import Http404

from webapp.projects.models import ROLE_RANK, Role
from webapp.runs.models import ModuleCall, Replay, Run


def replay_allowed(run: Run) -> bool:
    """Whether the reader of `run` (its `.access`, set by webapp/runs/access.py `run_read`) may start a replay:
    a project member or admin (staff read as admin); a viewer or a share link's reader may not."""
    access = getattr(run, "access", None)
    if access is None or access.role is None or access.via_link:
        return False
    return ROLE_RANK.get(access.role, 0) >= ROLE_RANK[Role.MEMBER]


def replay_start_check(run: Run) -> None:
    """PermissionDenied (a 403 that says why) unless the reader may start a replay of `run`."""
    if not replay_allowed(run):
        raise PermissionDenied(f"You are a viewer of project {run.project.name}: viewers read its runs and start "
                               "no work, replays included. Ask one of its admins to make you a member.")


def replay_call_get(run: Run, call_id) -> ModuleCall:
    """The call `call_id` of `run` with its rollout; Http404 when the run has no such call (its step's
    rollouts may have been dropped by the run's retention)."""
    try:
        pk = int(call_id)
    except (TypeError, ValueError):
        raise Http404("No such call in this run.") from None
    call = ModuleCall.objects.select_related("rollout").filter(pk=pk, rollout__run=run).first()
    if call is None:
        raise Http404("No such call in this run (its step's rollouts may have been dropped by the run's retention).")
    return call


def call_replays(run: Run, call_pk: int) -> list[Replay]:
    """The replays of one call, newest first."""
    return list(Replay.objects.filter(run=run, call_pk=call_pk).select_related("requested_by"))


@dataclass
class InspectorReplays:
    """The inspector page's replays: whether its reader may start one, and the replays of its example
    at its step (newest first), by the rollout index and call position they replayed."""

    can_start: bool
    replays: list[Replay]


def inspector_replays(run: Run, attempt: int, step: int, example_id: str) -> InspectorReplays:
    replays = list(Replay.objects.filter(run=run, attempt=attempt, step=step, example_id=example_id)
                   .only("pk", "rollout_index", "position", "module", "group_size", "state", "result", "original",
                         "call_pk", "created_at", "error"))
    return InspectorReplays(can_start=replay_allowed(run), replays=replays)
