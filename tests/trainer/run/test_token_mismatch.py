"""The step's sampler / trainer mismatch, three ways, on the tiny model with the default LoRA dropout
(0.05) through the Trainer: `mismatch/abs_logprob_diff` (the update's mean), `tokens/mismatch/...`
(trainer/algorithms/token_metrics.py) and the calls' stored per-token gaps measure the same thing,
the HF sampler against the trainer without dropout, from step 2 on too (once the adapter is not zero
and dropout would show). Taken from a training pass with dropout, the per-token gaps were 0.15 nats
at most and 0.035 on average here while the step's mean said 1e-6."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainer.run.test_loop import ListReporter, toy_config

pytestmark = pytest.mark.usefixtures("torch_setup")


def stored_gaps(event) -> np.ndarray:
    """|sampler - trainer| of every token of the step's calls, as stored (rounded to 4 decimals)."""
    gaps, seen = [], set()
    for rollout in event["rollouts"]:
        for call in rollout["calls"]:
            if call["call_id"] in seen:
                continue
            seen.add(call["call_id"])
            tokens = call["tokens"]
            gaps += [abs(s - t) for s, t in zip(tokens["sampler"], tokens["trainer"], strict=True)
                     if s is not None and t is not None]
    return np.asarray(gaps)


def test_with_the_default_lora_dropout_the_step_and_its_tokens_report_the_same_mismatch(tmp_path):
    from trainer.run.loop import Trainer

    config = toy_config(steps=3, checkpoint_every=0, micro_batch_size=4)  # 4 micro-batches a step
    assert config.lora_dropout == 0.05 and config.backend == "hf"
    reporter = ListReporter()
    trainer = Trainer(config, tmp_path / "run", reporter, model_cache_dir=tmp_path / "models")
    assert trainer.run() == "succeeded"
    assert len(reporter.events) == 3
    for event in reporter.events:
        metrics, gaps = event["metrics"], stored_gaps(event)
        assert gaps.size == 48  # every completion token of the step's 16 calls
        mean = metrics["mismatch/abs_logprob_diff"]
        assert 0 <= mean < 1e-4  # the HF sampler is this policy in eval mode: float noise only
        assert gaps.mean() == pytest.approx(mean, abs=1e-4)  # (the stored values are rounded to 1e-4)
        assert metrics["tokens/mismatch/share"] == 0.0
        assert mean <= metrics["tokens/mismatch/max"] < 1e-3
    assert trainer.parts.updater.train_dropout == 0.05  # so the details came from an eval pass of their own
