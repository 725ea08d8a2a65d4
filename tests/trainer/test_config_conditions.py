"""The fields' conditions (`when` in their metadata, `RunConfig.field_conditions()`): which choices a
field is read under, declared once on the config and used by the launch form to hide the others."""

import dataclasses

import pytest

from trainer.config import PROGRAM_OPTIMIZES_PROMPTS, ConfigError, RewardSpec, RunConfig, literal_choices

FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
CONDITIONS = RunConfig.field_conditions()


def choices_of(name: str) -> tuple[str, ...]:
    """The values a condition may compare a field with, as the form submits them."""
    if name == PROGRAM_OPTIMIZES_PROMPTS:
        return ("true", "false")
    f = FIELDS[name]
    if str(f.type) == "bool":
        return ("true", "false")
    choices = literal_choices(f.type)
    assert choices, f"{name} is neither a choice nor a bool: a condition on it cannot be shown in a form"
    return tuple(choices)


def test_every_condition_names_a_real_field_and_values_it_can_take():
    assert CONDITIONS, "no field declares a condition"
    for name, condition in CONDITIONS.items():
        assert name in FIELDS
        assert condition, f"{name}: an empty condition"
        for key, values in condition.items():
            assert key != name, f"{name} depends on itself"
            assert key == PROGRAM_OPTIMIZES_PROMPTS or key in FIELDS, f"{name}: {key} is not a RunConfig field"
            assert values and set(values) <= set(choices_of(key)), f"{name}: {values} are not values of {key}"


def test_conditions_are_closed_so_each_field_can_be_judged_alone():
    # A field under a hidden field must be hidden too: it carries its controller's conditions.
    for name, condition in CONDITIONS.items():
        for key in condition:
            for inherited_key, inherited in CONDITIONS.get(key, {}).items():
                assert inherited_key in condition, f"{name} depends on {key}, which needs {inherited_key}"
                assert set(condition[inherited_key]) <= set(inherited), (name, inherited_key)


def test_the_declared_dependencies_are_the_ones_the_trainer_reads():
    # trainer/run/loop.py, trainer/algorithms/scoring.py, trainer/policy/updater.py, trainer/dspy/prompt_phase.py,
    # trainer/run/token_details.py read each field only under these choices (padding: module-level grouping,
    # used by grpo and mmgrpo).
    proposer = {PROGRAM_OPTIMIZES_PROMPTS: ["true"], "prompt_optimizer": ["mipro_light", "mipro_medium", "gepa"]}
    prompt_phase = {PROGRAM_OPTIMIZES_PROMPTS: ["true"],
                    "prompt_optimizer": ["mipro_light", "mipro_medium", "gepa", "bootstrap_rs"]}
    demos = {PROGRAM_OPTIMIZES_PROMPTS: ["true"], "prompt_optimizer": ["mipro_light", "mipro_medium", "bootstrap_rs"]}
    assert CONDITIONS == {
        "program_state": {PROGRAM_OPTIMIZES_PROMPTS: ["true"]},
        "prompt_optimizer": {PROGRAM_OPTIMIZES_PROMPTS: ["true"]},
        "prompt_optimizer_model": proposer,
        "prompt_optimizer_trials": prompt_phase,
        "prompt_optimizer_demos": demos,
        "prompt_optimizer_labeled_demos": demos,
        "padding": {"strategy": ["grpo", "mmgrpo"]},
        "teacher_rollouts": {"strategy": ["mmgrpo"]},
        "sampling": {"strategy": ["mhgpo"]},
        "fork_probabilities": {"strategy": ["mhgpo"], "sampling": ["rr"]},
        "gdpo_batch_norm": {"estimator": ["gdpo"]},
        # read with vLLM or with max_staleness >= 1 (either makes the sampler another copy of the policy):
        # a condition of several keys means all of them, so the correction has none
        "importance_sampling_cap": {"importance_sampling_correction": ["true"]},
        "vllm_gpu_memory_utilization": {"backend": ["vllm"]},
        "vllm_max_model_len": {"backend": ["vllm"]},
        "vllm_enable_sleep_mode": {"backend": ["vllm"]},
        "hf_generate_rows": {"backend": ["hf"]},
        "token_topk": {"token_details": ["sampled", "all"]},
        "token_fork_share": {"token_details": ["sampled", "all"]},
    }
    # Every optimizer but "none" runs phase 1, so a new optimizer must be added to the condition.
    assert set(prompt_phase["prompt_optimizer"]) == set(choices_of("prompt_optimizer")) - {"none"}


def test_the_defaults_of_a_hidden_field_are_valid_under_every_choice():
    # A form posts hidden fields too: their defaults must not refuse a run that never reads them.
    for strategy in ("grpo", "mmgrpo", "mhgpo"):
        RunConfig(strategy=strategy)
    RunConfig(backend="vllm")
    RunConfig(estimator="gdpo", rewards=[{"name": "exact_match"}, {"name": "token_f1"}])


def test_field_help_is_still_help_and_group_only():
    assert all(set(entry) == {"help", "group"} for entry in RunConfig.field_help().values())


@pytest.mark.parametrize(("spec", "message"), [
    ({"name": "exact_match", "weight": "2"}, "weight must be a number, not '2'"),
    ({"name": "exact_match", "weight": None}, "weight must be a number, not None"),
    ({"name": "exact_match", "weight": True}, "weight must be a number, not True"),
    ({"name": "length", "condition_on": "exact_match", "threshold": "1"}, "threshold must be a number"),
    ({"name": "length", "params": [4000]}, "params must be a table of parameter values"),
    ({"name": "length", "condition_on": 3}, "condition_on must name another reward, not 3"),
    ({"name": ["exact_match"]}, "every reward needs a name"),
])
def test_a_reward_of_the_wrong_type_is_refused_beside_the_rewards(spec, message):
    # A power user's JSON can hold anything; it used to crash the form (TypeError) instead.
    with pytest.raises(ConfigError, match=message) as caught:
        RewardSpec(**spec)
    assert caught.value.field == "rewards"
