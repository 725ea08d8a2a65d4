"""Policy update: the clipped objective against a plain reference, tokenization, LoRA training, resume."""

from __future__ import annotations

import io
import math
import random

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_setup")

AGGREGATIONS = ("token", "sequence", "dr_grpo")


# ---- the objective, written plainly ------------------------------------------------------------


def reference_loss(new, old, adv, mask, *, eps_low, eps_high, beta, ref, aggregation):
    """MMGRPO Eq. 1 / 5 (negated, as a loss) with Python loops over tokens; lists in, float out."""
    per_sequence_sum, per_sequence_len = [], []
    for i in range(len(new)):
        total, count = 0.0, 0
        for t in range(len(new[i])):
            if not mask[i][t]:
                continue
            a = adv[i][t] if isinstance(adv[i], list) else adv[i]
            ratio = math.exp(new[i][t] - old[i][t])
            clipped = min(max(ratio, 1.0 - eps_low), 1.0 + eps_high)
            objective = min(ratio * a, clipped * a)
            kl = 0.0
            if ref is not None:
                kl = math.exp(ref[i][t] - new[i][t]) - (ref[i][t] - new[i][t]) - 1.0
            total += -objective + beta * kl
            count += 1
        per_sequence_sum.append(total)
        per_sequence_len.append(count)
    if aggregation == "token":  # DAPO: every token of the batch weighs the same
        return sum(per_sequence_sum) / sum(per_sequence_len)
    if aggregation == "sequence":  # GRPO as written: 1/G sum_i 1/|o_i| sum_t
        return sum(s / n for s, n in zip(per_sequence_sum, per_sequence_len, strict=True)) / len(new)
    return sum(per_sequence_sum) / (len(new) * len(new[0]))  # Dr. GRPO: constant = padded width


def random_case(seed, *, batch=4, width=6, per_token_adv=False):
    rng = random.Random(seed)
    lengths = [rng.randint(1, width) for _ in range(batch)]
    mask = [[1 if t < n else 0 for t in range(width)] for n in lengths]
    new = [[rng.uniform(-4.0, -0.1) for _ in range(width)] for _ in range(batch)]
    # Wide log-ratio spread, so some tokens fall below 1 - eps, some above 1 + eps, some inside.
    old = [[x + rng.uniform(-0.6, 0.6) for x in row] for row in new]
    ref = [[x + rng.uniform(-0.5, 0.5) for x in row] for row in new]
    if per_token_adv:
        adv = [[rng.uniform(-2.0, 2.0) for _ in range(width)] for _ in range(batch)]
    else:
        adv = [rng.uniform(-2.0, 2.0) for _ in range(batch)]
    return new, old, adv, mask, ref


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("per_token_adv", [False, True])
def test_loss_matches_plain_reference(aggregation, beta, per_token_adv):
    import torch

    from trainer.policy import clipped_policy_loss

    for seed in range(5):
        new, old, adv, mask, ref = random_case(seed, per_token_adv=per_token_adv)
        use_ref = ref if beta > 0 else None
        expected = reference_loss(
            new, old, adv, mask, eps_low=0.2, eps_high=0.28, beta=beta, ref=use_ref, aggregation=aggregation
        )
        t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
        loss, stats = clipped_policy_loss(
            t(new), t(old), t(adv), t(mask),
            eps_low=0.2, eps_high=0.28, beta=beta, logp_ref=t(ref) if use_ref else None, aggregation=aggregation,
        )  # fmt: skip
        assert loss.item() == pytest.approx(expected, abs=1e-6)
        assert stats["tokens"].item() == sum(map(sum, mask))


def test_clipped_tokens_get_no_gradient_and_are_counted():
    import torch

    from trainer.policy import clipped_policy_loss

    # Token 0: ratio e^0.5 > 1.2 with A > 0 -> clipped high. Token 1: ratio e^-0.5 < 0.8 with A < 0 ->
    # clipped low. Token 2: ratio 1 -> inside. Token 3: padding.
    new = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [-1.0, -1.0, -1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -1.0, -1.0, 0.0], [-0.5, -1.0, -1.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
    loss, stats = clipped_policy_loss(new, old, adv, mask, eps_low=0.2, eps_high=0.2)
    loss.backward()
    assert new.grad[0, 0] == 0 and new.grad[1, 0] == 0
    assert new.grad[0, 1] != 0 and new.grad[1, 1] != 0
    assert new.grad[:, 3].abs().sum() == 0
    assert stats["clip_high"].item() == pytest.approx(1 / 6)
    assert stats["clip_low"].item() == pytest.approx(1 / 6)


def test_padding_garbage_does_not_leak_into_loss_or_gradient():
    import torch

    from trainer.policy import clipped_policy_loss

    new = torch.tensor([[-1.0, float("-inf")], [-2.0, float("nan")]], requires_grad=True)
    old = torch.tensor([[-1.1, float("-inf")], [-1.9, 0.0]])
    ref = torch.tensor([[-1.0, float("nan")], [-2.5, float("-inf")]])
    mask = torch.tensor([[1, 0], [1, 0]])
    for aggregation in AGGREGATIONS:
        loss, _ = clipped_policy_loss(
            new, old, torch.tensor([0.5, -0.5]), mask,
            eps_low=0.2, eps_high=0.2, beta=0.1, logp_ref=ref, aggregation=aggregation,
        )  # fmt: skip
        (grad,) = torch.autograd.grad(loss, new)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_micro_batch_losses_add_up_to_the_full_batch_loss(aggregation):
    import torch

    from trainer.policy import clipped_policy_loss

    new, old, adv, mask, ref = (torch.tensor(x, dtype=torch.float64) for x in random_case(7, batch=6))
    kw = dict(eps_low=0.2, eps_high=0.28, beta=0.04, aggregation=aggregation)
    full, _ = clipped_policy_loss(new, old, adv, mask, logp_ref=ref, **kw)
    norm = dict(num_tokens=float(mask.sum()), num_sequences=6.0, max_len=float(mask.shape[1]))
    parts = [
        clipped_policy_loss(new[s], old[s], adv[s], mask[s], logp_ref=ref[s], **norm, **kw)[0]
        for s in (slice(0, 2), slice(2, 5), slice(5, 6))
    ]
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), abs=1e-9)


