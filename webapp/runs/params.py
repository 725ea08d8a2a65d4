"""Query-parameter parsing shared by the run pages and the read API: a bad value is a `BadParam`,
answered with 400 and its message (never a 500)."""

from __future__ import annotations

MAX_SERIES_KEY_LENGTH = 200
# The largest integer any parameter takes: offsets, steps and ids all end in a 64-bit SQL integer, and
# a larger one is a DataError (a 500) in PostgreSQL. Nothing Cohort counts comes near it.
INT_PARAM_MAX = 2**62


class BadParam(ValueError):
    """A query parameter that cannot be used: answered with 400 and this message."""


def int_param(request, name: str, *, default=None, low: int = 0, high: int | None = None,
              blank_is_absent: bool = True):
    """The integer `name` of the query string within [low, high] (high at most INT_PARAM_MAX);
    `default` when absent, or empty where `blank_is_absent` (a page's form sends its empty fields; the
    API's schema calls an empty value no integer, so the API passes False); `default=BadParam` makes
    it required."""
    raw = request.GET.get(name)
    if raw is None or (raw == "" and blank_is_absent):
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


def step_range(request, *, blank_is_absent: bool = True) -> tuple[int | None, int | None]:
    """(`from_step`, `to_step`), each optional and inclusive. A `from_step` after `to_step` is an empty
    window, answered with no points as any range query would, not a 400: the API's schema cannot state
    an order between two parameters, and what it calls valid the API accepts (issue 35)."""
    return (int_param(request, "from_step", blank_is_absent=blank_is_absent),
            int_param(request, "to_step", blank_is_absent=blank_is_absent))


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
