"""trainer/policy/lora.py `train_mode_dropout`: whether a training pass differs from an eval pass,
which decides where the update takes its per-token details (tests/trainer/policy/test_token_details.py)."""

from __future__ import annotations

import doctest

import pytest

pytestmark = pytest.mark.usefixtures("torch_setup")


def test_the_modules_examples_hold():
    import trainer.policy.lora as lora

    result = doctest.testmod(lora)
    assert result.attempted >= 1 and result.failed == 0


@pytest.mark.parametrize("dropout", [0.0, 0.05, 0.5])
def test_the_lora_dropout_is_the_models(tiny_model_path, dropout):
    from trainer.policy import load_policy_model
    from trainer.policy.lora import train_mode_dropout

    model, _ = load_policy_model(tiny_model_path, dropout=dropout)
    assert train_mode_dropout(model) == dropout  # the tiny Llama's own attention_dropout is 0


def test_a_configs_functional_dropout_counts(tiny_model_path):
    """Llama and Qwen apply `attention_dropout` in train mode without a dropout module."""
    from trainer.policy import load_policy_model
    from trainer.policy.lora import train_mode_dropout

    model, _ = load_policy_model(tiny_model_path, dropout=0.0)
    model.get_base_model().config.attention_dropout = 0.1
    assert train_mode_dropout(model) == 0.1
