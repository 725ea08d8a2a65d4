import dataclasses
import doctest

import pytest

import trainer.config as config_module
from trainer.config import PRESETS, RewardSpec, RunConfig, from_preset, preset_values


def test_defaults_are_valid_and_match_mmgrpo_lora():
    config = RunConfig()
    assert (config.lora_r, config.lora_alpha, config.lora_dropout) == (16, 64, 0.05)
    assert config.lora_targets == ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"]


def test_every_field_has_help_and_a_group():
    help_ = RunConfig.field_help()
    assert set(help_) == {f.name for f in dataclasses.fields(RunConfig)}
    assert all(entry["help"] and entry["group"] for entry in help_.values())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"strategy": "ppo"}, "strategy must be one of 'grpo', 'mmgrpo', 'mhgpo'"),
        ({"group_size": 1, "rollouts_per_example": 1}, "group_size must be at least 2"),
        ({"group_size": 0}, "group_size must be a whole number of at least 1"),
        ({"rollouts_per_example": 12}, "set rollouts_per_example (12) equal to group_size (8)"),
        ({"learning_rate": 0}, "learning_rate must be positive"),
        ({"clip_eps_high": 1.5}, "clip_eps_high must be between 0 and 1"),
        ({"temperature": 0}, "temperature must be > 0"),
        ({"max_new_tokens": 9000}, "must be smaller than max_context_length"),
        ({"estimator": "gdpo"}, "Add a second reward or choose estimator 'grpo'"),
        ({"teacher_rollouts": {"fewshot": 2}}, "teacher_rollouts is an MMGRPO option"),
        ({"strategy": "mmgrpo", "rollouts_per_example": 4, "teacher_rollouts": {"fewshot": 4}},
         "leave no rollout for the student"),
        ({"strategy": "mhgpo", "sampling": "rr"}, "sampling 'rr' needs fork_probabilities"),
        ({"strategy": "mhgpo", "sampling": "rr", "fork_probabilities": [0.5, 0.2]}, "must sum to 1 (got 0.7)"),
        ({"fork_probabilities": [1.0]}, "fork_probabilities is an MHGPO round-robin option"),
        ({"model": "builtin:gpt5"}, "unknown built-in model 'builtin:gpt5'"),
        ({"backend": "vllm", "lora_r": 1024, "lora_alpha": 64}, "vLLM serves LoRA adapters up to rank 512"),
        ({"backend": "vllm", "temperature": 2.5}, "vLLM samples at temperatures up to 2"),
        ({"backend": "vllm", "lora_targets": ["q_proj", "lm_head"]}, "lm_head would be refused when the engine loads"),
        ({"vllm_enable_sleep_mode": True}, "sleep mode is a vLLM engine option: choose backend 'vllm'"),
        ({"vllm_max_model_len": 4096}, "vllm_max_model_len sizes the vLLM engine: choose backend 'vllm'"),
        ({"backend": "vllm", "vllm_max_model_len": 256}, "must be a whole number above max_new_tokens (256)"),
        ({"backend": "vllm", "hf_generate_rows": 8}, "leave it 0 with backend 'vllm'"),
        ({"backend": "vllm", "vllm_gpu_memory_utilization": 1.5}, "above 0 and at most 1"),
        ({"hf_generate_rows": -1}, "hf_generate_rows must be 0 (derived)"),
        ({"strategy": "mhgpo", "estimator": "gdpo", "rewards": [{"name": "token_f1"}, {"name": "length"}]},
         "choose estimator 'grpo' with strategy 'mhgpo'"),
        ({"rewards": []}, "at least one reward is needed"),
        ({"rewards": [{"name": "token_f1"}, {"name": "token_f1"}]}, "each reward may appear once"),
        ({"rewards": [{"name": "length", "condition_on": "correct"}]}, "conditioned on 'correct', which is not"),
        ({"rewards": [{"name": "token_f1", "bogus": 1}]}, "unknown reward keys: bogus"),
        ({"rewards": [{"name": "f1_score"}]}, "unknown reward 'f1_score'; known rewards: char_f1, conditioned_length"),
        ({"rewards": [{"name": "length", "params": {"limt": 5}}]}, "unknown parameter(s) limt for reward 'length'"),
        ({"lora_targets": []}, "lora_targets must name at least one module"),
        ({"token_details": "some"}, "token_details must be one of 'off', 'sampled', 'all'"),
        ({"token_topk": 21}, "token_topk must be a whole number from 0 to 20"),
        ({"token_topk": -1}, "token_topk must be a whole number from 0 to 20"),
        ({"token_topk": 2.5}, "token_topk must be a whole number from 0 to 20"),
        ({"token_fork_share": 0}, "token_fork_share must be a share above 0 and at most 1"),
        ({"token_fork_share": 1.5}, "token_fork_share must be a share above 0 and at most 1"),
        ({"token_fork_share": "0.1"}, "token_fork_share must be a share above 0 and at most 1"),
    ],
)
def test_invalid_combinations_say_how_to_fix_them(changes, message):
    with pytest.raises(ValueError) as excinfo:
        RunConfig(**changes)
    assert message in str(excinfo.value)


