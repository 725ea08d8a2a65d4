"""Tool calling in the ToolRL format (GDPO Section 4.1, Appendix B): `<think>` reasoning, then
`<tool_call>` lines of JSON calls and/or a `<response>`. The format and correctness rewards parse the
text, so a malformed answer is scored low rather than treated as a parse failure."""

from __future__ import annotations

from typing import Any

from trainer.programs.registry import register_program
from trainer.programs.single import SingleModuleProgram
from trainer.rewards.toolrl import parse_tool_calls

DEFAULT_SYSTEM = ("You can call tools. First think inside <think></think>, then either call tools inside "
                  "<tool_call></tool_call> (one JSON object per line with 'name' and 'parameters') or answer "
                  "inside <response></response>.")


@register_program
class ToolCaller(SingleModuleProgram):
    name = "toolcall"
    title = "Tool calling (ToolRL format)"
    description = "One module answers a dialogue with <think>, then <tool_call> JSON lines or a <response>."
    module = "tool_caller"
    agents = ("tool_caller",)
    dataset_kind = "toolcall"
    example_fields = ("system", "question", "tools", "gt_tool_calls")
    default_rewards = (
        {"name": "toolrl_format", "weight": 1.0, "params": {}},
        {"name": "toolrl_correctness", "weight": 1.0, "params": {}},
    )

    def instructions(self, example: dict[str, Any]) -> str:
        # ToolRL rows carry their own system prompt (the tool list and the format), as in the paper.
        return example.get("system") or DEFAULT_SYSTEM

    def inputs(self, example: dict[str, Any]) -> str:
        return str(example["question"])

    def parse(self, completion: str) -> tuple[bool, Any]:
        calls = parse_tool_calls(completion)
        # Only an empty answer is unusable; a malformed one is the format reward's business.
        return bool(completion.strip()), {"tool_calls": calls}

    def output(self, completion: str, parsed: Any) -> Any:
        return completion
