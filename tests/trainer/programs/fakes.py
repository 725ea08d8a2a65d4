"""Shared helpers for the program tests: real data rows, scripted fake LMs, trajectory checks."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.programs import program_info
from trainer.rewards import get_reward
from trainer.trajectory import Trajectory

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"
HOTPOT_CORPUS = DATA / "hotpotqa" / "corpus.jsonl"


def rows(relative: str, n: int, *, start: int = 0) -> list[dict[str, Any]]:
    """Lines start..start+n-1 of a JSONL file under ../shared/data (a missing file fails the test)."""
    with open(DATA / relative, encoding="utf-8") as handle:
        return [json.loads(line) for line in itertools.islice(handle, start, start + n)]


def scripted(replies: Mapping[str, Sequence[str]]) -> Callable[[str, list[str]], list[str]]:
    """A deterministic fake LM: each agent answers its replies in turn, cycling; records the prompts."""
    cycles = {agent: itertools.cycle(texts) for agent, texts in replies.items()}
    seen: list[tuple[str, str]] = []

    def generate(agent: str, prompts: list[str]) -> list[str]:
        seen.extend((agent, p) for p in prompts)
        return [next(cycles[agent]) for _ in prompts]

    generate.prompts = seen  # type: ignore[attr-defined]
    return generate


def assert_well_recorded(program: Any, trajectory: Trajectory) -> None:
    """The sampler's contract for any program: a failed trajectory ends at its one failed call (MMGRPO
    3.1 partial trajectory) and has no final output; a finished one parsed every call."""
    calls = trajectory.calls
    assert calls, "every trajectory records at least its first call"
    assert all(c.module in program.agents for c in calls)
    assert all(c.parsed_ok for c in calls[:-1])
    if trajectory.failed:
        assert calls[-1].parsed_ok is False and trajectory.final_output is None
    else:
        assert calls[-1].parsed_ok is True and trajectory.final_output is not None
    json.dumps(trajectory.to_dict(), allow_nan=False)  # the dashboard stores it as JSON


def default_rewards(
    program_name: str, example: Mapping[str, Any], trajectory: Trajectory
) -> dict[str, float | None]:
    """Each default reward of the program on a trajectory, as the trainer computes them."""
    return {
        spec["name"]: get_reward(spec["name"], **spec["params"])(example, trajectory.final_output, trajectory)
        for spec in program_info(program_name)["default_rewards"]
    }
