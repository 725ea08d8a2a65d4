"""benchmarks/examples_compare.py at a tiny size: the bulk seeding stores what the readers read (rollouts,
calls, texts, step rows), and one measurement of every reader gives numbers (the paper scale is the
benchmark's own run)."""

import pytest

from benchmarks import examples_compare as bench
from webapp.runs.examples.partways import partways
from webapp.runs.models import CallText, ModuleCall, Rollout, StepMetric

pytestmark = pytest.mark.django_db


def test_seeding_and_one_measurement_of_every_reader(monkeypatch):
    monkeypatch.setattr(bench, "DATASET", 20)  # 6 steps of 12 examples: each drawn about 3 times
    user, a, b = bench.seed_pair(6, others=1)
    per_run = 6 * bench.EXAMPLES_PER_STEP * bench.ROLLOUTS
    assert Rollout.objects.filter(run=a).count() == per_run == Rollout.objects.filter(run=b).count()
    assert ModuleCall.objects.filter(rollout__run=a).count() == per_run * len(bench.MODULES)
    assert CallText.objects.filter(run=a).count() == 6 * bench.EXAMPLES_PER_STEP
    assert StepMetric.objects.filter(run=b).count() == 6
    table = partways([a], [b])
    assert table.solved == {a.pk: 2.0, b.pk: 2.0} and table.rows
    assert sum(table.counts.values()) == len(table.rows) == len({r.example_id for r in table.rows})

    results = bench.run_all(user, a, b, repeat=2)
    assert list(results)[:2] == ["baseline: SELECT count(*) of both runs' rollouts",
                                 "part-ways: partways([A], [B]), the ranked table"]
    assert any(name.startswith("across:") for name in results)
    assert list(results)[-2:] == ["page: GET /runs/examples/partways", "API: GET /api/examples/diff/ (first page)"]
    for name, (p50, p95) in results.items():
        assert 0 < p50 <= p95, name
    bench.report(results)
