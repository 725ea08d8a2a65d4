"""Which tests run in which of CI's two suites (.ci/run runs them side by side).

CI runs the tests twice over: once against PostgreSQL and Redis (the `services` suite) and once with
the embedded defaults, a SQLite file and an embedded Redis (the `embedded` suite). Repeating a test
only pays where the two backends can make it pass or fail differently, so the rule is:

- A test that touches the database (a `django_db` mark, or a fixture that needs the database) runs in
  **both** suites, unless it is marked `backend_neutral` with a reason: what it asserts reads the
  same on either backend, and the queries it makes are tested on both elsewhere.
- Every other test runs **once**: in the embedded suite if it matches `EMBEDDED_ONCE_MARKS` or `EMBEDDED_ONCE_PATHS` (chosen so the
  two suites take about as long), in the services suite otherwise.

- A test of a PostgreSQL mechanism (COPY, concurrent writers, an outage staged with a TCP proxy) is
  marked `postgresql_only` with a reason: it runs in the services suite only, fails there if that
  suite is not on PostgreSQL (a misconfigured CI must not turn it into a silent skip), and is skipped,
  with its reason, only by a plain `make test` on SQLite.

A new database test therefore runs on both until someone states why it need not; a `backend_neutral`
mark without a reason is an error at collection, and so is one on a test that never touches the
database (it would hide nothing and mislead the reader). `make test` (no COHORT_TESTS_SUITE) runs
everything once, on whichever backend it is given.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SUITE_ENV = "COHORT_TESTS_SUITE"
SUITES = ("services", "embedded")
NEUTRAL = "backend_neutral"
POSTGRESQL_ONLY = "postgresql_only"

# Reasons that many modules give.
UI_ONLY = ("a page's own drawing and controls in a real browser; the queries behind the page are "
           "tested on both backends by the view and selector tests")

# Fixtures of pytest-django (and ours) that open the test database for a test.
DATABASE_FIXTURES = frozenset({
    "db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback",
    "admin_user", "admin_client", "live_server",
})

# The tests that run once go to the embedded suite when they match one of these (marks first, then
# folders ending in "/" or files, relative to the project root); the rest of them run in the services
# suite. The database tests both suites run take the same time in each, so this is where the two are
# evened out, by the times .ci/report.py prints (docs/explanation/decisions/ci-in-half-the-time.md): the vLLM
# engine's tests, the trainer's own (no Django at all) and the benchmarks' (fresh-ci on a fast day: the
# services suite 888 s and the embedded one 1,091 s with cohort/'s tests, 118 s, in the embedded one).
EMBEDDED_ONCE_MARKS: tuple[str, ...] = ("vllm",)
# tests/webapp/db/ tests the SQLite backend itself (webapp/db/sqlite3): it runs where SQLite is.
# The test Slurm's own tests and the Slurm tools' (no database) even out the services suite's Slurm runs.
EMBEDDED_ONCE_PATHS: tuple[str, ...] = ("tests/trainer/", "tests/benchmarks/", "tests/cohort/test_trl.py",
                                        "tests/webapp/db/", "tests/test_slurm_cluster.py",
                                        "tests/webapp/scheduling/slurm/test_tools.py",
                                        "tests/webapp/scheduling/slurm/test_script.py")


def touches_database(item: pytest.Item) -> bool:
    return item.get_closest_marker("django_db") is not None or bool(DATABASE_FIXTURES & set(item.fixturenames))


def _stated_reason(item: pytest.Item, name: str, what: str) -> str | None:
    """The reason of mark `name` on `item` (None without the mark); a usage error without one, saying
    `what` the reason should tell."""
    mark = item.get_closest_marker(name)
    if mark is None:
        return None
    reason = mark.kwargs.get("reason") or (mark.args[0] if mark.args else "")
    if not isinstance(reason, str) or not reason.strip():
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name} needs a reason ({what})")
    return reason


def neutral_reason(item: pytest.Item) -> str | None:
    """The stated reason of a `backend_neutral` mark, None without the mark; a mark without a reason,
    or on a test that never touches the database, is a usage error."""
    reason = _stated_reason(item, NEUTRAL, "why this test reads the same on PostgreSQL and SQLite")
    if reason is not None and not touches_database(item):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{NEUTRAL} on a test that never touches the "
                                "database (it runs once anyway): remove the mark")
    return reason


def postgresql_only_reason(item: pytest.Item) -> str | None:
    """The stated reason of a `postgresql_only` mark, None without the mark (a usage error without a
    reason, or beside `backend_neutral`, which would say the same twice)."""
    reason = _stated_reason(item, POSTGRESQL_ONLY, "which PostgreSQL mechanism it tests")
    if reason is not None and item.get_closest_marker(NEUTRAL) is not None:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{POSTGRESQL_ONLY} already runs in one suite: "
                                f"remove @pytest.mark.{NEUTRAL}")
    return reason


def runs_on_both(item: pytest.Item) -> bool:
    return touches_database(item) and neutral_reason(item) is None and postgresql_only_reason(item) is None


def once_suite(item: pytest.Item, root: Path) -> str:
    """The suite a test that runs once belongs to."""
    if postgresql_only_reason(item) is not None:
        return "services"
    if any(item.get_closest_marker(mark) for mark in EMBEDDED_ONCE_MARKS):
        return "embedded"
    relative = Path(str(item.path)).relative_to(root).as_posix()
    if any(relative == path or (path.endswith("/") and relative.startswith(path)) for path in EMBEDDED_ONCE_PATHS):
        return "embedded"
    return "services"


def in_suite(item: pytest.Item, suite: str, root: Path) -> bool:
    return runs_on_both(item) or once_suite(item, root) == suite


def select(config: pytest.Config, items: list[pytest.Item], *, database_vendor: str) -> None:
    """Deselects the tests that are not the suite's (COHORT_TESTS_SUITE); checks every
    `backend_neutral` and `postgresql_only` mark whichever suite runs, so a bad one fails `make test`
    too; skips a `postgresql_only` test only outside CI's suites, on SQLite."""
    for item in items:
        neutral_reason(item)
        postgresql_only_reason(item)
    suite = os.environ.get(SUITE_ENV, "").strip()
    if suite and suite not in SUITES:
        raise pytest.UsageError(f"{SUITE_ENV}={suite!r}: expected one of {', '.join(SUITES)}")
    needs_postgresql = [item for item in items if postgresql_only_reason(item) is not None]
    if needs_postgresql and database_vendor != "postgresql":
        if suite == "services":
            raise pytest.UsageError(f"{SUITE_ENV}=services runs on {database_vendor}, so its PostgreSQL-only tests "
                                    "could not run: set DATABASE_URL to a PostgreSQL database")
        if not suite:
            for item in needs_postgresql:
                item.add_marker(pytest.mark.skip(reason=f"needs PostgreSQL: {postgresql_only_reason(item)}"))
    if not suite:
        return
    root = Path(str(config.rootpath))
    kept, dropped = [], []
    for item in items:
        (kept if in_suite(item, suite, root) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
