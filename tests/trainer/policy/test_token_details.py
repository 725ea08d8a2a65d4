"""Per-token details from the log-prob pass (trainer/policy/logprobs.py `sequence_logprobs_with_details`,
trainer/policy/token_details.py, `PolicyUpdater.last_token_details`): entropies and top-k equal a direct
softmax over the full logits, chunked or not, with or without grad; the log-probs and their gradients
are today's; the details come from a pass without dropout (an eval pass's numbers, whatever
lora_dropout), the one behind the mismatch stats, with a pass of their own only where the training
pass has dropout."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.trainer.policy.test_logprobs import EXAMPLES, assert_close_tensors

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_setup")

TEMPERATURE = 0.7
CHUNKS = pytest.mark.parametrize("chunk_elements", [1, 4096, 2**24],
                                 ids=["one-position-chunks", "several-chunks", "one-chunk"])


def full_softmax(model, batch, temperature):
    """The textbook computation from every logit: (log-probs, entropy, probabilities (B, C, V))."""
    import torch

    width = batch.completion_ids.shape[1]
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                   use_cache=False).logits[:, -width - 1:-1].float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    probs = logp.exp()
    chosen = logp.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    entropy = -(probs * logp).sum(-1)
    return chosen * batch.completion_mask, entropy * batch.completion_mask, probs


def assert_details_match(batch, got, expected, topk):
    import torch

    logprobs, entropy, ids, probs = got
    want_lp, want_entropy, want_probs = expected
    keep = batch.completion_mask.bool()
    assert torch.allclose(logprobs.detach(), want_lp.detach(), atol=1e-5)
    assert torch.allclose(entropy[keep], want_entropy.detach()[keep], atol=1e-4)  # per token
    assert (entropy[~keep] == 0).all() and (ids[~keep] == 0).all()  # padding is skipped, not junk
    top_probs, top_ids = torch.topk(want_probs.detach(), topk, dim=-1)
    assert ids.shape == (*keep.shape, topk) and ids.dtype == torch.long
    assert torch.allclose(probs[keep], top_probs[keep], atol=1e-5)
    # Ids agree wherever the probabilities are not tied to float precision.
    assert (ids[keep] == top_ids[keep]).float().mean() > 0.99


@CHUNKS
def test_entropy_and_top_k_equal_a_direct_softmax_over_the_full_logits_without_grad(policy, chunk_elements):
    import torch

    from trainer.policy.batching import tokenize_examples
    from trainer.policy.logprobs import sequence_logprobs_with_details

    model, tok = policy
    batch = tokenize_examples(tok, EXAMPLES, max_context_length=64)
    model.eval()
    with torch.no_grad():
        expected = full_softmax(model, batch, TEMPERATURE)
        got = sequence_logprobs_with_details(model, batch, temperature=TEMPERATURE, chunk_elements=chunk_elements,
                                             topk=5)
    assert_details_match(batch, got, expected, 5)


@CHUNKS
def test_with_grad_the_details_match_and_the_gradients_are_todays(policy, chunk_elements):
    """Under autograd (checkpointed chunks): the same details, and the log-probs' gradients equal
    `sequence_logprobs`' (the details add nothing to the graph)."""
    import torch

    from trainer.policy.batching import tokenize_examples
    from trainer.policy.logprobs import sequence_logprobs, sequence_logprobs_with_details

    model, tok = policy
    batch = tokenize_examples(tok, EXAMPLES, max_context_length=64)
    model.train()  # LoRA dropout: each pass draws the same masks from the same seed
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    with torch.no_grad():
        for p in (p for n, p in model.named_parameters() if "lora_B" in n):
            p.add_(0.05)  # a non-zero adapter, so its gradients are not trivially shaped

    def grads_of(values):
        return torch.autograd.grad((values * torch.arange(values.numel()).view_as(values)).sum(), lora)

    torch.manual_seed(0)
    expected = full_softmax(model, batch, TEMPERATURE)
    torch.manual_seed(0)
    plain = sequence_logprobs(model, batch, temperature=TEMPERATURE, chunk_elements=chunk_elements)
    plain_grads = grads_of(plain)
    torch.manual_seed(0)
    got = sequence_logprobs_with_details(model, batch, temperature=TEMPERATURE, chunk_elements=chunk_elements, topk=3)
    assert got[0].requires_grad and not any(t.requires_grad for t in got[1:])
    assert_details_match(batch, got, expected, 3)
    assert torch.equal(got[0].detach(), plain.detach())
    for a, b in zip(grads_of(got[0]), plain_grads, strict=True):
        assert_close_tensors(a, b)


