"""Query-parameter parsing shared by the run pages and the read API: a bad value is a `BadParam`,
answered with 400 and its message (never a 500)."""

from __future__ import annotations

MAX_SERIES_KEY_LENGTH = 200
# The largest integer any parameter takes: offsets, steps and ids all end in a 64-bit SQL integer, and
# a larger one is a DataError (a 500) in PostgreSQL. Nothing Cohort counts comes near it.
INT_PARAM_MAX = 2**62


class BadParam(ValueError):
    """A query parameter that cannot be used: answered with 400 and this message."""


def int_param(request, name: str, *, default=None, low: int = 0, high: int | None = None):
    """The integer `name` of the query string within [low, high] (high at most INT_PARAM_MAX);
    `default` when absent or empty (pass `default=BadParam` to make it required)."""
    raw = request.GET.get(name)
    if raw is None or raw == "":
        if default is BadParam:
            raise BadParam(f"'{name}' is required.")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParam(f"'{name}' must be an integer, not {raw!r}.") from None
    high = INT_PARAM_MAX if high is None else min(high, INT_PARAM_MAX)
    if value < low or value > high:
        raise BadParam(f"'{name}' must be between {low} and {high}, not {value}.")
    return value


def step_range(request) -> tuple[int | None, int | None]:
    """(`from_step`, `to_step`), each optional, the first not after the second."""
    from_step = int_param(request, "from_step")
    to_step = int_param(request, "to_step")
    if from_step is not None and to_step is not None and from_step > to_step:
        raise BadParam(f"'from_step' ({from_step}) must not be after 'to_step' ({to_step}).")
    return from_step, to_step


def series_keys(request, *, max_series: int) -> list[str] | None:
    """The metric keys of `series=a,b` (deduplicated, in order), or None for every series."""
    raw = request.GET.get("series")
    if not raw:
        return None
    keys = list(dict.fromkeys(k.strip() for k in raw.split(",") if k.strip()))
    if len(keys) > max_series or any(len(k) > MAX_SERIES_KEY_LENGTH for k in keys):
        raise BadParam(f"'series' takes at most {max_series} metric keys of at most "
                       f"{MAX_SERIES_KEY_LENGTH} characters.")
    return keys or None
