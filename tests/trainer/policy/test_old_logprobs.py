"""The trainer owns the old log-probs; the sampler's are a check (importance sampling, mismatch)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_setup")

PROMPTS = ["Question: say yes", "Repeat: apple"]


class PerturbedBackend:
    """The HF sampler, reporting its log-probs shifted by `shift` nats: a sampler whose policy
    disagrees with the trainer's (as vLLM's bf16 kernels or its top-p truncation would)."""

    name = "perturbed"

    def __init__(self, inner, shift: float):
        self.inner, self.shift = inner, shift

    def generate(self, prompts, n, **kwargs):
        from dataclasses import replace

        return [[replace(s, logprobs=[lp + self.shift for lp in s.logprobs]) for s in group]
                for group in self.inner.generate(prompts, n, **kwargs)]


def sampled_examples(model, tok, *, shift: float = 0.0):
    """Two prompts x 3 samples as policy examples carrying the sampler's (shifted) log-probs."""
    from trainer.backends import get_backend
    from trainer.policy import PolicyExample

    backend = PerturbedBackend(get_backend("hf", model=model, tokenizer=tok), shift)
    groups = backend.generate(PROMPTS, 3, temperature=1.0, max_new_tokens=6, seed=3)
    advantages = [1.0, 0.5, 0.25]  # a mean far from 0: the loss is far from 0
    return [PolicyExample(p, s.text, a, completion_ids=s.token_ids, sampler_logprobs=s.logprobs)
            for p, group in zip(PROMPTS, groups, strict=True) for s, a in zip(group, advantages, strict=True)]


def test_old_logprobs_are_an_eval_forward_of_the_same_weights_so_the_first_ratio_is_one(tiny_model_path):
    from trainer.policy import PolicyUpdater, UpdateConfig, load_policy_model

    model, tok = load_policy_model(tiny_model_path, dropout=0.0)
    # The sampler's log-probs are 1 nat off: they must not be the ratio's denominator.
    examples = sampled_examples(model, tok, shift=-1.0)
    stats = PolicyUpdater(model, tok, UpdateConfig(learning_rate=1e-3)).update(examples)
    assert stats["ratio"] == pytest.approx(1.0, abs=1e-6)
    assert stats["clip_fraction"] == 0.0


