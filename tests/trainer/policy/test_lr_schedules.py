"""Learning-rate schedules do what their name says (`lr_scheduler = "linear"` ran a constant rate),
with warmup under each, counted in optimizer steps as transformers' and TRL's schedulers count them."""

from __future__ import annotations

import pytest

from tests.trainer.run.test_loop import ListReporter, toy_config

pytestmark = pytest.mark.usefixtures("torch_setup")


def expected_rates(name: str, learning_rate: float, warmup: int, total: int) -> list[float]:
    """The rate transformers' own scheduler gives each of `total` optimizer steps."""
    import torch
    from transformers import get_scheduler

    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=learning_rate)
    scheduler = get_scheduler("constant_with_warmup" if name == "constant" else name, optimizer,
                              num_warmup_steps=warmup, num_training_steps=total)
    rates = []
    for _ in range(total):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_the_lr_metric_of_each_step_follows_transformers_scheduler(tmp_path, schedule):
    from trainer.run.loop import Trainer

    config = toy_config(steps=6, lr_scheduler=schedule, warmup_steps=2, learning_rate=1e-3, checkpoint_every=0)
    reporter = ListReporter()
    assert Trainer(config, tmp_path / "run", reporter, model_cache_dir=tmp_path / "models").run() == "succeeded"
    logged = [event["metrics"]["lr"] for event in reporter.events]
    assert logged == pytest.approx(expected_rates(schedule, 1e-3, 2, 6), rel=1e-6, abs=1e-12)
    assert logged[0] == 0.0 and logged[2] == pytest.approx(1e-3)  # the warmup, then the peak
    if schedule != "constant":
        assert logged[-1] < logged[2] / 2  # it decays
