"""The toy program: examples generated in code, one `echo` module, exact match."""

from __future__ import annotations

import pytest

from tests.trainer.programs.fakes import assert_well_recorded, default_rewards, scripted
from trainer.config import RunConfig
from trainer.programs import get_program
from trainer.programs.toy import TOY_CORPUS, TOY_WORDS, ToyEcho, toy_examples
from trainer.sampling import fork_on_first


def test_examples_are_seeded_split_and_checked():
    assert toy_examples(8, seed=3) == toy_examples(8, seed=3)
    words = ("apple", "river")
    assert toy_examples(16, seed=3, words=words) != toy_examples(16, seed=4, words=words)
    train, dev = toy_examples(4, split="train"), toy_examples(4, split="dev")
    assert {e["id"] for e in train}.isdisjoint(e["id"] for e in dev)
    assert all(e["word"] == e["answer"] for e in train)
    program = get_program("toy", words=["apple", "river"])
    assert len(program.generate_examples("train")) == 512 and len(program.generate_examples("dev")) == 32
    assert {e["answer"] for e in program.generate_examples("train", seed=1)} == {"apple", "river"}
    with pytest.raises(ValueError, match="toy split must be one of"):
        program.generate_examples("test")
    with pytest.raises(ValueError, match="toy words must be some of"):
        get_program("toy", words=["banana"])
    with pytest.raises(ValueError, match="toy words must be some of"):
        get_program("toy", words="apple")


def test_tokenizer_corpus_holds_the_prompt_and_every_word():
    assert ToyEcho.tokenizer_corpus == TOY_CORPUS
    assert all(any(w in line for line in TOY_CORPUS) for w in TOY_WORDS)
    assert all(line.startswith("Repeat: ") for line in TOY_CORPUS)


def test_echo_reads_the_first_word_and_fails_on_nothing():
    program = get_program("toy")
    example = toy_examples(1)[0]
    generate = scripted({"echo": ["apple", "  apple pie\n", "river", "", "   \n"]})
    trajs = fork_on_first(program, [example], group_size=5, generate=generate, example_ids=["t"])
    assert generate.prompts == [("echo", "Repeat: apple\n")] * 5  # the fork: one prompt, 5 samples
    for traj in trajs:
        assert_well_recorded(program, traj)
    assert [t.failed for t in trajs] == [False, False, False, True, True]
    assert [t.calls[0].parsed for t in trajs] == ["apple", "apple", "river", None, None]
    scores = [default_rewards("toy", example, t) for t in trajs[:3]]
    assert [s["exact_match"] for s in scores] == [1.0, 1.0, 0.0]
    assert (
        scores[0]["char_f1"] == 1.0 and 0.0 < scores[2]["char_f1"] < 1.0
    )  # "river" shares an "e" with "apple"


def test_suggested_config_is_a_valid_run_config():
    config = RunConfig(**{**ToyEcho.suggested_config, "program": "toy"})
    assert [r.name for r in config.rewards] == ["exact_match", "char_f1"]
