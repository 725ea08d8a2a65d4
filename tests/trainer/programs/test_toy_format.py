"""The two-reward toy task (trainer/programs/toy_format.py): its rewards on hand-written
completions, its registration and suggested config, and a few real training steps."""

from __future__ import annotations

import doctest

import pytest

import trainer.programs.toy_format as toy_format
from trainer.config import RunConfig
from trainer.programs import get_program, program_info
from trainer.rewards import get_reward


def scores(completion: str, word: str = "apple") -> tuple[float, float]:
    """(format, content) of one completion, through the program and its default rewards."""
    program = get_program("toy_format")
    example = {"word": word, "answer": word}
    state = program.start(example)
    result = program.step(state, program.next_agent(state), completion)
    assert result.parsed_ok  # the format is scored by a reward, never a parse failure
    output = program.final_output(result.state)
    specs = program_info("toy_format")["default_rewards"]
    return tuple(get_reward(s["name"], **s["params"])(example, output) for s in specs)


@pytest.mark.parametrize(("completion", "expected"), [
    (" apple.", (1.0, 1.0)),          # both right
    ("apple=.", (1.0, 1.0)),          # the first run of letters is the word; the text ends with "."
    ("Apple .\n", (1.0, 1.0)),        # case and trailing whitespace do not matter
    ("apple", (0.0, 1.0)),            # content right, format wrong
    ("apple good at", (0.0, 1.0)),
    ("river.", (1.0, 0.0)),           # format right, content wrong
    ("pear apple.", (1.0, 0.0)),      # the first word is not the target
    ("applesauce", (0.0, 0.0)),       # both wrong
    ("", (0.0, 0.0)),
])
def test_rewards_on_hand_written_completions(completion, expected):
    assert scores(completion) == expected


def test_program_is_registered_and_its_suggested_config_validates():
    info = program_info("toy_format")
    assert info["agents"] == ["echo"] and info["generates_examples"]
    assert [r["name"] for r in info["default_rewards"]] == ["regex_match", "exact_match"]
    for estimator in ("grpo", "gdpo"):
        config = RunConfig.from_dict({**info["suggested_config"], "program": "toy_format", "estimator": estimator})
        assert config.estimator == estimator and len(config.rewards) == 2


def test_examples_are_seeded_and_words_are_checked():
    assert doctest.testmod(toy_format).failed == 0
    program = get_program("toy_format", words=["apple", "river"])
    assert program.generate_examples("train", seed=3) == program.generate_examples("train", seed=3)
    assert {e["answer"] for e in program.generate_examples("train")} == {"apple", "river"}
    with pytest.raises(ValueError, match="toy_format words must be some of"):
        get_program("toy_format", words=["banana"])


@pytest.mark.usefixtures("torch_setup")
def test_a_few_gdpo_steps_log_both_rewards_and_the_advantage_resolution(tmp_path):
    from tests.trainer.run.test_loop import ListReporter
    from trainer.run.loop import Trainer

    info = program_info("toy_format")
    config = RunConfig.from_dict({**info["suggested_config"], "program": "toy_format", "estimator": "gdpo",
                                  "steps": 3, "eval_every": 0, "checkpoint_every": 0})
    reporter = ListReporter()
    trainer = Trainer(config, tmp_path / "run", reporter, model_cache_dir=tmp_path / "models")
    assert trainer.run() == "succeeded"
    assert len(reporter.events) == 3
    for metrics in (event["metrics"] for event in reporter.events):
        assert 0.0 <= metrics["reward/regex_match"] <= 1.0 and 0.0 <= metrics["reward/exact_match"] <= 1.0
        assert 0.0 < metrics["adv_resolution"] <= 1.0
