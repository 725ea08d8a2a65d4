"""A two-reward toy task for GDPO: "repeat the word, then end with a period". No data file.

GDPO (Sections 4-5) pairs an easy format reward with a harder correctness reward. This task does the
same on the tiny random Llama, on a CPU, in seconds: one module, `echo`; its output is
``{"answer": <first run of letters>, "text": <the whole completion>}`` and the suggested rewards are

- ``regex_match`` on ``text`` with pattern ``.*\\.``: the completion ends with a period (format, binary);
- ``exact_match`` on ``answer``: the first word is the target word (content, binary).

The completion always parses: the format is what the first reward scores, and a parse failure would
zero both rewards at once (the format failure reward), hiding the difference GDPO is about.

Measured on 2 shared CPU cores with `suggested_config` (temperature 2, 3 new tokens, 4 examples x 16
rollouts, LoRA at 2e-3, 150 steps, about 25 s a run), one word ("apple"), seeds 0-4, GRPO and GDPO
(benchmarks/gdpo_vs_grpo.py; the table is in
docs/explanation/decisions/the-two-reward-task-and-grpo-vs-gdpo.md):

- both rewards start low: over the first 15 steps the period is in 0.1-0.3 % of completions, the
  word in 0.1-4 %;
- whichever the model happens on first rises first, to about 0.99 within 20-60 steps (seed 3: the
  period at step 30; seed 4: the word at step 25, the period at step 80);
- the policy then collapses onto one completion (e.g. "apple=."), so a reward not yet found by then
  is never found: in 3 of the 10 runs one reward stayed at 0 (seed 2 the period, seed 3 the word,
  both estimators; seed 4 the period under GDPO only).

So the format reward is not reliably the easier one here, unlike GDPO's tasks: for the tiny random
model both are one rare token to hit, and which is hit first depends on the seed.

Designs measured and set aside (150 steps, GRPO, seed 0, initial -> final reward means):

- "[word]" format (starts with "["): 0.001 -> 0.0 while the word rose to 0.99: never sampled;
- "exactly one word" format: starts at 0.45 (too easy) and the word's exact match stays 0;
- the whole completion equal to the word (exact match without a first-word rule): always 0;
- two or four words: the model learns one word whatever the prompt (the first word plateaus near
  1/2 or 1/4) and collapses before it learns to copy; it copied in one of ten runs with two words.
  Neither a lower learning rate (1e-3, 5e-4) nor raw prompts (the word last in the prompt) helped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from trainer.config import SMOLLM2_MODEL
from trainer.programs.registry import register_program
from trainer.programs.toy import DEFAULT_WORDS, TOY_WORDS, toy_examples
from trainer.rollouts.prompts import Message, chat_messages
from trainer.rollouts.sampling import StepResult

DEV_SIZE = 32
_LETTERS = re.compile(r"[A-Za-z]+")


def first_word(text: str) -> str:
    """The first run of ASCII letters in `text`, or "" when there is none.

    >>> first_word(" apple=."), first_word("[river]"), first_word("42 .")
    ('apple', 'river', '')
    """
    match = _LETTERS.search(text or "")
    return match.group(0) if match else ""


@dataclass(frozen=True)
class ToyFormatState:
    word: str
    output: dict[str, str] | None = None
    done: bool = False


@register_program
class ToyFormat:
    name = "toy_format"
    title = "Toy: repeat the word, end with a period"
    description = ("Synthetic two-reward task for comparing GRPO and GDPO on a CPU: the model must repeat one "
                   "word (content) and end its answer with a period (format).")
    agents = ("echo",)
    dataset_kind = None
    example_fields = ("word", "answer")
    default_rewards = (
        {"name": "regex_match", "weight": 1.0, "params": {"pattern": r".*\.", "prediction_field": "text"}},
        {"name": "exact_match", "weight": 1.0, "params": {"prediction_field": "answer"}},
    )
    tokenizer_corpus = tuple(f"Repeat: {w}\n{w}." for w in TOY_WORDS)
    options = ("words",)
    suggested_config = {"temperature": 2.0, "max_new_tokens": 3, "max_context_length": 64, "group_size": 16,
                        "rollouts_per_example": 16, "examples_per_step": 4, "learning_rate": 2e-3, "steps": 150,
                        "micro_batch_size": 64, "rewards": [dict(r) for r in default_rewards]}

    # The real instruct model learns both rewards on a CPU with these (README "A real model learns"):
    # the period within about 10 steps, the first word within about 30; 13-20 s a step on 2 cores.
    model_suggestions = {SMOLLM2_MODEL: {
        "model": SMOLLM2_MODEL, "temperature": 1.0, "max_new_tokens": 24, "max_context_length": 256,
        "group_size": 8, "rollouts_per_example": 8, "examples_per_step": 4, "learning_rate": 2e-4, "steps": 40,
        "micro_batch_size": 16}}

    def __init__(self, words: tuple[str, ...] | list[str] = DEFAULT_WORDS):
        unknown = [w for w in words if w not in TOY_WORDS]
        if not words or unknown:
            raise ValueError(f"toy_format words must be some of {', '.join(TOY_WORDS)}; got {list(words)}")
        self.words = tuple(words)

    def generate_examples(self, split: str, *, seed: int = 0) -> list[dict[str, Any]]:
        size = 512 if split == "train" else DEV_SIZE
        return toy_examples(size, seed=seed if split == "train" else seed + 1, words=self.words)

    def start(self, example: dict[str, Any]) -> ToyFormatState:
        return ToyFormatState(word=example["word"])

    def has_next(self, state: ToyFormatState) -> bool:
        return not state.done

    def next_agent(self, state: ToyFormatState) -> str:
        return "echo"

    def process_prompt(self, state: ToyFormatState, agent: str) -> list[Message]:
        return chat_messages("Repeat the word and end with a period.", f"Repeat: {state.word}")

    def step(self, state: ToyFormatState, agent: str, completion: str) -> StepResult:
        output = {"answer": first_word(completion), "text": completion.strip()}
        return StepResult(replace(state, output=output, done=True), True, output)

    def final_output(self, state: ToyFormatState) -> dict[str, str] | None:
        return state.output