# ---- tokenization and log-probs ------------------------------------------------------------------


def test_tokenize_masks_the_prompt_and_truncates_prompt_left_completion_right(policy):
    from trainer.policy import encode_completion, encode_prompt, tokenize_examples

    _, tok = policy
    long_prompt = "one two three four five six seven eight nine ten " * 3
    examples = [("Question: say yes", " yes", 1.0), (long_prompt, " the answer is 42 and more", -1.0)]
    batch = tokenize_examples(tok, examples, max_context_length=12)

    p0, c0 = encode_prompt(tok, examples[0][0]), encode_completion(tok, examples[0][1])
    c1 = encode_completion(tok, examples[1][1])
    assert len(c1) > 4  # the second pair really is too long
    width = batch.prompt_width
    assert batch.num_truncated == 1
    # Row 0 fits: left padding, prompt ending at the prompt/completion boundary, completion after it.
    assert batch.input_ids[0, width - len(p0) : width].tolist() == p0
    assert batch.completion_ids[0, : len(c0)].tolist() == c0
    assert batch.completion_mask[0].tolist() == [1.0] * len(c0) + [0.0] * (
        batch.completion_ids.shape[1] - len(c0)
    )
    # Row 1 was cut to 12 tokens: the prompt's tail survives and the completion's head.
    kept = int(batch.attention_mask[1].sum())
    assert kept == 12
    n_c1 = int(batch.completion_mask[1].sum())
    full_prompt = encode_prompt(tok, long_prompt)
    assert batch.input_ids[1, width - (kept - n_c1) : width].tolist() == full_prompt[-(kept - n_c1) :]
    assert batch.completion_ids[1, :n_c1].tolist() == c1[:n_c1]
    assert batch.advantages.tolist() == [1.0, -1.0]
    assert batch.sampler_logprobs is None


def test_padded_batch_logprobs_equal_single_sequence_logprobs(policy):
    import torch

    from trainer.policy import sequence_logprobs, tokenize_examples

    model, tok = policy
    model.eval()
    examples = [("Hi", " there friend", 0.0), ("A much longer prompt about apples and pears", " ok", 0.0)]
    with torch.no_grad():
        together = sequence_logprobs(
            model, tokenize_examples(tok, examples, max_context_length=64), temperature=0.7
        )
        for i, ex in enumerate(examples):
            alone_batch = tokenize_examples(tok, [ex], max_context_length=64)
            alone = sequence_logprobs(model, alone_batch, temperature=0.7)[0]
            n = int(alone_batch.completion_mask.sum())
            torch.testing.assert_close(together[i, :n], alone[:n], atol=1e-4, rtol=0)
            # Plain full-sequence forward pass, no padding, no logits_to_keep.
            ids = alone_batch.input_ids
            logits = model(input_ids=ids).logits[0, -n - 1 : -1] / 0.7
            direct = torch.log_softmax(logits, -1).gather(-1, ids[0, -n:, None]).squeeze(-1)
            torch.testing.assert_close(alone[:n], direct, atol=1e-5, rtol=0)


# ---- the updater on the tiny model ---------------------------------------------------------------


def _lora_and_base(model):
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    return lora, base


GROUP = [
    ("Question: say yes", " yes", 1.2),
    ("Question: say yes", " no", -0.8),
    ("Question: say yes", " maybe so", -0.4),
]


