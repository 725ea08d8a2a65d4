"""A sweep's trials go where its base launch goes: every run of it is placed on the sweep's partition with
its time limit, checked against Slurm as a run's launch is."""

import pytest

from tests.webapp.runs.factories import make_task
from tests.workers.test_run_train import toy_config
from webapp.runs.launch.check import LaunchRefused, launch_check
from webapp.runs.models import Run
from webapp.sweeps.plan import SweepSpec
from webapp.sweeps.services import sweep_create

pytestmark = pytest.mark.django_db


def test_every_trial_run_of_a_sweep_on_a_partition_is_placed_there(slurm_site, owner):
    base = launch_check(owner, task=make_task(), values=toy_config().to_dict(), partition="cpu", time_limit=15)
    sweep = sweep_create(base, spec=SweepSpec(space={"learning_rate": [1e-4, 1e-3]}, method="grid", n_trials=2,
                                              parallel=2))
    assert (sweep.partition, sweep.time_limit_min) == ("cpu", 15)
    runs = Run.objects.filter(sweep_member__trial__sweep=sweep)
    assert runs.count() == 2
    assert {(r.partition, r.time_limit_min, r.state) for r in runs} == {("cpu", 15, Run.State.QUEUED)}


def test_a_sweep_over_its_partitions_time_limit_is_refused_before_anything_is_queued(slurm_site, owner):
    with pytest.raises(LaunchRefused) as refused:
        launch_check(owner, task=make_task(), values=toy_config().to_dict(), partition="gpu", time_limit=31)
    assert "over partition gpu's limit (sinfo) of 30 minutes" in refused.value.errors["time_limit"][0]
    assert not Run.objects.exists()
