"""Named sets of runs the compare page can be opened on (`/runs/compare?experiment=3`): a whole
experiment or sweep is one link, not a list of run ids in the URL.

The apps that own such sets register a resolver here from their AppConfig.ready()
(webapp/experiments/apps.py registers "experiment"); this registry imports none of them, as
webapp/runs/hooks.py. A resolver is `resolve(user, value) -> list[Run]`: the runs of that set the user
may read. It raises Http404 for a set the user may not read (exactly as for one that does not exist),
and ValueError, with a message that says what is wrong, for a value that cannot name one (the page
answers 400 with it).

Registering under a name again replaces the resolver, so a ready() that runs twice registers once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import Http404

from webapp.runs.params import INT_PARAM_MAX

# Query parameters the compare page reads itself: no source may take one of these names.
RESERVED = frozenset({"runs", "metrics", "band", "group_by"})

Resolver = Callable[[Any, str], list]
_sources: dict[str, Resolver] = {}


def register_run_source(name: str, resolve: Resolver) -> None:
    """Makes `?<name>=<value>` on the compare page bring `resolve(user, value)`'s runs."""
    if not name.isidentifier() or name in RESERVED:
        raise ValueError(f"a run source needs a plain name other than {sorted(RESERVED)}, not {name!r}")
    _sources[name] = resolve


def run_source(name: str) -> Resolver:
    """The resolver registered under `name` (KeyError if none is)."""
    return _sources[name]


def run_source_names() -> list[str]:
    """Every registered source's name, in the order they were registered."""
    return list(_sources)


def source_id(value: str, what: str) -> int:
    """The id a source's value names (`experiment=3`): ValueError for text that is no id (a 400 with
    the reason), Http404 for one no row can have (as for one that does not exist)."""
    try:
        pk = int(value)
    except ValueError:
        raise ValueError(f"{what} is named by its id, not {value!r}") from None
    if not 0 < pk < INT_PARAM_MAX:
        raise Http404(f"No such {what.split()[-1]}.")
    return pk
