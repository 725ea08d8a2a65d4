"""Cohort for Python programs: stream a run from any trainer, and read runs back.

    import cohort
    run = cohort.init(task="my-task", config={"lr": 1e-5})   # COHORT_URL, COHORT_TOKEN
    run.log({"loss": 0.3}, step=1)
    run.finish()

    from cohort.client import Client   # the read API as pandas DataFrames (`pip install cohort[client]`)

The names are served on first use (PEP 562): `import cohort` loads neither pandas (the read client's
one dependency) nor anything else a trainer would not already have, so the SDK costs nothing to import.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "init": "cohort.sdk",
    "Run": "cohort.sdk",
    "CohortAPIError": "cohort.http",
    "Client": "cohort.client",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'cohort' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
