"""Typed messages sent to the browser over the run websocket (`/ws/runs/<id>/`).

The websocket only notifies; the database is the source of truth. A client that sees a gap in
`seq` (or reconnects) refetches `GET /runs/<id>/metrics.json?after=<last seq>`.
"""

import logging
from collections.abc import Iterable
from typing import Any, Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


class StepNotice(TypedDict):
    type: Literal["step"]
    run: int
    seq: int
    step: int
    metrics: dict[str, float]


class StatusNotice(TypedDict):
    type: Literal["status"]
    run: int
    state: str
    current_step: int
    error: str
    pruned_reason: str


class AlertNotice(TypedDict):
    """An alert that fired on the run. Each watcher's consumer adds `badge`: that user's unseen open
    alerts (the topbar count), which differs between the run's owner and staff watching it."""
    type: Literal["alert"]
    run: int
    alert: int
    kind: str
    kind_label: str
    message: str
    step: int | None
    fired_at: str
    fired_at_text: str


def run_group_name(run_id: int) -> str:
    """The channel-layer group of one run's watchers."""
    return f"run-{run_id}"


def status_notice(run: Any) -> StatusNotice:
    """The `status` notice of a run as it is now (a Run: its state, step and error)."""
    return {"type": "status", "run": run.pk, "state": run.state, "current_step": run.current_step, "error": run.error,
            "pruned_reason": run.pruned_reason}


def notice_send(run_id: int, notice: dict[str, Any]) -> None:
    """Best effort: the websocket is a notification channel; a lost notice is refetched by the page
    (steps, status) or shown on its next load (alerts). Redis down never stops training or ingest."""
    try:
        async_to_sync(get_channel_layer().group_send)(
            run_group_name(run_id), {"type": f"run.{notice['type']}", "notice": notice})
    except Exception:
        log.warning("could not notify run %s watchers", run_id, exc_info=True)


def status_notices_send(sender: Any, run: Any, **kwargs: Any) -> None:
    """The `status` notice of every state change, from the one place states change (`Run.transition`,
    through `run_state_changed` after its commit): a cancel or a prune made in the web process reaches
    every open page of the run at once, as a change made by a worker or the logging API does."""
    notice_send(run.pk, status_notice(run))


def step_notices_send(run_id: int, rows: Iterable[Any]) -> None:
    """One `step` notice per newly stored step (StepMetric rows, seq order), sent by the ingest on its
    commit (webapp/runs/ingest/store.py), so an open run page extends its charts whoever trained the run."""
    for row in rows:
        notice: StepNotice = {"type": "step", "run": run_id, "seq": row.seq, "step": row.step, "metrics": row.metrics}
        notice_send(run_id, notice)