@pytest.mark.parametrize(("changes", "field"), [
    ({"token_details": "everything"}, "token_details"), ({"token_topk": True}, "token_topk"),
    ({"token_fork_share": float("nan")}, "token_fork_share"), ({"token_fork_share": -0.1}, "token_fork_share")])
def test_token_detail_settings_are_refused_beside_their_field(changes, field):
    from trainer.config import ConfigError

    with pytest.raises(ConfigError) as excinfo:
        RunConfig(**changes)
    assert excinfo.value.field == field


def test_token_details_default_to_all_with_five_alternatives_at_the_top_tenth():
    config = RunConfig()
    assert (config.token_details, config.token_topk, config.token_fork_share) == ("all", 5, 0.1)
    RunConfig(token_details="off", token_topk=0, token_fork_share=1.0)  # the bounds are valid


def test_mmgrpo_may_sample_more_rollouts_than_the_group_size():
    config = RunConfig(strategy="mmgrpo", rollouts_per_example=12, group_size=8, teacher_rollouts={"fewshot": 4})
    assert config.rollouts_per_example - sum(config.teacher_rollouts.values()) == 8


def test_rewards_from_dicts_become_specs_with_conditions():
    config = RunConfig(estimator="gdpo", rewards=[
        {"name": "numeric_match"}, {"name": "length", "weight": 0.5, "condition_on": "numeric_match", "threshold": 1}])
    assert config.rewards[1] == RewardSpec("length", 0.5, {}, "numeric_match", 1)


def test_program_agent_count_checked_against_fork_probabilities():
    config = RunConfig(strategy="mhgpo", sampling="rr", group_size=4, rollouts_per_example=4,
                       fork_probabilities=[0.7, 0.1, 0.2])
    config.check_program_agents(["rewriter", "reranker", "answerer"])
    with pytest.raises(ValueError, match="has 3 entries but program 'toy' has 2 agents"):
        config.check_program_agents(["a", "b"])


def test_round_trips_through_dict_and_rejects_unknown_keys():
    config = RunConfig(estimator="gdpo", rewards=[{"name": "token_f1"}, {"name": "length", "weight": 2.0}], seed=7)
    assert RunConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown config keys: nope"):
        RunConfig.from_dict({"nope": 1})


def test_loads_toml_with_a_preset_and_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('preset = "mhgpo-rr"\nprogram = "search"\nexamples_per_step = 8\nsteps = 3\n')
    config = RunConfig.from_toml(path)
    assert (config.strategy, config.sampling, config.fork_probabilities) == ("mhgpo", "rr", [0.7, 0.1, 0.2])
    assert (config.examples_per_step, config.steps, config.kl_beta) == (8, 3, 0.001)


def test_bad_toml_is_a_value_error(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("steps = = 3")
    with pytest.raises(ValueError, match="not valid TOML"):
        RunConfig.from_toml(path)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_valid_config(name):
    config = from_preset(name)
    for key, value in preset_values(name).items():
        if key != "rewards":
            assert getattr(config, key) == value


def test_presets_carry_the_papers_numbers():
    mmgrpo = from_preset("mmgrpo-paper")
    assert (mmgrpo.steps, mmgrpo.examples_per_step, mmgrpo.rollouts_per_example) == (750, 4, 12)
    assert (mmgrpo.learning_rate, mmgrpo.gradient_accumulation_steps, mmgrpo.temperature) == (1e-5, 20, 0.6)
    gdpo = from_preset("gdpo-math")
    assert (gdpo.clip_eps_low, gdpo.clip_eps_high, gdpo.group_size) == (0.2, 0.28, 16)
    assert gdpo.rewards[1].condition_on == "numeric_match"
    mhgpo = from_preset("mhgpo-fof")
    assert (mhgpo.group_size, mhgpo.examples_per_step, mhgpo.kl_beta, mhgpo.steps) == (4, 512, 0.001, 176)


def test_docstring_examples_hold():
    result = doctest.testmod(config_module)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(("changes", "field"), [
    ({"group_size": 3}, "rollouts_per_example"),
    ({"lora_dropout": 1.5}, "lora_dropout"),
    ({"strategy": "mhgpo", "estimator": "gdpo", "rewards": [{"name": "exact_match"}, {"name": "token_f1"}]},
     "estimator"),
    ({"rewards": [{"name": "exact_match", "condition_on": "token_f1"}]}, "rewards"),
    ({"max_grad_norm": 0.0}, "max_grad_norm"),
])
def test_each_error_names_the_field_to_fix(changes, field):
    from trainer.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        RunConfig(**{"group_size": 8, "rollouts_per_example": 8, **changes})
    assert caught.value.field == field and isinstance(caught.value, ValueError)
