"""The GSM8K solver: one module ending in `#### <number>` (GDPO 4.2 correctness + conditioned length)."""

from __future__ import annotations

import math

from tests.trainer.programs.fakes import assert_well_recorded, default_rewards, rows, scripted
from trainer.programs import get_program
from trainer.programs.math import parse_solution
from trainer.sampling import fork_on_first


def test_solver_reads_the_marked_number_and_scores_it():
    program = get_program("math")
    example = rows("gsm8k/train.jsonl", 1)[0]  # Natalia's clips: 72
    completions = [
        "April: 48. May: 48/2 = 24. Total 48 + 24 = 72.\n#### 72",
        "48 + 24 = 72\nAnswer: 72",
        "The answer is 71.",  # well formed, wrong
        "48 + 24 = 72",  # no marker
        "#### seventy-two",  # a marker without a number
        "",
        "####",
    ]
    trajs = fork_on_first(
        program,
        [example],
        group_size=len(completions),
        generate=scripted({"solver": completions}),
        example_ids=["m0"],
    )
    for traj in trajs:
        assert_well_recorded(program, traj)
    assert example["question"] in trajs[0].calls[0].prompt
    assert [t.failed for t in trajs] == [False, False, False, True, True, True, True]
    assert trajs[0].final_output == {"answer": 72, "text": completions[0]}
    assert trajs[2].calls[0].parsed["answer"] == 71
    scores = [default_rewards("math", example, t) for t in trajs[:3]]
    assert [s["numeric_match"] for s in scores] == [1.0, 1.0, 0.0]
    assert [s["length"] for s in scores] == [
        1.0,
        1.0,
        1.0,
    ]  # within 400 words (the condition is the trainer's)


def test_number_formats():
    assert parse_solution("so\n#### 1,234")[1]["answer"] == 1234
    assert parse_solution("#### -3.5")[1]["answer"] == -3.5
    assert parse_solution("#### 18 apples")[1]["answer"] == 18
    assert parse_solution("#### 1e400")[0] is False  # not a finite number
    ok, parsed = parse_solution("Answer: 0.5")
    assert ok and math.isclose(parsed["answer"], 0.5)
    assert parse_solution("#### 5\nThe answer is")[0] is False  # the last marker has no number