@pytest.mark.parametrize(("iterations", "sampler_is_policy", "passes"), [
    # TRL's rule: the training pass's own log-probs, detached, are the old ones; the mismatch
    # diagnostic takes one micro-batch (of 3) through an eval pass.
    (1, True, 3 + 1),
    (2, True, 3 + 3 + 3),   # an eval pass first, then two training passes against it
    (1, False, 3 + 3),      # another engine's log-probs: an eval pass for the importance-sampling weight
])
def test_the_old_logprob_pass_runs_only_where_it_can_differ_from_the_training_pass(
        tiny_model_path, monkeypatch, iterations, sampler_is_policy, passes):
    import trainer.policy.updater as policy  # where the update calls it
    from trainer.policy import PolicyUpdater, UpdateConfig, load_policy_model

    model, tok = load_policy_model(tiny_model_path)  # LoRA dropout 0.05 in the training passes
    examples = sampled_examples(model, tok)
    calls = []
    real = policy.sequence_logprobs
    monkeypatch.setattr(policy, "sequence_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k))
    config = UpdateConfig(num_iterations=iterations, sampler_is_policy=sampler_is_policy, micro_batch_size=2)
    stats = PolicyUpdater(model, tok, config).update(examples)
    assert len(calls) == passes
    if iterations == 1 and sampler_is_policy:
        assert stats["ratio"] == 1.0  # exactly, dropout or not
        assert "is_weight/mean" not in stats and stats["mismatch/abs_logprob_diff"] < 1e-4


def test_old_logprobs_equal_a_plain_no_grad_forward(policy):
    import torch

    from tests.trainer.policy.test_logprobs import full_logits_logprobs
    from trainer.policy import PolicyUpdater, UpdateConfig
    from trainer.policy.batching import tokenize_examples

    model, tok = policy
    examples = sampled_examples(model, tok)
    updater = PolicyUpdater(model, tok, UpdateConfig(temperature=0.8))
    batch = tokenize_examples(tok, examples, max_context_length=128)
    model.train()  # the updater must switch to eval itself
    (old,), _ = updater._frozen_logprobs([batch])
    model.eval()
    with torch.no_grad():
        expected = full_logits_logprobs(model, batch, 0.8)
    assert torch.allclose(old, expected, atol=1e-5)


def test_the_importance_weight_is_one_when_sampler_and_trainer_agree(policy):
    from trainer.policy import PolicyUpdater, UpdateConfig

    model, tok = policy
    stats = PolicyUpdater(model, tok, UpdateConfig()).update(sampled_examples(model, tok))
    assert stats["is_weight/mean"] == pytest.approx(1.0, abs=1e-4)
    assert stats["mismatch/abs_logprob_diff"] < 1e-4 and 0 <= stats["mismatch/kl"] < 1e-6
    assert stats["is_weight/capped_share"] == 0.0
    assert stats["is_weight/max"] == pytest.approx(1.0, abs=1e-4) and stats["is_weight/ess_share"] == pytest.approx(1.0)


@pytest.mark.parametrize("correction", [True, False], ids=["corrected", "uncorrected"])
def test_the_importance_weight_is_capped_when_the_sampler_disagrees(tiny_model_path, correction):
    """The sampler says every token was 3 nats less likely than the trainer finds it: the weight
    exp(3) = 20 is truncated to the cap; the loss is the capped multiple of the uncorrected one."""
    from trainer.policy import PolicyUpdater, UpdateConfig, load_policy_model

    losses = {}
    for shift in (0.0, -3.0):
        model, tok = load_policy_model(tiny_model_path, dropout=0.0)
        config = UpdateConfig(importance_sampling_correction=correction, importance_sampling_cap=2.0)
        stats = PolicyUpdater(model, tok, config).update(sampled_examples(model, tok, shift=shift))
        losses[shift] = stats["loss"]
    assert stats["mismatch/abs_logprob_diff"] == pytest.approx(3.0, abs=1e-3)
    assert stats["mismatch/kl"] == pytest.approx(math.exp(3) - 3 - 1, rel=1e-3)  # k3 of log r = 3
    if correction:
        assert stats["is_weight/capped_share"] == 1.0 and stats["is_weight/mean"] == pytest.approx(2.0)
        # Every token carries the same (capped) weight: the largest is the cap, and no token outweighs another.
        assert stats["is_weight/max"] == pytest.approx(2.0) and stats["is_weight/ess_share"] == pytest.approx(1.0)
    else:
        assert "is_weight/mean" not in stats  # measured, not corrected
    assert losses[-3.0] == pytest.approx(losses[0.0] * (2.0 if correction else 1.0), rel=1e-5)


def test_dr_grpo_divides_by_max_new_tokens(tiny_model_path, tmp_path):
    """Dr. GRPO's constant is the generation budget, not the batch's longest completion."""
    from trainer.config import RunConfig
    from trainer.policy import PolicyUpdater, UpdateConfig, load_policy_model
    from trainer.run.loop import Trainer

    losses = {}
    for constant in (10, 40):
        model, tok = load_policy_model(tiny_model_path, dropout=0.0)
        updater = PolicyUpdater(model, tok, UpdateConfig(aggregation="dr_grpo", dr_grpo_max_len=constant))
        losses[constant] = updater.update(sampled_examples(model, tok))["loss"]
    assert losses[40] == pytest.approx(losses[10] / 4, rel=1e-5)

    class Quiet:
        def status(self, *a, **k): ...
        def step(self, event): ...
        def should_stop(self): return False

    config = RunConfig(program="toy", steps=1, group_size=2, rollouts_per_example=2, max_new_tokens=7,
                       max_context_length=64, loss_aggregation="dr_grpo")
    trainer = Trainer(config, tmp_path / "run", Quiet(), model_cache_dir=tmp_path / "models")
    assert trainer.parts.updater.config.dr_grpo_max_len == 7


def test_a_step_with_the_hf_sampler_reports_a_near_zero_mismatch(tmp_path):
    """The HF sampler is the training model itself: what the run page's mismatch chart shows for it."""
    from tests.trainer.rollouts.test_prompts import Events, toy_config
    from trainer.run.loop import Trainer

    events = Events()
    Trainer(toy_config(), tmp_path / "run", events, model_cache_dir=tmp_path / "models").run()
    metrics = events.steps[0]["metrics"]
    assert 0 <= metrics["mismatch/abs_logprob_diff"] < 1e-4 and 0 <= metrics["mismatch/kl"] < 1e-6
    assert "is_weight/mean" not in metrics  # the sampler is the policy: nothing to correct
