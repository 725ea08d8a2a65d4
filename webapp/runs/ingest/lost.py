"""Runs trained elsewhere whose trainer vanished (issue 43).

A run logged through the API has no Cohort worker beating for it: its heartbeat is its trainer's last
post. A trainer killed with `kill -9`, or on a machine that went away, never finishes its run, which
would stay `running` for ever and count against its owner's active runs. So the reaper's beat marks a
run whose trainer has posted nothing for COHORT_EXTERNAL_STALE_AFTER `lost`; its page says since when.

Lost is not an end. The trainer, or `cohort sync` of its run folder after a restart, may post again:
its next steps reopen the run (`running`), and its finish ends it as it says.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from webapp.runs.models import Run


def external_runs_mark_lost(*, stale_after: dt.timedelta) -> list[int]:
    """running -> lost for each run trained elsewhere with no post for `stale_after`; their ids."""
    cutoff = timezone.now() - stale_after
    lost = []
    for run in Run.objects.filter(state=Run.State.RUNNING, heartbeat_at__lt=cutoff).exclude(origin=Run.ORIGIN_COHORT):
        if run.transition(Run.State.LOST):  # False: a post came meanwhile and it stays running
            lost.append(run.pk)
    return lost


def run_reopen(run: Run) -> bool:
    """lost -> running, when its trainer posts again; True if this call reopened it."""
    return run.state == Run.State.LOST and run.transition(Run.State.RUNNING, heartbeat_at=timezone.now())
