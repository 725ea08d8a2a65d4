"""benchmarks/lab_load.py end to end at a tiny size on the embedded defaults (a throwaway stack on
SQLite, its own Celery worker and Redis): 3 SDK runs x 3 steps x 8 rollouts, one Cohort toy run on
the worker, 2 viewers (one on an SDK run, one on the Cohort run). Its JSON report has every figure
and accounts for every step: none lost, none stored twice."""

import doctest
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import benchmarks.lab_load
import benchmarks.lab_load_clients
import benchmarks.lab_load_report

ROOT = Path(__file__).resolve().parents[2]
SDK_RUNS, STEPS, ROLLOUTS = 3, 3, 8


def test_doctests():
    for module in (benchmarks.lab_load, benchmarks.lab_load_clients, benchmarks.lab_load_report):
        assert doctest.testmod(module).failed == 0, module.__name__


@pytest.mark.slow
def test_a_tiny_lab_load_stores_every_step_once_and_reports_every_figure(tmp_path):
    out = tmp_path / "lab-load.json"
    # The embedded defaults whatever the test run uses: the benchmark starts its own stack.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    done = subprocess.run(
        [sys.executable, "benchmarks/lab_load.py", "--runs", str(SDK_RUNS), "--steps", str(STEPS), "--rollouts",
         str(ROLLOUTS), "--group", "4", "--cohort-runs", "1", "--viewers", "2", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert "verdict       OK" in done.stdout and report["failures"] == []

    assert set(report) == {"settings", "server", "machine", "stored", "step_post_ms", "answers", "lost_steps",
                           "notices", "ingest_lag_ms", "pages_ms", "definitions", "failures"}
    assert "SQLite" in report["server"]
    stored = report["stored"]
    assert stored["sdk"]["steps"] == SDK_RUNS * STEPS and stored["sdk"]["rollouts"] == SDK_RUNS * STEPS * ROLLOUTS
    assert stored["cohort"]["steps"] == STEPS  # held at the step gate until the release: all in the window
    assert stored["all"]["steps_per_s"] > 0 and stored["all"]["rollouts_per_s"] > 0 and stored["window_s"] > 0

    posts = report["step_post_ms"]
    assert posts["count"] >= SDK_RUNS and 0 < posts["p50"] <= posts["p95"] <= posts["p99"] <= posts["max"]
    assert set(report["answers"]) == {"requests", "5xx", "429", "503", "no_answer"}
    assert report["answers"]["5xx"] == {} and report["answers"]["no_answer"] == {}

    lost = report["lost_steps"]
    assert lost["lost"] == 0 and lost["duplicates"] == 0
    runs = lost["by_run"].values()
    assert sorted(r["kind"] for r in runs) == ["cohort"] + ["sdk"] * SDK_RUNS
    for run in runs:
        assert run["logged"] == run["stored"] == STEPS and run["state"] == "succeeded", run
        if run["kind"] == "sdk":
            assert run["rollouts_logged"] == run["rollouts_stored"] == STEPS * ROLLOUTS

    notices = report["notices"]
    assert notices["viewers"] == 2 and len(notices["viewed_runs"]) == 2
    # Every stored step of a viewed run is either received or counted lost, by each of its viewers.
    assert notices["received"] + notices["lost"] == 2 * STEPS
    assert notices["delay_ms"]["count"] == notices["received"] and notices["delay_ms"]["p95"] is not None

    assert report["ingest_lag_ms"]["count"] == STEPS and report["ingest_lag_ms"]["p95"] is not None
    for kind in ("/runs/<id>/", "/runs/"):
        page = report["pages_ms"][kind]
        assert page["count"] > 0 and page["errors"] == 0 and page["p95"] is not None
