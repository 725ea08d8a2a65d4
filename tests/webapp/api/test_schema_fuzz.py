"""The API fuzzed by schemathesis's own runner, as an attacker would run it (issues 25 and 35): the
`schemathesis run` command line with all its phases (examples, coverage, fuzzing, and the stateful
phase, which follows the links it infers: create a run -> the run -> its metrics, steps, rollouts,
groups and adapter) and every check, against the real ASGI app served by daphne over HTTP, with a
real personal token, as an ordinary user and as staff.

Bounded and deterministic: a fixed seed and number of cases per operation (schemathesis.template.toml
beside this file), one request at a time, so CI replays the same cases; `make flake-hunt` sets
COHORT_FUZZ_SEED to a new seed each run."""

from __future__ import annotations

import json
import os
import re
import string
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.api.services import token_create
from webapp.limits.models import LimitOverride
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.ingest.external import external_run_start, external_steps_log
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SEED = int(os.environ.get("COHORT_FUZZ_SEED", "35"))
EXAMPLES_PER_OPERATION = 40
# The viewer's read-only token: every write is refused before its body is read, so half as many cases
# reach as much of the API (its reads are the owner's run's, fuzzed in full above).
VIEWER_EXAMPLES_PER_OPERATION = 20
CONFIG_TEMPLATE = Path(__file__).with_name("schemathesis.template.toml")
OPERATIONS = {  # path label -> the path of a concrete URL, to count the answers each operation got
    "/api/external/runs/": re.compile(r"/api/external/runs/$"),
    "/api/runs/{run_id}/steps/": re.compile(r"/api/runs/[^/]+/steps/$"),
    "/api/runs/{run_id}/finish/": re.compile(r"/api/runs/[^/]+/finish/$"),
    "/api/runs/{run_id}/steps/{step}/rollouts/": re.compile(r"/api/runs/[^/]+/steps/[^/]+/rollouts/$"),
    "/api/runs/{run_id}/steps/{step}/groups/": re.compile(r"/api/runs/[^/]+/steps/[^/]+/groups/$"),
    "/api/runs/{run_id}/metrics/": re.compile(r"/api/runs/[^/]+/metrics/$"),
    "/api/runs/{run_id}/adapter/": re.compile(r"/api/runs/[^/]+/adapter/$"),
    "/api/runs/{run_id}/": re.compile(r"/api/runs/[^/]+/$"),
    "/api/runs/": re.compile(r"/api/runs/$"),
    "/api/sweeps/{sweep_id}/": re.compile(r"/api/sweeps/[^/]+/$"),
    "/api/sweeps/": re.compile(r"/api/sweeps/$"),
}


@pytest.fixture
def fuzz_world(asgi_server, make_user):
    catalog_sync()  # the built-in programs and their tasks, so run creation has a task to name
    owner = make_user("fuzz-owner")
    staff = make_user("fuzz-staff", staff=True)
    viewer = make_user("fuzz-viewer")  # reads the owner's project, with a read-only token (issue 42)
    lab = project_create(creator=owner, name="fuzz-lab")
    member_add(lab, user=viewer, role=Role.VIEWER)
    run = make_run(owner, project=lab, state=Run.State.RUNNING, name="fuzzed", config={"strategy": "mmgrpo"},
                   tags=["x"])
    ingest(run, [hover_step_event(1), hover_step_event(2, seed=1)])
    make_run(make_user("fuzz-stranger"), state=Run.State.SUCCEEDED, name="not-yours")
    # Runs trained elsewhere (the logging API): one that takes steps, one to finish. Limits high enough
    # that run creation is refused for its data, never for how many runs the fuzz made before.
    LimitOverride.objects.create(user=owner, active_runs=100_000, queued_runs=100_000)
    external, _ = external_run_start(owner, client_id="fuzz-trl", task="toy_format", origin="trl", project=lab)
    external_steps_log(external, [{"step": 1, "metrics": {"loss": 0.5}, "rollouts": [
        {"prompt": "p", "completion": c, "rewards": {"r": r}, "group": 0} for c, r in (("a", 1.0), ("b", 0.0))]}])
    finishable, _ = external_run_start(owner, client_id="fuzz-finish", task="fuzz-elsewhere", project=lab)
    tokens = {who: token_create(user=user, name="schemathesis")[1] for who, user in (("owner", owner), ("staff", staff))}
    tokens["viewer"] = token_create(user=viewer, name="schemathesis", project=lab, can_write=False)[1]
    return {"url": asgi_server, "tokens": tokens, "run": run.pk, "external": external.pk, "finishable": finishable.pk}


def operation_of(method: str, url: str) -> str:
    """`METHOD /path/{param}/` of a request (the runner also tries methods an operation does not take)."""
    path = url.split("?", 1)[0]
    label = next((label for label, pattern in OPERATIONS.items() if pattern.search(path)), path)
    return f"{method} {label}"


