"""The sweep page's websocket notices (`/ws/sweeps/<id>/`): a small "the sweep changed" message; the
page then refetches the sweep's JSON (the database is the source of truth, as for runs)."""

from __future__ import annotations

import logging
from typing import Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


class SweepNotice(TypedDict):
    type: Literal["sweep"]
    sweep: int


def sweep_group_name(sweep_id: int) -> str:
    """The channel-layer group of one sweep's watchers."""
    return f"sweep-{sweep_id}"


def sweep_notice_send(sweep_id: int) -> None:
    """Best effort, like the run notices: a lost one is caught up by the page's next refetch."""
    try:
        layer = get_channel_layer()
        if layer is not None:
            notice: SweepNotice = {"type": "sweep", "sweep": sweep_id}
            async_to_sync(layer.group_send)(sweep_group_name(sweep_id), {"type": "sweep.notice", "notice": notice})
    except Exception:  # noqa: BLE001 (Redis away: the page refetches on reconnect)
        log.warning("sweep %s notice not sent", sweep_id, exc_info=True)


def sweep_notice_after_commit(sweep_id: int) -> None:
    transaction.on_commit(lambda: sweep_notice_send(sweep_id))