def test_the_backward_recomputation_does_not_compute_the_details_again(policy, monkeypatch):

    import trainer.policy.logprobs as logprobs
    from trainer.policy.batching import tokenize_examples

    model, tok = policy
    batch = tokenize_examples(tok, EXAMPLES, max_context_length=64)
    calls = []
    real = logprobs.token_details_from_logits
    monkeypatch.setattr(logprobs, "token_details_from_logits", lambda *a: calls.append(1) or real(*a))
    vocab = model.get_base_model().get_output_embeddings().out_features
    positions = int(batch.completion_mask.sum())
    model.train()
    values, *_ = logprobs.sequence_logprobs_with_details(model, batch, chunk_elements=4 * vocab, topk=2)
    values.sum().backward()
    assert len(calls) == -(-positions // 4) > 1  # once per chunk of 4 positions, forward only


def test_a_head_that_is_not_a_plain_linear_layer_gets_the_same_details_from_the_full_logits(policy, monkeypatch):
    import torch

    import trainer.policy.logprobs as logprobs
    from trainer.policy.batching import tokenize_examples

    model, tok = policy
    batch = tokenize_examples(tok, EXAMPLES, max_context_length=64)
    model.eval()
    with torch.no_grad():
        chunked = logprobs.sequence_logprobs_with_details(model, batch, temperature=TEMPERATURE, topk=4)
        monkeypatch.setattr(logprobs, "_head_is_plain_linear", lambda base: False)  # e.g. a soft-capped head
        full = logprobs.sequence_logprobs_with_details(model, batch, temperature=TEMPERATURE, topk=4)
        expected = full_softmax(model, batch, TEMPERATURE)
    assert_details_match(batch, full, expected, 4)
    for a, b in zip(full, chunked, strict=True):
        assert torch.allclose(a.float(), b.float(), atol=1e-5)


def test_top_k_zero_keeps_no_alternatives(policy):
    import torch

    from trainer.policy.batching import tokenize_examples
    from trainer.policy.logprobs import sequence_logprobs_with_details

    model, tok = policy
    batch = tokenize_examples(tok, EXAMPLES, max_context_length=64)
    with torch.no_grad():
        _, entropy, ids, probs = sequence_logprobs_with_details(model.eval(), batch, topk=0)
    assert ids.shape == probs.shape == (*batch.completion_mask.shape, 0)
    assert (entropy[batch.completion_mask.bool()] > 0).all()


# ---- The updater --------------------------------------------------------------------------------

def sampled(model, tok, n=6):
    """n sampled examples with their token ids (two prompts), advantages of both signs."""
    from trainer.backends.hf import HFBackend
    from trainer.policy import PolicyExample

    groups = HFBackend(model, tok).generate(["Say yes:", "Name a colour:"], n // 2, max_new_tokens=6, seed=3)
    samples = [s for g in groups for s in g]
    prompts = ["Say yes:"] * (n // 2) + ["Name a colour:"] * (n // 2)
    return [PolicyExample(p, s.text, (-1.0) ** i, completion_ids=s.token_ids, sampler_logprobs=s.logprobs)
            for i, (p, s) in enumerate(zip(prompts, samples, strict=True))]


def nonzero_policy(tiny_model_path, dropout):
    """The tiny policy with LoRA `dropout` and a non-zero adapter (with B = 0, dropout changes nothing)."""
    import torch

    from trainer.policy import load_policy_model

    model, tok = load_policy_model(tiny_model_path, dropout=dropout)
    with torch.no_grad():
        for p in (p for n, p in model.named_parameters() if "lora_B" in n):
            p.add_(0.05)
    return model, tok


# The three ways an update takes its details: the first training pass (no dropout, one pass over the
# batch), an eval pass of their own (dropout, one pass), the old log-probs' eval pass (two passes).
PASSES = pytest.mark.parametrize(("dropout", "iterations"), [(0.0, 1), (0.5, 1), (0.5, 2)],
                                 ids=["training-pass-no-dropout", "eval-pass-for-details", "old-logprobs-pass"])


@PASSES
def test_the_updates_details_are_an_eval_pass_per_example(tiny_model_path, dropout, iterations):
    """The details equal an eval-mode pass before the update (no dropout noise, whatever lora_dropout);
    one entry per example, in order, over the tokens the update scored (a completion cut to fit
    max_context_length has fewer). With dropout 0.5 the training pass's log-probs are 0.1 nats and
    more off, so details taken from it fail this."""
    import numpy as np
    import torch

    from trainer.policy import PolicyUpdater, UpdateConfig, tokenize_examples
    from trainer.policy.logprobs import sequence_logprobs_with_details

    model, tok = nonzero_policy(tiny_model_path, dropout)
    examples = sampled(model, tok)
    context = 4  # completions are cut to 3 tokens (a prompt token must condition them), prompts to 1
    model.eval()
    with torch.no_grad():
        expected = [sequence_logprobs_with_details(model, tokenize_examples(tok, [e], max_context_length=context),
                                                   temperature=0.9, topk=3) for e in examples]
    updater = PolicyUpdater(model, tok, UpdateConfig(token_topk=3, micro_batch_size=4, num_iterations=iterations,
                                                     temperature=0.9, max_context_length=context, learning_rate=1e-2,
                                                     sampler_is_policy=True))
    updater.update(examples)
    details = updater.last_token_details
    assert len(details) == len(examples)
    for example, (want_lp, want_entropy, _, want_probs), got in zip(examples, expected, details, strict=True):
        n = min(len(example.completion_ids), context - 1)
        assert len(got["logprobs"]) == len(got["entropy"]) == n and got["topk_ids"].shape == (n, 3)
        assert np.allclose(got["logprobs"], want_lp[0, :n].numpy(), atol=1e-5)
        assert np.allclose(got["entropy"], want_entropy[0, :n].numpy(), atol=1e-4)
        assert np.allclose(got["topk_probs"], want_probs[0, :n].numpy(), atol=1e-5)
        assert (got["entropy"] > 0).all() and (np.diff(got["topk_probs"], axis=1) <= 0).all()
    assert any(len(d["logprobs"]) < len(e.completion_ids) for d, e in zip(details, examples, strict=True))


@PASSES
def test_the_mismatch_stats_and_the_details_measure_the_same_gap(tiny_model_path, dropout, iterations):
    """`mismatch/abs_logprob_diff` is the mean over the very tokens and log-probs the details hold:
    the mean of the per-token |sampler - trainer| gaps, over every micro-batch (not a sample of one)."""
    import numpy as np

    from trainer.algorithms.token_metrics import ScoredTokens, token_metrics
    from trainer.policy import PolicyUpdater, UpdateConfig

    model, tok = nonzero_policy(tiny_model_path, dropout)
    # A sampler that drifted on every other token of the last three examples (not in the first
    # micro-batch, the one a sample would take): not all gaps ~0.
    examples = [replace(e, sampler_logprobs=[lp - 0.3 * (i % 2) for i, lp in enumerate(e.sampler_logprobs)])
                if k >= 3 else e for k, e in enumerate(sampled(model, tok))]
    updater = PolicyUpdater(model, tok, UpdateConfig(token_topk=2, micro_batch_size=2, num_iterations=iterations,
                                                     sampler_is_policy=True))
    stats = updater.update(examples)
    details = updater.last_token_details
    gaps = np.concatenate([np.abs(np.asarray(e.sampler_logprobs[:len(d["logprobs"])]) - d["logprobs"])
                           for e, d in zip(examples, details, strict=True)])
    assert stats["mismatch/abs_logprob_diff"] == pytest.approx(gaps.mean(), abs=1e-6)
    scored = [ScoredTokens("m", d["entropy"], d["logprobs"], np.asarray(e.sampler_logprobs[:len(d["logprobs"])]))
              for e, d in zip(examples, details, strict=True)]
    metrics = token_metrics(scored)
    assert metrics["tokens/mismatch/max"] == pytest.approx(0.3, abs=1e-4)  # the drift only, no dropout noise
    assert metrics["tokens/mismatch/share"] == pytest.approx(np.mean(gaps > 0.1))
    assert 0.2 < metrics["tokens/mismatch/share"] < 0.35


def count_passes(monkeypatch, tiny_model_path, *, dropout, topk, iterations=1):
    """(forward passes, the adapter's weights after, the details) of one update of 3 micro-batches."""
    import trainer.policy.logprobs as logprobs
    from trainer.policy import PolicyUpdater, UpdateConfig, lora_parameters

    passes = []
    real = logprobs.completion_hidden_states
    monkeypatch.setattr(logprobs, "completion_hidden_states", lambda *a: passes.append(1) or real(*a))
    model, tok = nonzero_policy(tiny_model_path, dropout)
    examples = sampled(model, tok)
    passes.clear()
    updater = PolicyUpdater(model, tok, UpdateConfig(token_topk=topk, num_iterations=iterations, micro_batch_size=2,
                                                     sampler_is_policy=True, learning_rate=1e-2))
    updater.update(examples)
    weights = {n: p.detach().clone() for n, p in lora_parameters(model).items()}
    return len(passes), weights, updater.last_token_details


@pytest.mark.parametrize(("dropout", "iterations", "added"), [(0.0, 1, -1), (0.0, 2, 0), (0.5, 2, 0), (0.5, 1, 2)],
                         ids=["no-dropout", "no-dropout-old-pass", "old-pass", "dropout-one-pass"])
def test_details_add_a_pass_only_where_the_training_pass_has_dropout(tiny_model_path, monkeypatch, dropout,
                                                                     iterations, added):
    """Details come with no extra forward pass where a pass without dropout runs anyway (the old
    log-probs' eval pass, or a training pass without dropout, which then also gives the mismatch
    stats and saves their one-micro-batch eval pass: -1). With dropout and one pass over the batch,
    their eval pass covers the 3 micro-batches where the mismatch stats alone sampled one (+2).
    Either way the update itself is the same: the adapter after it is identical."""
    import torch

    off, off_weights, none = count_passes(monkeypatch, tiny_model_path, dropout=dropout, topk=None,
                                          iterations=iterations)
    on, on_weights, details = count_passes(monkeypatch, tiny_model_path, dropout=dropout, topk=5,
                                           iterations=iterations)
    assert none == [] and len(details) == 6 and all(d is not None for d in details)
    assert on - off == added
    assert all(torch.equal(on_weights[n], off_weights[n]) for n in off_weights)


def test_update_config_refuses_a_top_k_out_of_range():
    from trainer.policy import UpdateConfig

    for bad in (-1, 21, True):
        with pytest.raises(ValueError, match="token_topk must be None"):
            UpdateConfig(token_topk=bad)