def run_schemathesis(world: dict, who: str, folder: Path) -> tuple[subprocess.CompletedProcess, dict[str, Counter]]:
    """Runs `schemathesis run` with the filled-in config; returns its result and, per operation, how
    many answers of each status it got (from its HAR report)."""
    config = folder / "schemathesis.toml"
    config.write_text(string.Template(CONFIG_TEMPLATE.read_text()).substitute(
        seed=SEED, token=world["tokens"][who], run=world["run"],
        examples=VIEWER_EXAMPLES_PER_OPERATION if who == "viewer" else EXAMPLES_PER_OPERATION,
        external=world["external"], finishable=world["finishable"]))
    har = folder / "requests.har"
    command = [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(config), "run",
               f"{world['url']}/api/schema/", "--phases", "examples,coverage,fuzzing,stateful", "--checks", "all",
               "--report", "har", "--report-har-path", str(har), "--no-color"]
    # In the test's folder: the runner keeps a cache (.schemathesis/) where it runs.
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=900)
    statuses: dict[str, Counter] = {}
    if har.exists():
        for entry in json.loads(har.read_text())["log"]["entries"]:
            label = operation_of(entry["request"]["method"], entry["request"]["url"])
            statuses.setdefault(label, Counter())[entry["response"]["status"]] += 1
    return result, statuses


WRITES = ("POST /api/runs/", "POST /api/external/runs/", "POST /api/runs/{run_id}/steps/",
          "POST /api/runs/{run_id}/finish/", "POST /api/sweeps/")


def test_a_viewers_read_only_token_reads_and_never_writes(fuzz_world, tmp_path):
    """Issue 42: the same runner with a viewer's read-only token scoped to the owner's project: every check
    passes, no 5xx, no write operation answers 2xx (each a 403), and the reads reach the project's runs."""
    result, statuses = run_schemathesis(fuzz_world, "viewer", tmp_path)
    print({label: dict(counts) for label, counts in statuses.items()})
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"schemathesis (seed {SEED}) found failures:\n{output[-20000:]}"
    assert not [code for counts in statuses.values() for code in counts if code >= 500]
    for label in WRITES:
        assert statuses[label] and not [code for code in statuses[label] if 200 <= code < 300], label
        assert statuses[label][403], label
    for label in ("GET /api/runs/", "GET /api/runs/{run_id}/", "GET /api/runs/{run_id}/metrics/",
                  "GET /api/runs/{run_id}/steps/{step}/rollouts/"):
        assert statuses[label][200], label
    assert not Run.objects.filter(owner__username="fuzz-viewer").exists()


@pytest.mark.parametrize("who", ["owner", "staff"])
def test_schemathesis_full_runner_finds_no_failure(fuzz_world, tmp_path, who):
    result, statuses = run_schemathesis(fuzz_world, who, tmp_path)
    print({label: dict(counts) for label, counts in statuses.items()})
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"schemathesis (seed {SEED}) found failures:\n{output[-20000:]}"
    assert "Stateful" in output and "API Links" in output  # the stateful phase ran and followed links
    assert not [code for counts in statuses.values() for code in counts if code >= 500]
    # It reached the API's logic, not only its refusals: each operation answered with data and with a
    # 4xx, and run creation created runs that the stateful phase then read.
    for label in ("GET /api/runs/", "GET /api/runs/{run_id}/", "GET /api/runs/{run_id}/metrics/",
                  "GET /api/runs/{run_id}/steps/{step}/rollouts/", "GET /api/runs/{run_id}/steps/{step}/groups/"):
        assert statuses[label][200] and sum(n for code, n in statuses[label].items() if 400 <= code < 500), label
    assert statuses["POST /api/runs/"][201] and statuses["POST /api/runs/"][400]
    # Sweeps: launched (from the schema's example and what the fuzz makes of it), refused, and read back.
    assert statuses["POST /api/sweeps/"][201] and statuses["POST /api/sweeps/"][400]
    assert statuses["GET /api/sweeps/{sweep_id}/"][200] and statuses["GET /api/sweeps/{sweep_id}/"][404]
    # The logging API: runs created; as the owner, steps stored and a run finished, bodies refused; staff
    # see the owner's runs but log to none of them.
    assert statuses["POST /api/external/runs/"][201] and statuses["POST /api/external/runs/"][400]
    for label in ("POST /api/runs/{run_id}/steps/", "POST /api/runs/{run_id}/finish/"):
        assert statuses[label][200] and statuses[label][400] if who == "owner" else statuses[label][403], label
    assert statuses["GET /api/runs/{run_id}/adapter/"][404]  # no run here trained one (test_launch.py downloads one)
