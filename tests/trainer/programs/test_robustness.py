"""Any model output, any program: no exception, failures recorded, state never mutated, rewards computable."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trainer.programs.fakes import HOTPOT_CORPUS, assert_well_recorded, default_rewards, rows
from trainer.programs import get_program
from trainer.programs.toy import toy_examples
from trainer.sampling import fork_on_first

EXAMPLES = {
    "toy": lambda: toy_examples(1)[0],
    "banking77": lambda: rows("banking77/train.jsonl", 1)[0],
    "search": lambda: rows("hotpotqa/train.jsonl", 1)[0],
    "hover": lambda: rows("hover/dev.jsonl", 1)[0],
    "toolcall": lambda: rows("toolrl/test.jsonl", 1)[0],
    "math": lambda: rows("gsm8k/train.jsonl", 1)[0],
}

# Well-formed outputs per agent; the strategy below mutates them (truncates, splices in fragments of
# other formats) or replaces them with noise, so branches end at every depth, well formed or not.
VALID = {
    "echo": ["apple", "river stone"],
    "classify": ["The card is late.\nLabel: card_arrival", "**Label:** Card Arrival"],
    "rewriter": ["### Kerensky civil war; Russian Civil War ###", "### a; b; c; d; e ###"],
    "reranker": ["0, 1", "Document2, Document0", "5, 5, 99", "-1"],
    "answerer": ["October 1922", "it ended in October 1922 " * 5],
    "create_query": ["Query: Faxe\nQuery: Region Zealand", '["Faxe beer"]'],
    "summarize": ["Notes: x\nEnough: no", "Notes: y\nEnough: yes\nLabel: SUPPORTED", "Notes: z"],
    "tool_caller": [
        '<think> t </think>\n<tool_call>\n{"name": "GetNews", "parameters": {"page": "1"}}\n</tool_call>',
        "<think> t </think>\n<response> hi </response>",
    ],
    "solver": ["48 + 24 = 72\n#### 72", "Answer: 3.5"],
}
FRAGMENTS = [
    "###",
    ";",
    "Document1",
    "Label:",
    "Query:",
    "Notes:",
    "Enough: yes",
    "<think>",
    "</tool_call>",
    '{"name":',
    "####",
    "Answer:",
    "1e999",
    "[",
    "]",
    "\n",
    "\x00",
    "é",
    "😀",
    "None",
]


@st.composite
def completion(draw, agent: str) -> str:
    text = draw(st.sampled_from(VALID[agent]))
    how = draw(st.sampled_from(["keep", "keep", "truncate", "splice", "noise"]))
    if how == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    if how == "splice":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.sampled_from(FRAGMENTS)) + text[at:]
    if how == "noise":
        return draw(st.text(max_size=40))
    return text


@pytest.fixture(scope="module")
def programs():
    corpus = {"corpus_path": str(HOTPOT_CORPUS)}
    return {name: get_program(name, **(corpus if name in ("search", "hover") else {})) for name in EXAMPLES}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_any_completions_run_to_a_recorded_end(name, programs):
    program, example = programs[name], EXAMPLES[name]()
    original = copy.deepcopy(example)

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def run(data):
        trajs = fork_on_first(
            program,
            [example],
            group_size=2,
            generate=lambda agent, prompts: [data.draw(completion(agent)) for _ in prompts],
        )
        for traj in trajs:
            assert_well_recorded(program, traj)
            if not traj.failed:
                for value in default_rewards(name, example, traj).values():
                    assert value is None or isinstance(value, float)

    run()
    assert example == original  # the row the rewards read is untouched


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_step_never_mutates_the_state_it_forks_from(name, programs):
    program = programs[name]
    state = program.start(EXAMPLES[name]())
    snapshot = repr(state)
    for completion in [
        "",
        "garbage",
        "### a; b ###",
        "Query: a\nNotes: b\nEnough: no\nLabel: card_arrival\n#### 3",
    ]:
        agent = program.next_agent(state)
        result = program.step(state, agent, completion)
        assert repr(state) == snapshot
        assert result.state is not state
