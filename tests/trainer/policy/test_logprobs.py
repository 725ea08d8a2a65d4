"""Memory-lean log-probs (trainer/policy/logprobs.py): chunked, equal to the plain full-logits computation,
in values and gradients; gradient checkpointing changes neither loss nor gradients."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_setup")

EXAMPLES = [
    ("Question: say yes", " yes", 1.2),
    ("Question: what is the capital of France?", " Paris is the capital.", -0.8),
    ("Repeat: apple", " apple", 0.4),
]


def assert_close_tensors(got, expected, rel=1e-5):
    """Equal up to float32 summation order: relative to the whole tensor's size (element-wise
    tolerances fail on gradients with entries in the hundreds next to entries near 0)."""
    assert float((got - expected).norm()) <= rel * float(expected.norm()) + 1e-6


def full_logits_logprobs(model, batch, temperature):
    """The textbook computation: every logit, float32, log-softmax, gather. (B, C), masked."""
    import torch

    width = batch.completion_ids.shape[1]
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                   use_cache=False).logits[:, -width - 1:-1].float() / temperature
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    return chosen * batch.completion_mask


@pytest.mark.parametrize("chunk_elements", [1, 4096, 2**24], ids=["one-position-chunks", "small-chunks", "one-chunk"])
def test_chunked_logprobs_and_gradients_equal_the_full_logits_ones(policy, chunk_elements):
    import torch

    from trainer.policy.batching import tokenize_examples
    from trainer.policy.logprobs import sequence_logprobs

    model, tok = policy
    batch = tokenize_examples(tok, EXAMPLES, max_context_length=64)
    model.train()  # LoRA dropout: both passes must draw the same masks
    lora = [p for n, p in model.named_parameters() if "lora_" in n]

    def run(compute):
        torch.manual_seed(0)
        values = compute()
        grads = torch.autograd.grad((values * torch.arange(values.numel()).view_as(values)).sum(), lora)
        return values.detach(), grads

    expected, expected_grads = run(lambda: full_logits_logprobs(model, batch, 0.7))
    got, got_grads = run(lambda: sequence_logprobs(model, batch, temperature=0.7, chunk_elements=chunk_elements))
    assert torch.allclose(got, expected, atol=1e-5)
    assert (got[batch.completion_mask == 0] == 0).all()  # padding is skipped, not junk
    for a, b in zip(got_grads, expected_grads, strict=True):
        assert_close_tensors(a, b)


@pytest.mark.filterwarnings(r"ignore:Seems like `optimizer.step\(\)` has been overridden")
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny_model_path):

    from trainer.policy import PolicyUpdater, UpdateConfig, load_policy_model

    def one_update(checkpointing: bool):
        model, tok = load_policy_model(tiny_model_path, gradient_checkpointing=checkpointing, seed=0)
        assert model.get_base_model().is_gradient_checkpointing is checkpointing
        updater = PolicyUpdater(model, tok, UpdateConfig(learning_rate=1e-2, beta=0.04, max_grad_norm=None))
        captured = {}
        original_step = updater.optimizer.step

        def step_capturing_gradients(*args, **kwargs):
            captured.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
            return original_step(*args, **kwargs)

        updater.optimizer.step = step_capturing_gradients
        return updater.update(EXAMPLES), captured

    plain_stats, plain_grads = one_update(False)
    checkpointed_stats, checkpointed_grads = one_update(True)
    assert checkpointed_stats["loss"] == pytest.approx(plain_stats["loss"], abs=1e-5)
    assert checkpointed_grads.keys() == plain_grads.keys() and plain_grads  # every LoRA parameter, no other
    assert all("lora_" in name for name in plain_grads)
    for name, grad in plain_grads.items():
        assert_close_tensors(checkpointed_grads[name], grad)


def test_the_kl_reference_is_the_same_weights_with_the_adapter_disabled(policy):
    """No second model copy: the reference pass toggles the adapter off on the one model."""
    import torch

    from trainer.policy import PolicyUpdater, UpdateConfig
    from trainer.policy.batching import tokenize_examples
    from trainer.policy.logprobs import sequence_logprobs

    model, tok = policy
    updater = PolicyUpdater(model, tok, UpdateConfig(beta=0.04))
    assert [m for m in vars(updater).values() if isinstance(m, torch.nn.Module)] == [model]
    batch = tokenize_examples(tok, EXAMPLES, max_context_length=64)
    model.eval()
    with torch.no_grad():
        for p in (p for n, p in model.named_parameters() if "lora_B" in n):
            p.add_(0.05)  # the adapter now changes the output
        with model.disable_adapter():
            reference = sequence_logprobs(model, batch)
            base = full_logits_logprobs(model, batch, 1.0)
        adapted = sequence_logprobs(model, batch)
    assert torch.allclose(reference, base, atol=1e-5)
    assert not torch.allclose(reference, adapted, atol=1e-3)
