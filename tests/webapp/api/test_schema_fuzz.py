"""The read API fuzzed against its own OpenAPI schema (issue 25, item 4): schemathesis generates
valid and invalid requests for every operation the schema publishes and sends them, with a real
personal token, to the real ASGI app served by daphne over HTTP. Every answer must be no 5xx, a
status the schema lists, and a body that matches the schema (all of schemathesis's checks).

Path parameters are drawn half the time from a run the token's owner has (with stored steps), so the
200 answers are checked too, not only the 404s of random ids. Bounded: 200 examples per operation."""

from __future__ import annotations

from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.api.services import token_create
from webapp.runs.catalog import catalog_sync
from webapp.runs.models import Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EXAMPLES_PER_OPERATION = 200


@pytest.fixture
def fuzz_world(asgi_server, make_user):
    catalog_sync()  # the built-in programs and their tasks, so run creation has a task to name
    owner = make_user("fuzz-owner")
    run = make_run(owner, state=Run.State.RUNNING, name="fuzzed", config={"strategy": "mmgrpo"}, tags=["x"])
    ingest(run, [hover_step_event(1), hover_step_event(2, seed=1)])
    other = make_run(make_user("fuzz-stranger"), state=Run.State.SUCCEEDED, name="not-yours")
    _, key = token_create(user=owner, name="schemathesis")
    return {"url": asgi_server, "headers": {"Authorization": f"Bearer {key}"}, "run": run.pk,
            "other": other.pk}


def case_strategy(operation, world):
    """Valid requests (random ids, and the owner's run at a stored step and a missing one, and another
    user's run) and invalid ones, in one strategy."""
    from schemathesis.generation.modes import GenerationMode

    path_names = {p.name for p in operation.path_parameters}
    real = []
    if "run_id" in path_names:
        steps = [{"step": s} for s in (1, 2, 3)] if "step" in path_names else [{}]
        real = [{"run_id": run, **step} for run in (world["run"], world["other"]) for step in steps]
    valid = [operation.as_strategy(GenerationMode.POSITIVE),
             *[operation.as_strategy(GenerationMode.POSITIVE, path_parameters=p) for p in real]]
    if operation.method.upper() == "POST":  # bodies that name the real task, so some runs are created
        launches = st.fixed_dictionaries({"task": st.just("toy"), "config": st.fixed_dictionaries({
            "steps": st.integers(1, 5), "group_size": st.integers(2, 4)}).map(
            lambda c: {**c, "rollouts_per_example": c["group_size"]})})
        valid.append(launches.flatmap(lambda body: operation.as_strategy(GenerationMode.POSITIVE, body=body)))
    invalid = [operation.as_strategy(GenerationMode.NEGATIVE),  # invalid parameters on the owner's run too
               *[operation.as_strategy(GenerationMode.NEGATIVE, path_parameters=p) for p in real[:1]]]
    return st.one_of(*[v.filter(in_order) for v in valid], *invalid)


def in_order(case) -> bool:
    """The one rule OpenAPI cannot state (its description does): `from_step` not after `to_step`."""
    query = case.query or {}
    try:
        return int(query["from_step"]) <= int(query["to_step"])
    except (KeyError, TypeError, ValueError):
        return True


def fuzz_operation(operation, world, sent: list[int]) -> None:
    """Sends EXAMPLES_PER_OPERATION generated requests to one operation, validating each answer.
    Run creation is valid only for a task that exists and within the owner's limits, which no schema
    states, so a schema-valid body may be refused there (every other check still applies)."""
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    excluded = [positive_data_acceptance] if operation.method.upper() == "POST" else []

    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=case_strategy(operation, world))
    def fuzz(case):
        response = case.call_and_validate(headers=world["headers"], excluded_checks=excluded)
        sent.append(response.status_code)
        if (case.path_parameters or {}).get("run_id") == world["other"]:
            assert response.status_code in (400, 404), "another user's run must be a 404"

    fuzz()


def test_the_api_answers_every_request_as_its_schema_says(fuzz_world):
    api_schema = schemathesis.openapi.from_url(f"{fuzz_world['url']}/api/schema/", headers=fuzz_world["headers"])
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert {op.label for op in operations} == {
        "GET /api/runs/", "POST /api/runs/", "GET /api/runs/{run_id}/", "GET /api/runs/{run_id}/metrics/",
        "GET /api/runs/{run_id}/adapter/", "GET /api/runs/{run_id}/steps/{step}/rollouts/",
        "GET /api/runs/{run_id}/steps/{step}/groups/"}
    statuses: dict[str, list[int]] = {}
    for operation in operations:
        fuzz_operation(operation, fuzz_world, statuses.setdefault(operation.label, []))
    print({label: dict(Counter(codes)) for label, codes in statuses.items()}, sum(map(len, statuses.values())))
    everything = [code for codes in statuses.values() for code in codes]
    assert not [code for code in everything if code >= 500]
    # the fuzz reached the runs themselves, not only refusals
    for label, codes in statuses.items():
        if label == "GET /api/runs/{run_id}/adapter/":  # no run here trained one (test_launch.py downloads one)
            assert set(codes) <= {400, 404}, set(codes)
            continue
        assert {200, 201} & set(codes) and {400, 404} & set(codes), (label, set(codes))
        assert len(codes) >= EXAMPLES_PER_OPERATION // 2, label