def test_one_update_moves_every_lora_parameter_and_no_base_weight(tiny_model_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.policy import PolicyUpdater, UpdateConfig, wrap_with_lora

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    # "orthogonal" starts with A and B both non-zero (B @ A = 0), so one step reaches every matrix.
    model = wrap_with_lora(
        AutoModelForCausalLM.from_pretrained(tiny_model_path), init_lora_weights="orthogonal"
    )
    lora0, base0 = _lora_and_base(model)
    assert len(lora0) == 2 * 7 * 2  # A and B, 7 projections, 2 layers
    stats = PolicyUpdater(model, tok, UpdateConfig(learning_rate=1e-3, micro_batch_size=2)).update(GROUP)
    lora1, base1 = _lora_and_base(model)

    assert math.isfinite(stats["loss"]) and math.isfinite(stats["grad_norm"]) and stats["grad_norm"] > 0
    assert stats["completion_tokens"] > 0 and stats["tokens_per_s"] > 0 and stats["lr"] == 1e-3
    unchanged = [n for n in lora0 if torch.equal(lora0[n], lora1[n])]
    assert unchanged == []
    assert all(torch.equal(base0[n], base1[n]) for n in base0)


def test_default_lora_init_moves_b_first_then_a(policy):
    import torch

    from trainer.policy import PolicyUpdater, UpdateConfig

    # PEFT's default (and the paper's) init has B = 0, so A's gradient is exactly 0 on the first step.
    model, tok = policy
    updater = PolicyUpdater(model, tok, UpdateConfig(learning_rate=1e-3))
    lora0, base0 = _lora_and_base(model)
    updater.update(GROUP)
    lora1, _ = _lora_and_base(model)
    assert all(not torch.equal(lora0[n], lora1[n]) for n in lora0 if "lora_B" in n)
    assert all(torch.equal(lora0[n], lora1[n]) for n in lora0 if "lora_A" in n)
    updater.update(GROUP)
    lora2, base2 = _lora_and_base(model)
    assert all(not torch.equal(lora1[n], lora2[n]) for n in lora0 if "lora_A" in n)
    assert all(torch.equal(base0[n], base2[n]) for n in base0)


def test_positive_advantage_raises_the_completion_logprob(policy):
    import torch

    from trainer.policy import PolicyUpdater, UpdateConfig, sequence_logprobs, tokenize_examples

    model, tok = policy
    target = [("Question: which word? Answer:", " yes", 1.0)]
    batch = tokenize_examples(tok, target, max_context_length=64)

    def logprob():
        model.eval()
        with torch.no_grad():
            return float((sequence_logprobs(model, batch) * batch.completion_mask).sum())

    updater = PolicyUpdater(model, tok, UpdateConfig(learning_rate=1e-3))
    before = logprob()
    curve = [before]
    for _ in range(30):
        updater.update(target)
        curve.append(logprob())
    after = curve[-1]
    print(f"learning check: log p(completion) {before:.2f} -> {after:.4f} in 30 updates; every 5: "
          + " ".join(f"{x:.2f}" for x in curve[::5]))  # fmt: skip
    assert after > before + 5.0
    assert after > math.log(0.9)  # p(completion) > 0.9


def test_kl_penalty_uses_the_adapter_free_reference(policy):
    from trainer.policy import PolicyUpdater, UpdateConfig

    model, tok = policy
    updater = PolicyUpdater(model, tok, UpdateConfig(learning_rate=1e-2, beta=0.04))
    first = updater.update(GROUP)
    second = updater.update(GROUP)
    assert first["kl"] == pytest.approx(0.0, abs=1e-8)  # the fresh adapter is the identity (B = 0)
    assert second["kl"] > 1e-4 and math.isfinite(second["loss"])


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def test_resume_from_state_dict_is_exact(tiny_model_path):
    import torch

    from trainer.policy import PolicyUpdater, UpdateConfig, load_policy_model

    config = UpdateConfig(
        learning_rate=5e-3, micro_batch_size=2, scheduler="cosine", warmup_steps=1, total_steps=10,
        beta=0.04, num_iterations=2, seed=3,
    )  # fmt: skip
    batch1, batch2 = GROUP, [(p, c + " indeed", -a) for p, c, a in GROUP]

    model_a, tok = load_policy_model(tiny_model_path)
    first = PolicyUpdater(model_a, tok, config)
    first.update(batch1)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)  # what a checkpoint writer will do
    stats_a = first.update(batch2)

    model_b, _ = load_policy_model(tiny_model_path, seed=99)  # different fresh adapter init on purpose
    resumed = PolicyUpdater(model_b, tok, config)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    stats_b = resumed.update(batch2)

    params_a, params_b = _snapshot(model_a), _snapshot(model_b)
    assert params_a.keys() == params_b.keys()
    assert all(torch.equal(params_a[n], params_b[n]) for n in params_a)
    assert stats_a["loss"] == stats_b["loss"] and stats_a["lr"] == stats_b["lr"]
    assert resumed.updates == first.updates == 2 and resumed.optimizer_steps == 4


def test_config_and_model_checks():
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.policy import PolicyUpdater, UpdateConfig

    with pytest.raises(ValueError, match="total_steps"):
        UpdateConfig(scheduler="cosine")
    with pytest.raises(ValueError, match="aggregation"):
        UpdateConfig(aggregation="mean")
    tiny = LlamaForCausalLM(LlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2))  # fmt: skip
    with pytest.raises(TypeError, match="wrap_with_lora"):
        PolicyUpdater(tiny, tokenizer=None)
