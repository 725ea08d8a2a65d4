"""Query parameters of the API: pages (`limit`, `offset`) and the run-list filters. Every bad value
is a `BadParam` (400 with its message)."""

from __future__ import annotations

import json
import re

from rest_framework.utils.urls import remove_query_param, replace_query_param

from webapp.runs.launch.check import MAX_TAG_CHARS
from webapp.runs.models import Run
from webapp.runs.params import BadParam, int_param

PAGE_DEFAULT = 100
PAGE_MAX = 500
MAX_CONFIG_FILTERS = 16
MAX_TEXT = 200
MAX_SERIES = 256  # metric keys in one `series=` of the metrics endpoint
MAX_POINTS_LOW, MAX_POINTS_HIGH = 10, 1_000_000  # its `max_points`
# A config key: letters, digits, '_' and '-' (no '__', the ORM's lookup separator); nested keys by '.'.
CONFIG_KEY = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


def page_params(request) -> tuple[int, int]:
    """(offset, limit): `limit` 1..500 (100 when absent), `offset` from 0."""
    limit = int_param(request, "limit", default=PAGE_DEFAULT, low=1, high=PAGE_MAX, blank_is_absent=False)
    offset = int_param(request, "offset", default=0, low=0, blank_is_absent=False)
    return offset, limit


def paginated(request, results: list, *, count: int, offset: int, limit: int) -> dict:
    """The page envelope: the total, links to the next and previous pages (None at the ends)."""
    url = request.build_absolute_uri()
    following = replace_query_param(url, "offset", offset + limit) if offset + limit < count else None
    if offset <= 0:
        previous = None
    elif offset - limit <= 0:
        previous = remove_query_param(url, "offset")
    else:
        previous = replace_query_param(url, "offset", offset - limit)
    return {"count": count, "offset": offset, "limit": limit, "next": following, "previous": previous,
            "results": results}


def _text(request, name: str) -> str:
    value = request.GET.get(name, "")
    if len(value) > MAX_TEXT:  # as sent, spaces included: the schema's maxLength counts them
        raise BadParam(f"'{name}' must be at most {MAX_TEXT} characters.")
    return value.strip()


def config_filter(raw: str) -> tuple[list[str], object]:
    """`key=value` or `a.b=value` as (key path, value): the value is read as JSON when it is JSON
    (`group_size=12` is the number 12, `lora=null` is null, `name="12"` the string) and is a plain
    string otherwise (`estimator=gdpo`)."""
    key, sep, value = raw.partition("=")
    if not sep or not key:
        raise BadParam(f"'config' must look like key=value (e.g. config=estimator=gdpo), not {raw!r}.")
    path = key.split(".")
    for part in path:
        if not CONFIG_KEY.match(part) or "__" in part:
            raise BadParam(f"'config' key {key!r} is not a config key: use letters, digits, '_' or '-', "
                           "nested keys joined by '.'.")
    try:
        # NaN and ±Infinity are no JSON (PostgreSQL's jsonb refuses them: a 500): such a value is text.
        parsed = json.loads(value, parse_constant=_refuse_constant)
    except ValueError:
        parsed = value
    return path, parsed


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def run_filters(request) -> dict:
    """The run-list filters as `selectors.run_list_api` takes them."""
    state = _text(request, "state")
    if state and state not in Run.State.values:
        raise BadParam(f"'state' must be one of {', '.join(Run.State.values)}, not {state!r}.")
    configs = request.GET.getlist("config")
    if len(configs) > MAX_CONFIG_FILTERS:
        raise BadParam(f"At most {MAX_CONFIG_FILTERS} 'config' filters.")
    given = request.GET.getlist("tag")
    tags = [tag.strip().lower() for tag in given if tag.strip()]
    # Counted and measured as sent (empty ones and spaces too), as the schema's maxItems and maxLength.
    if len(given) > MAX_CONFIG_FILTERS or any(len(tag) > MAX_TAG_CHARS for tag in given):
        raise BadParam(f"At most {MAX_CONFIG_FILTERS} 'tag' filters of at most {MAX_TAG_CHARS} characters.")
    return {
        "state": state, "tags": tags, "task": _text(request, "task"), "program": _text(request, "program"),
        "owner": _text(request, "owner"), "project": _text(request, "project"), "q": _text(request, "q"),
        "config": [config_filter(raw) for raw in configs],
    }


FLAG_VALUES = {"": False, "0": False, "false": False, "False": False, "no": False,
               "1": True, "true": True, "True": True, "yes": True}  # True/False: what Python's str() writes


def flag(request, name: str) -> bool:
    """A yes/no parameter, one of FLAG_VALUES (absent or empty is no)."""
    raw = request.GET.get(name, "")
    if raw not in FLAG_VALUES:
        raise BadParam(f"'{name}' must be 1 or 0, not {raw!r}.")
    return FLAG_VALUES[raw]
