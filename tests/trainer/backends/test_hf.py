"""The transformers sampling backend: shapes, log-probs, determinism, and sampling with the adapter."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_setup")

PROMPTS = ["Question: say yes", "The quick brown"]


def recomputed_logprobs(model, tokenizer, prompts, groups, temperature):
    """Log-probs of each sample's tokens from a fresh forward pass: one list per sample, prompt-major."""
    import torch

    from trainer.policy import PolicyExample, sequence_logprobs, tokenize_examples

    samples = [s for group in groups for s in group]
    examples = [
        PolicyExample(p, s.text, 0.0, completion_ids=s.token_ids)
        for p, g in zip(prompts, groups, strict=True)
        for s in g
    ]
    batch = tokenize_examples(tokenizer, examples, max_context_length=512)
    model.eval()
    with torch.no_grad():
        lp = sequence_logprobs(model, batch, temperature=temperature)
    return [lp[i, : len(s.token_ids)].tolist() for i, s in enumerate(samples)]


def test_n_samples_per_prompt_with_logprobs_matching_a_forward_pass(policy):
    from trainer.backends import SamplingBackend, get_backend

    model, tok = policy
    backend = get_backend("hf", model=model, tokenizer=tok, batch_size=4)  # 6 rows -> 2 generate calls
    assert isinstance(backend, SamplingBackend)
    groups = backend.generate(PROMPTS, 3, temperature=0.8, top_p=1.0, max_new_tokens=10, seed=1)

    assert [len(g) for g in groups] == [3, 3]
    for group in groups:
        for s in group:
            assert 1 <= len(s.token_ids) <= 10 and len(s.logprobs) == len(s.token_ids)
            assert s.text == tok.decode(s.token_ids, skip_special_tokens=True)
            if s.finish_reason == "stop":
                assert s.token_ids[-1] == tok.eos_token_id and tok.eos_token_id not in s.token_ids[:-1]
            else:
                assert len(s.token_ids) == 10 and tok.eos_token_id not in s.token_ids
    expected = recomputed_logprobs(model, tok, PROMPTS, groups, 0.8)
    got = [s.logprobs for g in groups for s in g]
    worst = max(
        abs(a - b)
        for row_e, row_g in zip(expected, got, strict=True)
        for a, b in zip(row_e, row_g, strict=True)
    )
    assert worst < 1e-4


def test_same_seed_same_samples_other_seed_other_samples(policy):
    import torch

    from trainer.backends.hf import HFBackend

    model, tok = policy
    backend = HFBackend(model, tok)
    kw = dict(temperature=1.0, max_new_tokens=8)
    state = torch.get_rng_state()
    a = backend.generate(PROMPTS, 4, seed=5, **kw)
    assert torch.equal(state, torch.get_rng_state())  # the caller's RNG stream is untouched
    b = backend.generate(PROMPTS, 4, seed=5, **kw)
    c = backend.generate(PROMPTS, 4, seed=6, **kw)
    assert a == b
    assert [s.token_ids for g in a for s in g] != [s.token_ids for g in c for s in g]


def test_samples_with_the_current_adapter(policy, tmp_path):
    import torch

    from trainer.backends.hf import HFBackend
    from trainer.policy import PolicyUpdater, UpdateConfig, load_policy_model

    model, tok = policy
    backend = HFBackend(model, tok)
    greedy = dict(temperature=0.0, max_new_tokens=8, seed=0)
    base = backend.generate(PROMPTS, 1, **greedy)

    # 1) A saved adapter loaded by path (the vLLM-style hand-over).
    other, _ = load_policy_model(tiny_path := model.base_model.model.name_or_path)
    with torch.no_grad():
        for name, p in other.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    saved = PolicyUpdater(other, tok).save_adapter(tmp_path / "adapter-v1")
    backend.update_adapter(saved, version=1)
    assert backend.adapter_version == 1
    moved = backend.generate(PROMPTS, 1, **greedy)
    base_lp = [s.logprobs for g in base for s in g]
    moved_lp = [s.logprobs for g in moved for s in g]
    assert base_lp != moved_lp
    # The sample log-probs are those of the adapted policy, not of the base model.
    assert moved_lp[0] == pytest.approx(recomputed_logprobs(other, tok, PROMPTS, moved, 1.0)[0], abs=1e-4)

    # 2) The live model shared with the updater: an update shows without any hand-over.
    live, _ = load_policy_model(tiny_path)
    live_backend = HFBackend(live, tok)
    before = live_backend.generate(PROMPTS, 1, **greedy)
    PolicyUpdater(live, tok, UpdateConfig(learning_rate=1e-2)).update([(PROMPTS[0], " yes", 1.0)])
    after = live_backend.generate(PROMPTS, 1, **greedy)
    assert [s.logprobs for g in before for s in g] != [s.logprobs for g in after for s in g]


def test_rejects_bad_requests(policy):
    from trainer.backends.hf import HFBackend

    backend = HFBackend(*policy)
    with pytest.raises(TypeError):
        backend.generate("one prompt", 2)
    with pytest.raises(ValueError):
        backend.generate(PROMPTS, 0)


def test_sampling_stops_where_the_model_ends_a_turn_when_its_tokenizer_names_another_eos(smollm2_dir):
    """SmolLM2's GGUF tokenizer says EOS = <|im_start|> while its generation config (and every chat turn)
    ends on <|im_end|>: the sampler stops on both, as vLLM does, instead of running past the answer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.backends.hf import HFBackend, stop_token_ids

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    tokenizer.eos_token = "<|im_start|>"  # the tokenizer as the GGUF file has it, before the builder's fix
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    assert stop_token_ids(model, tokenizer) == [2, 1]
    backend = HFBackend(model, tokenizer)
    ((sample,),) = backend.generate([[{"role": "user", "content": "What is 7 + 5?"}]], 1, temperature=0.0,
                                    max_new_tokens=48)
    assert sample.finish_reason == "stop"
    assert sample.token_ids[-1] == 2 and not {1, 2} & set(sample.token_ids[:-1])
    assert "12" in sample.text and "assistant" not in sample.text


def test_rows_per_generate_call_are_derived_from_the_kv_cache_a_row_needs(smollm2_dir, tiny_model_path):
    from transformers import AutoModelForCausalLM

    from trainer.backends.hf import MAX_GENERATE_ROWS, default_generate_rows

    smol = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    assert default_generate_rows(smol, 24) == 44  # 48 MB of float32 keys and values a row, in 2 GiB
    assert default_generate_rows(smol, 1024) < default_generate_rows(smol, 24)
    assert default_generate_rows(AutoModelForCausalLM.from_pretrained(tiny_model_path), 24) == MAX_GENERATE_ROWS


def test_a_run_samples_with_the_rows_it_asks_for(tmp_path):
    from tests.trainer.run.test_loop import ListReporter, toy_config
    from trainer.run.loop import Trainer

    trainer = Trainer(toy_config(hf_generate_rows=3), tmp_path / "run", ListReporter(), model_cache_dir=tmp_path / "m")
    assert trainer.parts.backend.batch_size == 3
    trainer = Trainer(toy_config(), tmp_path / "run2", ListReporter(), model_cache_dir=tmp_path / "m")
    assert trainer.parts.backend.batch_size == 256  # derived: the tiny model's cache is small
