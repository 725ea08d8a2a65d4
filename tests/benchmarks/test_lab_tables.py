"""benchmarks/lab_tables.py at a tiny size: the seeding gives the user the runs of their projects only,
and every request of the table is measured (the baseline revision's subprocess is not run here)."""

import pytest

from benchmarks.lab_tables import measure_all, seed_runs
from webapp.runs.models import Run
from webapp.runs.selectors import run_list_for_user

pytestmark = pytest.mark.django_db


def test_seeding_and_one_measurement_give_every_request_numbers(make_user):
    user = make_user("bench")
    seeded = seed_runs(user, runs=60, projects=5, user_projects=2, other_users=4, members=3)
    assert seeded == {"projects": True, "project": "lab-00", "runs": 60, "visible": 24}
    assert Run.objects.count() == 60
    assert run_list_for_user(user).count() == 24
    assert set(run_list_for_user(user).values_list("project__name", flat=True)) == {"lab-00", "lab-01"}
    # Owners are spread over each project's members, the user among them.
    assert Run.objects.filter(project__name="lab-00").values("owner").distinct().count() == 4

    measured = measure_all(user, seeded, repeat=2)
    assert measured["visible"] == 24
    assert list(measured["results"]) == [
        "table: page 1", "table: sorted -best_reward, page 1-20", "table: search 'ablation'",
        "table: search project:lab-00", "table: switcher ?project=lab-00", "API: GET /api/runs/",
        "API: GET /api/runs/?project=lab-00"]
    for name, figures in measured["results"].items():
        p50, p95 = figures
        assert 0 < p50 <= p95, name
