"""The ToolRL tool caller: `<think>` then `<tool_call>` JSON lines and/or `<response>` (GDPO App. B/C)."""

from __future__ import annotations

from tests.trainer.programs.fakes import assert_well_recorded, default_rewards, rows, scripted
from trainer.programs import get_program
from trainer.sampling import fork_on_first


def test_gold_answers_score_full_and_malformed_ones_are_scored_not_failed():
    program = get_program("toolcall")
    calls_row, response_row = rows("toolrl/test.jsonl", 2)  # toolrl-test-000 calls GetNews; -001 responds
    gold_call = calls_row["gt_tool_calls"][0]
    completions = [
        calls_row["answer"],
        '<think> swap </think>\n<tool_call>\n{"name": "GetNews", "parameters": {"page": "2"}}\n</tool_call>',
        '<think>x</think>\n<tool_call>\n{"name": "GetNews", "parameters": {"page": "1"\n</tool_call>',  # broken JSON
        "<think> I will call GetNews",  # truncated tags
        "just prose",
        "",
    ]
    trajs = fork_on_first(
        program,
        [calls_row],
        group_size=len(completions),
        generate=scripted({"tool_caller": completions}),
        example_ids=["t0"],
    )
    for traj in trajs:
        assert_well_recorded(program, traj)
    prompt = trajs[0].calls[0].prompt
    assert prompt.startswith(calls_row["system"]) and prompt.rstrip().endswith(calls_row["question"])
    assert [t.failed for t in trajs] == [False] * 5 + [True]  # only an empty answer is a format failure
    assert trajs[0].final_output == calls_row["answer"]  # the raw text: the rewards parse it
    assert trajs[0].calls[0].parsed == {
        "think": "I should use the appropriate tool with proper parameters to respond to the user's need.",
        "tool_calls": [gold_call],
        "response": None,
        "format_ok": True,
    }
    assert trajs[2].calls[0].parsed["tool_calls"] is None
    scores = [default_rewards("toolcall", calls_row, t) for t in trajs[:5]]
    assert [s["toolrl_format"] for s in scores] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert scores[0]["toolrl_correctness"] == 3.0 and scores[2]["toolrl_correctness"] == -3.0
    assert -3.0 < scores[1]["toolrl_correctness"] < 3.0  # right tool and key, wrong value
    assert scores[4]["toolrl_correctness"] == -3.0  # no call where one was due

    (responded,) = fork_on_first(
        program, [response_row], group_size=1, generate=scripted({"tool_caller": [response_row["answer"]]})
    )
    assert responded.calls[0].parsed["tool_calls"] == [] and responded.calls[0].parsed["response"]
    assert default_rewards("toolcall", response_row, responded) == {
        "toolrl_format": 1.0,
        "toolrl_correctness": 3.0,
    }


def test_a_row_without_a_system_prompt_lists_its_tools():
    program = get_program("toolcall")
    row = {k: v for k, v in rows("toolrl/sft.jsonl", 1)[0].items() if k != "system"}
    prompt = program.process_prompt(program.start(row), "tool_caller")
    assert "**Available Tools**" in prompt and all(t["name"] in prompt for t in row["tools"])
    assert "<tool_call>" in prompt and prompt.rstrip().endswith(row["question"])
