"""Each built-in program on real rows of ../shared/data with scripted completions."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.conftest import SHARED_DATA
from trainer.programs import get_program, list_programs
from trainer.rewards import get_reward
from trainer.rollouts.sampling import AgentProgram, fork_on_first, independent_sampling, round_robin


def rows(relative: str, n: int) -> list[dict]:
    with open(SHARED_DATA / relative, encoding="utf-8") as handle:
        return [json.loads(line) for line in itertools.islice(handle, n)]


def scripted(replies: dict[str, list[str]]):
    """A fake LM: each agent's replies in turn, cycling."""
    cycles = {agent: itertools.cycle(texts) for agent, texts in replies.items()}
    return lambda agent, prompts: [next(cycles[agent]) for _ in prompts]


CORPUS = str(SHARED_DATA / "hotpotqa" / "corpus.jsonl")


def test_every_program_is_registered_with_its_description():
    builtins = [p for p in list_programs() if p["distribution"] == "cohort"]  # plugins add their own
    assert {p["name"] for p in builtins} == {"toy", "toy_format", "arith_format", "banking77", "search", "hover", "toolcall",
                                                "math", "word_math"}  # word_math: an entry point of Cohort's own
    for info in builtins:
        assert info["agents"] and info["title"] and info["default_rewards"]
        for reward in info["default_rewards"]:
            get_reward(reward["name"], **reward.get("params", {}))  # every default reward exists
    assert isinstance(get_program("search", corpus_path=CORPUS), AgentProgram)


def test_unknown_program_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown program 'nope'; known programs: arith_format, banking77, .*hover"):
        get_program("nope")


def test_banking77_parses_the_label_and_fails_without_one():
    examples = rows("banking77/train.jsonl", 2)
    program = get_program("banking77")
    program.observe_examples(rows("banking77/train.jsonl", 400))
    assert examples[0]["label"] in program.labels
    gold = examples[0]["label"]
    trajs = fork_on_first(program, examples[:1], group_size=3, generate=scripted(
        {"classify": [f"The card has not come.\nLabel: {gold}", "no idea", "Label:  "]}), example_ids=["b0"])
    assert [t.failed for t in trajs] == [False, True, True]
    assert trajs[0].final_output == gold
    assert get_reward("label_match")(examples[0], trajs[0].final_output, trajs[0]) == 1.0


def test_math_reads_the_final_number():
    example = rows("gsm8k/train.jsonl", 1)[0]
    program = get_program("math")
    trajs = fork_on_first(program, [example], group_size=2, generate=scripted(
        {"solver": [f"Some steps.\n#### {example['answer']}", "I cannot solve this"]}), example_ids=["m0"])
    assert [t.failed for t in trajs] == [False, True]
    assert get_reward("numeric_match")(example, trajs[0].final_output, trajs[0]) == 1.0


def test_toolcall_gold_answer_scores_full_and_malformed_json_scores_low():
    example = next(r for r in rows("toolrl/test.jsonl", 20) if r["gt_tool_calls"])
    program = get_program("toolcall")
    broken = "<think>x</think>\n<tool_call>\n{\"name\": \"oops\"\n</tool_call>"
    trajs = fork_on_first(program, [example], group_size=2, generate=scripted({"tool_caller": [example["answer"], broken]}),
                          example_ids=["t0"])
    assert example["system"] in trajs[0].calls[0].prompt
    fmt, correct = get_reward("toolrl_format"), get_reward("toolrl_correctness")
    assert (fmt(example, trajs[0].final_output, trajs[0]), correct(example, trajs[0].final_output, trajs[0])) == (1.0, 3.0)
    assert correct(example, trajs[1].final_output, trajs[1]) == -3.0
    assert not trajs[1].failed  # malformed output is the rewards' business, not a parse failure


SEARCH_REPLIES = {
    "rewriter": ["### Scott Derrickson nationality; Ed Wood nationality ###", "no hashes here",
                 "### a; b; c; d; e ###"],
    "reranker": ["Document0, Document1", "Document0, Document0, Document99"],
    "answerer": ["yes", "They were both American film directors who worked in Hollywood for many many years indeed"],
}


