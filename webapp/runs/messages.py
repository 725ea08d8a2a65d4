"""Typed messages sent to the browser over the run websocket (`/ws/runs/<id>/`).

The websocket only notifies; the database is the source of truth. A client that sees a gap in
`seq` (or reconnects) refetches `GET /runs/<id>/metrics.json?after=<last seq>`.
"""

from typing import Literal, TypedDict


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


def run_group_name(run_id: int) -> str:
    """The channel-layer group of one run's watchers."""
    return f"run-{run_id}"
