"""Mini-batches and gradient accumulation as the papers and TRL run them: a batch takes several
optimizer steps, their old log-probs come from before the first, and the count and the learning
rate of every optimizer step agree with TRL's GRPOTrainer on the same settings.
(`gradient_accumulation_steps` was validated and never read: one optimizer step per epoch.)"""

from __future__ import annotations

import pytest

from tests.trainer.run.test_loop import ListReporter, toy_config

pytestmark = pytest.mark.usefixtures("torch_setup")


def examples(count: int):
    from trainer.policy import PolicyExample

    words = ["apple", "river", "stone", "cloud"]
    return [PolicyExample(f"Repeat: {words[i % 4]}", f" {words[(i + 1) % 4]}.", 1.0 if i % 2 else -1.0)
            for i in range(count)]


def updater(policy, **config):
    from trainer.policy import PolicyUpdater, UpdateConfig

    model, tokenizer = policy
    return PolicyUpdater(model, tokenizer, UpdateConfig(**{"learning_rate": 5e-2, "micro_batch_size": 2, **config}))


def test_each_gradient_accumulation_of_micro_batches_is_one_optimizer_step(policy):
    whole = updater(policy, gradient_accumulation_steps=0).update(examples(8))
    assert whole["optimizer_steps"] == 1.0 and whole["ratio"] == pytest.approx(1.0, abs=1e-6)

    split = updater(policy, gradient_accumulation_steps=1).update(examples(8))  # 4 micro-batches of 2
    assert split["optimizer_steps"] == 4.0
    uneven = updater(policy, gradient_accumulation_steps=3).update(examples(8))  # 3 + 1 micro-batches
    assert uneven["optimizer_steps"] == 2.0
    epochs = updater(policy, gradient_accumulation_steps=2, num_iterations=3).update(examples(8))
    assert epochs["optimizer_steps"] == 6.0


def test_after_the_first_optimizer_step_the_ratio_is_against_the_old_policy(policy):
    """The old log-probs are frozen before the first step: the later steps' ratios move away from 1
    and the clip binds (with the training pass's own log-probs every ratio would stay exactly 1)."""
    from trainer.policy import updater as policy_module

    up = updater(policy, gradient_accumulation_steps=1, eps_low=0.01, eps_high=0.01)
    seen = []
    real_step = up._optimizer_step

    def recording(micro, olds, refs, norm, **details):
        seen.append(olds is not None)
        return real_step(micro, olds, refs, norm, **details)

    up._optimizer_step = recording
    frozen = []
    real_frozen = up._frozen_logprobs

    def recording_frozen(micro, *, old=True, details=None):
        frozen.append((old, up.optimizer_steps))
        return real_frozen(micro, old=old, details=details)

    up._frozen_logprobs = recording_frozen
    stats = up.update(examples(8))
    assert frozen == [(True, 0)]  # one pass, before any optimizer step
    assert seen == [True] * 4
    assert abs(stats["ratio"] - 1.0) > 1e-3 and stats["clip_fraction"] > 0
    assert policy_module.UpdateConfig().gradient_accumulation_steps == 0  # the default keeps one step per pass


def test_a_run_logs_its_optimizer_steps_and_sizes_its_schedule_in_them(tmp_path):
    from trainer.run.loop import Trainer

    config = toy_config(steps=2, examples_per_step=2, group_size=4, rollouts_per_example=4, micro_batch_size=2,
                        gradient_accumulation_steps=2, ppo_epochs=2, checkpoint_every=0)
    assert config.optimizer_steps_per_step() == 2 * 2  # 8 completions, 4 micro-batches, 2 per step, 2 epochs
    reporter = ListReporter()
    trainer = Trainer(config, tmp_path / "run", reporter, model_cache_dir=tmp_path / "models")
    assert trainer.parts.updater.config.total_steps == 8
    trainer.run()
    assert [e["metrics"]["optimizer_steps"] for e in reporter.events] == [4.0, 4.0]
    assert trainer.parts.updater.optimizer_steps == 8


def test_the_optimizer_steps_and_their_learning_rates_agree_with_trl(tmp_path, tiny_model_path):
    """TRL 1.16's GRPOTrainer and Cohort on the same settings: P=2 prompts x G=4 completions per
    generation, micro-batch 2, 2 micro-batches per optimizer step (so 2 optimizer steps per
    generation), linear schedule with 2 warmup steps, 3 generations."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.policy import load_policy_model
    from trainer.run.loop import Trainer

    generations, prompts, group, micro, accumulate = 3, 2, 4, 2, 2
    trl_rates = []

    class Rates(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
            trl_rates.append(optimizer.param_groups[0]["lr"])

    model, tokenizer = load_policy_model(tiny_model_path)
    trl_config = GRPOConfig(
        output_dir=str(tmp_path / "trl"), report_to="none", logging_strategy="no", save_strategy="no",
        disable_tqdm=True, use_cpu=True, seed=0, per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulate, steps_per_generation=prompts * group // micro,
        num_generations=group, max_steps=generations * prompts * group // (micro * accumulate),
        max_completion_length=4, learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=2,
        beta=0.0, loss_type="dapo", bf16=False, gradient_checkpointing=False, dataloader_num_workers=0)
    rows = [{"prompt": [{"role": "user", "content": f"Repeat: word {i}"}]} for i in range(prompts * generations)]
    trl = GRPOTrainer(model=model, reward_funcs=[lambda completions, **_: [float(len(c)) for c in completions]],
                      args=trl_config, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                      callbacks=[Rates()])
    trl.train()

    config = toy_config(steps=generations, examples_per_step=prompts, group_size=group, rollouts_per_example=group,
                        micro_batch_size=micro, gradient_accumulation_steps=accumulate, learning_rate=1e-3,
                        lr_scheduler="linear", warmup_steps=2, checkpoint_every=0, max_new_tokens=4)
    cohort = Trainer(config, tmp_path / "cohort", ListReporter(), model_cache_dir=tmp_path / "models")
    cohort_rates = []
    real_step = cohort.parts.updater.optimizer.step

    def recording_step(*args, **kwargs):
        cohort_rates.append(cohort.parts.updater.optimizer.param_groups[0]["lr"])
        return real_step(*args, **kwargs)

    cohort.parts.updater.optimizer.step = recording_step
    cohort.run()
    assert trl.state.global_step == len(trl_rates) == len(cohort_rates) == 6
    assert cohort_rates == pytest.approx(trl_rates, rel=1e-9, abs=1e-12)
    assert cohort_rates[0] == 0.0 and cohort_rates[2] == pytest.approx(1e-3 * 4 / 4)  # warmup, then linear decay
