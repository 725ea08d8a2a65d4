"""Banking77: one chain-of-thought module ending in `Label: <intent>` (MMGRPO B.1)."""

from __future__ import annotations

import json

from tests.trainer.programs.fakes import DATA, assert_well_recorded, default_rewards, rows, scripted
from trainer.programs import get_program
from trainer.sampling import fork_on_first

LABELS = json.loads((DATA / "banking77" / "labels.json").read_text(encoding="utf-8"))


def test_label_set_from_the_option_or_the_training_rows():
    assert get_program("banking77", labels=LABELS).labels == tuple(LABELS)
    program = get_program("banking77")
    program.observe_examples(rows("banking77/train.jsonl", 3) + rows("banking77/test.jsonl", 3, start=3000))
    assert program.labels == ("card_arrival", "verify_my_identity")  # sorted, unique
    given = get_program("banking77", labels=["a", "b"])
    given.observe_examples(rows("banking77/train.jsonl", 3))
    assert given.labels == ("a", "b")  # an explicit label list wins


def test_classifier_parses_labels_and_records_format_failures():
    program = get_program("banking77", labels=LABELS)
    example = rows("banking77/train.jsonl", 1)[0]  # "I am still waiting on my card?" -> card_arrival
    completions = [
        "The customer is waiting for a card to arrive.\nLabel: card_arrival",
        "Waiting for delivery.\n**Label:** Card Arrival.",  # a spelling variant of a known label
        "They lost the card.\nLabel: lost_or_stolen_card",  # wrong but well formed
        "Label: card_arival",  # not one of the 77 intents (DSPy Literal: does not parse)
        "I think it is card_arrival",  # no Label line
        "",
        "Label:",  # truncated
        "\x00\x01 ### [[{",
    ]
    trajs = fork_on_first(
        program,
        [example],
        group_size=len(completions),
        generate=scripted({"classify": completions}),
        example_ids=["b0"],
    )
    for traj in trajs:
        assert_well_recorded(program, traj)
    prompt = trajs[0].calls[0].prompt
    assert example["text"] in prompt and "card_arrival" in prompt and "lost_or_stolen_card" in prompt
    assert [t.failed for t in trajs] == [False, False, False, True, True, True, True, True]
    assert trajs[0].calls[0].parsed == {
        "reasoning": "The customer is waiting for a card to arrive.",
        "label": "card_arrival",
    }
    assert trajs[3].calls[0].parsed == {"reasoning": "", "label": "card_arival"}  # kept for the dashboard
    assert [t.final_output for t in trajs[:3]] == ["card_arrival", "card_arrival", "lost_or_stolen_card"]
    assert [default_rewards("banking77", example, t)["label_match"] for t in trajs[:3]] == [1.0, 1.0, 0.0]


def test_without_a_label_set_any_label_parses():
    program = get_program("banking77")
    example = rows("banking77/test.jsonl", 1)[0]
    (traj,) = fork_on_first(
        program, [example], group_size=1, generate=scripted({"classify": ["Label: whatever"]})
    )
    assert not traj.failed and traj.final_output == "whatever"
    assert "(any intent name)" in traj.calls[0].prompt
