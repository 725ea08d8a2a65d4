"""A launch form link that carries settings: `/runs/new?task=<id>&config=<token>` opens the form with
those RunConfig fields filled in over the task's defaults (a sweep's "Launch this": its base settings
with the best configuration's values, webapp/sweeps/page_payload.py).

The token is the URL-safe base64 of a JSON object, so a link survives copying and needs no server
state. It only fills the form: nothing is queued until the user submits it and RunConfig accepts every
value, so the token is checked for shape only (a JSON object of fields the form shows). Encoding and
decoding live together here, so the sweep page and the launch form cannot disagree about the format.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from typing import Any

from trainer.config import RunConfig
from webapp.runs.launch.defaults import config_defaults
from webapp.runs.launch.forms import NOT_ON_FORM
from webapp.runs.models import Task

LINKABLE = frozenset(f.name for f in dataclasses.fields(RunConfig)) - NOT_ON_FORM
MAX_TOKEN_CHARS = 16_000  # a whole RunConfig with a few rewards is about 3,000


class ConfigLinkError(ValueError):
    """A token that is not one this module wrote (the message says what to do)."""


def config_link_token(values: dict[str, Any]) -> str:
    """The token of `values` (RunConfig fields; the ones the form does not show are left out)."""
    kept = {k: v for k, v in values.items() if k in LINKABLE}
    raw = json.dumps(kept, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def config_link_values(token: str) -> dict[str, Any]:
    """The fields a token carries; ConfigLinkError for a damaged token, or one naming a field the form
    does not have (a link made for another version of Cohort)."""
    if len(token) > MAX_TOKEN_CHARS:
        raise ConfigLinkError("The settings in this link are too long to be a launch link's; open the form without them.")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        values = json.loads(raw)
    except (binascii.Error, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ConfigLinkError("The settings in this link are damaged (not a launch link's); "
                              "copy the whole link again, or open the form without them.") from None
    if not isinstance(values, dict):
        raise ConfigLinkError("The settings in this link are not a set of launch settings.")
    unknown = sorted(set(values) - LINKABLE)
    if unknown:
        raise ConfigLinkError(f"The link sets {', '.join(map(str, unknown))}, which the launch form does not have "
                              "(a link from another version of Cohort?).")
    return values


def config_link_changes(task: Task, config: dict[str, Any]) -> dict[str, Any]:
    """The fields of `config` that differ from what the launch form of `task` starts with anyway (a
    shorter link); all of them when the task's defaults cannot be read (a program no longer installed)."""
    try:
        defaults = config_defaults(task)
    except (ValueError, KeyError):
        return {k: v for k, v in config.items() if k in LINKABLE}
    return {k: v for k, v in config.items() if k in LINKABLE and defaults.get(k, object()) != v}
