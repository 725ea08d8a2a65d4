"""Cohort's `toy_format` task trained by TRL's GRPOTrainer, streaming into Cohort.

The same task as the built-in `toy_format` (trainer/programs/toy_format.py): the prompt asks the model to
repeat a word and end with a period; two binary rewards, the period (format) and the first word
(content), with the regular expression and first-word rule Cohort's task uses. The settings default to
the task's SmolLM2 suggestion (8 completions a prompt, 4 prompts a step, 24 new tokens, temperature 1,
LoRA r 16 / alpha 64 / dropout 0.05 at a constant 2e-4, no KL), so a Cohort run and this run of the task sit side by side on the
compare page.

    python examples/trl_toy_format.py --model ~/.cache/cohort/smollm2-135m-instruct \\
        --url http://127.0.0.1:8000 --token <key from /api/tokens/> --steps 40

One line connects it to Cohort: `trainer.add_callback(CohortCallback(trainer, task="toy_format", ...))`.
"""

from __future__ import annotations

import argparse
import os

from trainer.programs.toy_format import ToyFormat
from trainer.rewards import get_reward

_TASK = ToyFormat()
# The task's own rewards, built by Cohort's registry from the program's defaults: regex_match on the
# output's text (ends with a period) and exact_match on its first word.
_REWARDS = {spec["name"]: get_reward(spec["name"], **spec["params"]) for spec in ToyFormat.default_rewards}


def toy_format_dataset(size: int, *, seed: int = 0):
    """`size` prompts of the task as TRL's conversational dataset, each with its target word: the
    program's own examples and prompt."""
    from datasets import Dataset

    rows = []
    for example in _TASK.generate_examples("train", seed=seed)[:size]:
        messages = _TASK.process_prompt(_TASK.start(example), "echo")
        rows.append({"prompt": [{"role": m["role"], "content": m["content"]} for m in messages],
                     "word": example["word"], "answer": example["answer"]})
    return Dataset.from_list(rows)


def _scores(reward: str, completions, answer) -> list[float]:
    """The task's reward `reward` on each completion, as Cohort's trainer scores the program's output."""
    scores = []
    for completion, gold in zip(completions, answer, strict=True):
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        state = _TASK.step(_TASK.start({"word": gold}), "echo", text).state
        scores.append(_REWARDS[reward]({"answer": gold}, _TASK.final_output(state)))
    return scores


# Named after the task's rewards, so TRL logs `rewards/regex_match/mean` and the callback sends it as
# `reward/regex_match`: on the compare page each reward's TRL and Cohort curves share a chart.
def regex_match(completions, answer, **kwargs) -> list[float]:
    """Format: the completion, stripped, ends with a period (the task's `regex_match`)."""
    return _scores("regex_match", completions, answer)


def exact_match(completions, answer, **kwargs) -> list[float]:
    """Content: the completion's first word is the target word (the task's `exact_match`)."""
    return _scores("exact_match", completions, answer)


def make_trainer(model_path: str, output_dir: str, *, steps: int, num_generations: int = 8, prompts_per_step: int = 4,
                 max_new_tokens: int = 24, seed: int = 0, callbacks=()):
    """A GRPOTrainer on the task, on the CPU, with the settings of Cohort's SmolLM2 suggestion."""
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        output_dir=output_dir, use_cpu=True, max_steps=steps, seed=seed, report_to=[], save_strategy="no",
        logging_steps=1, per_device_train_batch_size=num_generations * prompts_per_step,
        num_generations=num_generations, max_completion_length=max_new_tokens, temperature=1.0,
        learning_rate=2e-4, lr_scheduler_type="constant", beta=0.0, disable_tqdm=True, dataloader_num_workers=0)
    peft_config = LoraConfig(r=16, lora_alpha=64, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model_path, reward_funcs=[regex_match, exact_match], args=config, peft_config=peft_config,
                          train_dataset=toy_format_dataset(max(64, steps * prompts_per_step), seed=seed))
    for callback in callbacks:
        trainer.add_callback(callback)
    return trainer


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="A local SmolLM2 folder (python -m trainer models build ...).")
    parser.add_argument("--url", default=os.environ.get("COHORT_URL"))
    parser.add_argument("--token", default=os.environ.get("COHORT_TOKEN"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="trl toy_format")
    parser.add_argument("--project", default=os.environ.get("COHORT_PROJECT"),
                        help="The Cohort project to log into (default: the token's, else your personal one).")
    parser.add_argument("--output-dir", default="trl-output")
    args = parser.parse_args(argv)

    from cohort.trl import CohortCallback

    trainer = make_trainer(args.model, args.output_dir, steps=args.steps, seed=args.seed)
    trainer.add_callback(CohortCallback(trainer, url=args.url, token=args.token, task="toy_format", name=args.name,
                                        tags=["trl"], project=args.project))
    trainer.train()


if __name__ == "__main__":
    main()
