"""CI's split of the tests between its two suites (tests/suites.py): a database test runs on both
unless it says why not, every other test once, and a mark that hides nothing is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import suites

ROOT = Path("/project")


class FakeItem:
    """What the rule reads of a pytest item: its marks, its fixtures, its path and id."""

    def __init__(self, path: str, *, marks: dict[str, pytest.Mark] | None = None, fixtures: tuple[str, ...] = ()):
        self.path = ROOT / path
        self.nodeid = f"{path}::test_x"
        self.fixturenames = list(fixtures)
        self.marks = marks or {}

    def get_closest_marker(self, name: str):
        return self.marks.get(name)


def mark(name: str, *args, **kwargs) -> dict[str, pytest.Mark]:
    return {name: pytest.Mark(name, args, kwargs)}


def suites_of(item: FakeItem) -> list[str]:
    return [suite for suite in suites.SUITES if suites.in_suite(item, suite, ROOT)]


def test_a_database_test_runs_on_both_backends_by_default():
    assert suites_of(FakeItem("tests/webapp/test_x.py", marks=mark("django_db"))) == ["services", "embedded"]
    # Through a fixture that needs the database (a real worker, a server) as well as through the mark.
    assert suites_of(FakeItem("tests/workers/test_x.py", fixtures=("celery_worker_process", "transactional_db"))) == [
        "services", "embedded"]


def test_a_backend_neutral_database_test_runs_once():
    neutral = {**mark("django_db"), **mark("backend_neutral", reason="a page's own drawing")}
    assert suites_of(FakeItem("tests/browser/test_x.py", marks=neutral)) == ["services"]
    positional = {**mark("django_db"), **mark("backend_neutral", "a page's own drawing")}
    assert suites_of(FakeItem("tests/browser/test_x.py", marks=positional)) == ["services"]


def test_a_test_without_the_database_runs_once_in_the_suite_that_evens_them_out():
    assert suites_of(FakeItem("tests/webapp/test_stack.py")) == ["services"]
    assert suites_of(FakeItem("tests/trainer/test_loop.py")) == ["embedded"]
    assert suites_of(FakeItem("tests/trainer_notes.py")) == ["services"]  # a folder's prefix ends in "/"
    assert suites_of(FakeItem("tests/cohort/test_dspy.py")) == ["services"]
    assert suites_of(FakeItem("tests/benchmarks/test_gpu_smoke.py")) == ["embedded"]
    assert suites_of(FakeItem("tests/workers/test_vllm_runs.py", marks={**mark("vllm"), **mark("django_db"),
                                                                        **mark("backend_neutral", reason="r")})) == [
        "embedded"]


@pytest.mark.parametrize("neutral", [mark("backend_neutral"), mark("backend_neutral", reason=" "),
                                     mark("backend_neutral", reason=None)])
def test_a_backend_neutral_mark_needs_a_reason(neutral):
    with pytest.raises(pytest.UsageError, match="needs a reason"):
        suites.neutral_reason(FakeItem("tests/webapp/test_x.py", marks={**mark("django_db"), **neutral}))


def test_a_backend_neutral_mark_on_a_test_without_the_database_is_refused():
    with pytest.raises(pytest.UsageError, match="never touches the database"):
        suites.neutral_reason(FakeItem("tests/webapp/test_x.py", marks=mark("backend_neutral", reason="r")))


def test_a_postgresql_only_test_runs_in_the_services_suite_only():
    only = {**mark("django_db"), **mark("postgresql_only", reason="COPY")}
    assert suites_of(FakeItem("tests/webapp/test_x.py", marks=only)) == ["services"]
    assert suites_of(FakeItem("tests/trainer/test_x.py", marks=only)) == ["services"]  # wherever it lives
    with pytest.raises(pytest.UsageError, match="needs a reason"):
        suites.postgresql_only_reason(FakeItem("tests/webapp/test_x.py", marks={**mark("django_db"),
                                                                                 **mark("postgresql_only")}))
    with pytest.raises(pytest.UsageError, match="remove @pytest.mark.backend_neutral"):
        suites.postgresql_only_reason(FakeItem("tests/webapp/test_x.py", marks={
            **only, **mark("backend_neutral", reason="r")}))


class FakeConfig:
    rootpath = ROOT

    def __init__(self):
        self.deselected: list = []
        self.hook = self

    def pytest_deselected(self, items):
        self.deselected += items


class MarkableItem(FakeItem):
    def add_marker(self, marker):
        self.marks[marker.name] = marker.mark


def select(suite: str, vendor: str, monkeypatch) -> tuple[list, FakeConfig, MarkableItem]:
    monkeypatch.setenv(suites.SUITE_ENV, suite)
    item = MarkableItem("tests/webapp/test_x.py", marks={**mark("django_db"), **mark("postgresql_only", reason="COPY")})
    items, config = [item], FakeConfig()
    suites.select(config, items, database_vendor=vendor)
    return items, config, item


def test_a_postgresql_only_test_is_never_skipped_in_ci(monkeypatch):
    with pytest.raises(pytest.UsageError, match="set DATABASE_URL to a PostgreSQL database"):
        select("services", "sqlite", monkeypatch)  # a misconfigured services suite fails, loudly
    items, _, item = select("services", "postgresql", monkeypatch)
    assert items == [item] and "skip" not in item.marks
    items, config, _ = select("embedded", "sqlite", monkeypatch)  # not the embedded suite's: deselected
    assert items == [] and len(config.deselected) == 1


def test_a_postgresql_only_test_is_skipped_with_its_reason_only_by_a_plain_make_test_on_sqlite(monkeypatch):
    items, _, item = select("", "sqlite", monkeypatch)
    assert items == [item] and item.marks["skip"].kwargs["reason"] == "needs PostgreSQL: COPY"
    _, _, item = select("", "postgresql", monkeypatch)
    assert "skip" not in item.marks
