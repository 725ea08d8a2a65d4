import math

import pytest

from trainer.policy.logprobs import effective_sample_share
from trainer.run.pipeline import StepTimes, sync_pipeline_metrics


def test_a_synchronous_step_waits_on_each_side_for_the_other():
    metrics = sync_pipeline_metrics(StepTimes(step_s=4.0, sampling_s=3.0, adapter_sync_s=0.25))
    assert metrics["pipeline/trainer_wait_share"] == 0.75  # 3 s of the 4 with nothing to train
    assert metrics["pipeline/sampler_wait_share"] == 0.25
    assert metrics["pipeline/adapter_sync_s"] == 0.25
    assert metrics["pipeline/staleness/max"] == metrics["pipeline/dropped_stale"] == metrics["pipeline/queue_depth"] == 0


def test_staleness_is_how_many_updates_the_sampling_weights_lag_behind():
    metrics = sync_pipeline_metrics(StepTimes(1.0, 0.5), sampled_by=[3, 3, 2, None], trainer_version=3)
    assert metrics["pipeline/staleness/mean"] == 1 / 3 and metrics["pipeline/staleness/max"] == 1.0
    unrecorded = sync_pipeline_metrics(StepTimes(1.0, 0.5), sampled_by=[None], trainer_version=3)
    assert unrecorded["pipeline/staleness/max"] == 0.0


@pytest.mark.parametrize(("step_s", "sampling_s", "trainer", "sampler"), [
    (0.0, 0.0, 0.0, 0.0),  # too short to time: nobody waited
    (2.0, 5.0, 1.0, 0.0),  # clock noise past the step's end is the whole step, never a share above 1
    (2.0, -1.0, 0.0, 1.0),
])
def test_the_shares_stay_between_0_and_1(step_s, sampling_s, trainer, sampler):
    metrics = sync_pipeline_metrics(StepTimes(step_s=step_s, sampling_s=sampling_s))
    assert (metrics["pipeline/trainer_wait_share"], metrics["pipeline/sampler_wait_share"]) == (trainer, sampler)


def test_the_effective_sample_share_of_the_worked_examples():
    assert effective_sample_share(2.0, 2.0, 2) == 1.0  # weights (1, 1)
    assert effective_sample_share(2.0, 4.0, 2) == 0.5  # weights (2, 0)
    assert math.isnan(effective_sample_share(0.0, 0.0, 0))