def test_search_system_fof_records_every_agent_and_failures():
    example = rows("hotpotqa/train.jsonl", 1)[0]
    program = get_program("search", corpus_path=CORPUS)
    trajs = fork_on_first(program, [example], group_size=3, generate=scripted(SEARCH_REPLIES), example_ids=["h0"])
    ok, failed_at_rewriter, many_queries = trajs
    assert [c.module for c in ok.calls] == ["rewriter", "reranker", "answerer"]
    assert ok.final_output["answer"] == "yes" and len(ok.final_output["retrieved_titles"]) >= 2
    assert failed_at_rewriter.failed and [c.module for c in failed_at_rewriter.calls] == ["rewriter"]
    assert "Document0:" in ok.calls[1].prompt
    # Agent-specific penalties read the parsed outputs (MHGPO Appendix B).
    assert get_reward("mhgpo_penalty_rewriter").per_call(many_queries.calls[0]) == -0.5
    assert get_reward("mhgpo_penalty_reranker").per_call(many_queries.calls[1]) == -0.5  # duplicate, out of range
    assert get_reward("mhgpo_penalty_answerer").per_call(many_queries.calls[2]) == 0.0
    f1 = get_reward("token_f1", prediction_field="answer")
    assert f1(example, ok.final_output, ok) == (1.0 if example["answer"] == "yes" else 0.0)


def test_search_system_under_is_and_rr():
    examples = rows("hotpotqa/train.jsonl", 4)
    program = get_program("search", corpus_path=CORPUS)
    replies = {**SEARCH_REPLIES, "rewriter": [SEARCH_REPLIES["rewriter"][0]]}
    trajs = independent_sampling(program, examples[:1], group_size=2, generate=scripted(replies), example_ids=["q"])
    groups = {c.group_id for t in trajs for c in t.calls if c.group_id}
    assert len(groups) == 3  # one homogeneous group per agent
    trajs = round_robin(program, examples, group_size=2, probs=[0.7, 0.1, 0.2], generate=scripted(replies),
                        example_ids=[f"q{i}" for i in range(4)], rng=0)
    assert {t.fork_point for t in trajs} <= set(program.agents)


def test_hover_has_a_variable_number_of_calls():
    example = rows("hover/dev.jsonl", 1)[0]
    program = get_program("hover", corpus_path=CORPUS, max_hops=3)
    replies = {"create_query": ["Query: " + example["claim"][:60]],
               "summarize": ["Notes: found it\nEnough: yes", "Notes: not yet\nEnough: no", "Notes: still no\nEnough: no"]}
    trajs = fork_on_first(program, [example], group_size=3, generate=scripted(replies), example_ids=["v0"])
    lengths = sorted(len(t.calls) for t in trajs)
    assert lengths[0] == 2 and lengths[-1] > 2  # stopped after one hop vs went on
    assert all(t.final_output["titles"] for t in trajs)
    recall = get_reward("title_recall", prediction_field="titles")
    assert all(0.0 <= recall(example, t.final_output, t) <= 1.0 for t in trajs)


def test_hover_without_a_query_line_is_a_format_failure():
    example = rows("hover/dev.jsonl", 1)[0]
    program = get_program("hover", corpus_path=CORPUS)
    trajs = fork_on_first(program, [example], group_size=1, generate=scripted({"create_query": ["hmm"],
                                                                                "summarize": ["x"]}), example_ids=["v"])
    assert trajs[0].failed and len(trajs[0].calls) == 1


def test_corpus_programs_explain_a_missing_corpus():
    for name in ("search", "hover"):
        with pytest.raises(ValueError, match="needs a retrieval corpus"):
            get_program(name)


def test_toy_examples_are_seeded_and_checked():
    import doctest

    import trainer.programs.toy as toy

    assert doctest.testmod(toy).failed == 0
    program = get_program("toy", words=["apple", "river"])
    assert program.generate_examples("train", seed=3) == program.generate_examples("train", seed=3)
    assert {e["answer"] for e in program.generate_examples("train")} == {"apple", "river"}
    with pytest.raises(ValueError, match="toy words must be some of"):
        get_program("toy", words=["banana"])
