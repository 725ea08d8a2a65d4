"""MHGPO's search system (rewriter -> BM25 -> reranker -> answerer) on real HotpotQA rows and corpus,
under the three MHGPO sampling strategies (FoF, IS, RR)."""

from __future__ import annotations

from tests.trainer.programs.fakes import assert_well_recorded, default_rewards, rows, scripted
from trainer.programs import get_program
from trainer.rewards import get_reward
from trainer.sampling import (
    apply_specific_rewards,
    fork_on,
    fork_on_first,
    independent_sampling,
    mhgpo_groups,
    propagate_rewards,
    round_robin,
)

# hotpotqa/train.jsonl line 0: Kerensky ... civil war that ended when? -> "October 1922";
# supporting titles: Socialist Revolutionary Party, Russian Civil War.
GOOD_QUERIES = "### Socialist Revolutionary Party Kerensky; Russian Civil War ###"
PENALTIES = ("mhgpo_penalty_rewriter", "mhgpo_penalty_reranker", "mhgpo_penalty_answerer")


def penalties(call) -> dict[str, float]:
    return {name: get_reward(name).per_call(call) for name in PENALTIES if name.endswith(call.module)}


def test_fork_on_first_records_every_agent_parses_and_scores(search_program):
    example = rows("hotpotqa/train.jsonl", 1)[0]
    rewriter = [
        GOOD_QUERIES,
        "### Kerensky; Bolsheviks; civil war; Russian Civil War end; October Revolution ###",  # 5 queries
        "Kerensky civil war",  # no ### block: format failure
        "### ; ###",
    ]  # a block without a query: format failure
    reranker = ["Document3, Document0", "0, 0, 42"]  # the second: a duplicate and an id out of range
    answerer = ["October 1922", " ".join(["the war ended in October 1922 after many years"] * 3)]
    generate = scripted({"rewriter": rewriter, "reranker": reranker, "answerer": answerer})
    trajs = fork_on_first(search_program, [example], group_size=4, generate=generate, example_ids=["h0"])
    for traj in trajs:
        assert_well_recorded(search_program, traj)
    good, many, no_block, empty_block = trajs

    assert [c.module for c in good.calls] == ["rewriter", "reranker", "answerer"]
    assert [c.parsed for c in good.calls[:1]] == [
        {"queries": ["Socialist Revolutionary Party Kerensky", "Russian Civil War"]}
    ]
    candidates = good.final_output["retrieved_titles"]
    assert {"Socialist Revolutionary Party", "Russian Civil War"} <= set(candidates) and len(candidates) <= 6
    assert good.calls[1].parsed == {"ids": [3, 0], "num_candidates": len(candidates)}
    assert good.final_output["selected_titles"] == [candidates[3], candidates[0]]
    for i, title in enumerate(candidates):  # Appendix B's document lines, in candidate order
        assert f"Document{i}: {{title: {title}, snippet: " in good.calls[1].prompt
    assert f"Document0: {{title: {candidates[3]}," in good.calls[2].prompt  # the answerer sees the selection
    assert good.final_output["answer"] == "October 1922"

    assert [len(t.calls) for t in trajs] == [3, 3, 1, 1]
    assert [t.failed for t in trajs] == [False, False, True, True]
    assert no_block.calls[0].parsed is None and empty_block.calls[0].parsed == {"queries": []}

    # Agent-specific rewards (MHGPO App. B) read the parsed outputs.
    assert [penalties(c) for c in good.calls] == [
        {"mhgpo_penalty_rewriter": 0.0},
        {"mhgpo_penalty_reranker": 0.0},
        {"mhgpo_penalty_answerer": 0.0},
    ]
    assert [penalties(c) for c in many.calls] == [
        {"mhgpo_penalty_rewriter": -0.5},
        {"mhgpo_penalty_reranker": -0.5},
        {"mhgpo_penalty_answerer": -1.0},
    ]
    assert penalties(no_block.calls[0]) == {"mhgpo_penalty_rewriter": -0.5}
    assert len(many.final_output["queries"]) == 5  # all recorded; the first max_queries=4 were searched
    assert many.final_output["selected_titles"] == [
        many.final_output["retrieved_titles"][0]
    ]  # 0 once, 42 ignored

    scores = default_rewards("search", example, good)
    assert scores == {
        "token_f1": 1.0,
        "mhgpo_penalty_rewriter": 0.0,
        "mhgpo_penalty_reranker": 0.0,
        "mhgpo_penalty_answerer": 0.0,
    }
    assert default_rewards("search", example, many)["token_f1"] < 0.5
    recall = get_reward("title_recall", prediction_field="retrieved_titles")
    assert recall(example, good.final_output, good) == 1.0
    assert set(good.final_output["selected_titles"]) == set(example["supporting_titles"])
    assert (
        get_reward("title_recall", prediction_field="selected_titles")(example, good.final_output, good)
        == 1.0
    )


def test_reranker_and_answerer_format_failures_keep_the_partial_trajectory(search_program):
    example = rows("hotpotqa/train.jsonl", 1, start=1)[0]
    generate = scripted(
        {
            "rewriter": [f"### {example['question']} ###"],
            "reranker": ["none of them", "", "Document1", "Document0"],
            "answerer": ["", "   \n"],
        }
    )
    trajs = fork_on_first(search_program, [example], group_size=4, generate=generate, example_ids=["h1"])
    for traj in trajs:
        assert_well_recorded(search_program, traj)
    assert [(len(t.calls), t.failed) for t in trajs] == [(2, True), (2, True), (3, True), (3, True)]
    # One query, k_per_query=3 passages: 3 candidates.
    assert trajs[0].calls[1].parsed == {"ids": None, "num_candidates": 3}
    assert trajs[1].calls[1].parsed == {"ids": [], "num_candidates": 3}  # selecting nothing does not parse
    assert get_reward("mhgpo_penalty_reranker").per_call(trajs[0].calls[1]) == -0.5


def test_forks_at_the_reranker_continue_from_one_shared_state(search_program):
    example = rows("hotpotqa/train.jsonl", 1)[0]
    generate = scripted(
        {"rewriter": [GOOD_QUERIES], "reranker": ["0", "1", "2"], "answerer": ["a", "b", "c"]}
    )
    trajs = fork_on(search_program, example, "reranker", group_size=3, generate=generate, example_id="h0")
    assert all(t.calls[0] is trajs[0].calls[0] for t in trajs)  # one rewriter call, three reranker forks
    assert [t.final_output["selected_titles"] for t in trajs] == [
        [trajs[0].final_output["retrieved_titles"][i]] for i in range(3)
    ]
    assert len({t.calls[2].prompt for t in trajs}) == 3  # each answerer saw its own fork's selection


def test_queries_that_find_nothing_still_reach_the_reranker(search_program):
    example = rows("hotpotqa/dev.jsonl", 1)[0]
    generate = scripted(
        {"rewriter": ["### the of and; zzzqqxx ###"], "reranker": ["0"], "answerer": ["unknown"]}
    )
    (traj,) = fork_on_first(search_program, [example], group_size=1, generate=generate)
    assert traj.final_output["retrieved_titles"] == [] and "(no documents)" in traj.calls[1].prompt
    assert get_reward("mhgpo_penalty_reranker").per_call(traj.calls[1]) == -0.5  # id 0 of 0 candidates
    assert default_rewards("search", example, traj)["token_f1"] == 0.0


def test_independent_sampling_gives_one_homogeneous_group_per_agent(search_program):
    examples = rows("hotpotqa/train.jsonl", 2)
    generate = scripted(
        {
            "rewriter": [GOOD_QUERIES, "### Kerensky ###"],
            "reranker": ["0, 1", "2"],
            "answerer": ["October 1922", "1917"],
        }
    )
    trajs = independent_sampling(
        search_program, examples, group_size=2, generate=generate, example_ids=["a", "b"]
    )
    assert len(trajs) == 2 * 3 * 2  # examples x fork agents x G
    for traj in trajs:
        assert_well_recorded(search_program, traj)
    groups = mhgpo_groups(trajs)
    assert sorted((g.example_id, g.module, len(g.members), g.kind) for g in groups) == sorted(
        (e, a, 2, "homogeneous") for e in ("a", "b") for a in ("rewriter", "reranker", "answerer")
    )
    # MHGPO end to end on the fake LM: F1 at the end, propagated back, plus each agent's penalty.
    by_id = dict(zip(["a", "b"], examples, strict=True))
    for traj in trajs:
        traj.total_reward = get_reward("token_f1", prediction_field="answer")(
            by_id[traj.example_id], traj.final_output, traj
        )
    propagate_rewards(trajs)
    apply_specific_rewards(trajs, {name.rsplit("_", 1)[1]: get_reward(name).per_call for name in PENALTIES})
    assert all(c.reward is not None for t in trajs for c in t.calls)
    answerer_group = next(g for g in groups if g.example_id == "a" and g.module == "answerer")
    assert sorted(m.call.reward for m in answerer_group.members) == [0.0, 1.0]


def test_round_robin_forks_at_drawn_agents_and_regroups_singletons(search_program):
    examples = rows("hotpotqa/train.jsonl", 6)
    generate = scripted(
        {
            "rewriter": [GOOD_QUERIES, "no block", "### a; b ###"],
            "reranker": ["0", "1, 1"],
            "answerer": ["x", "October 1922"],
        }
    )
    trajs = round_robin(
        search_program,
        examples,
        group_size=2,
        probs=[0.7, 0.1, 0.2],
        generate=generate,
        rng=0,
        example_ids=[f"q{i}" for i in range(6)],
    )
    for traj in trajs:
        assert_well_recorded(search_program, traj)
    assert {t.fork_point for t in trajs if t.fork_point} <= set(search_program.agents)
    assert any(t.failed for t in trajs) and any(not t.failed for t in trajs)
    assert all(len(g.members) >= 2 for g in mhgpo_groups(trajs))


def test_an_in_memory_corpus_works_like_a_file():
    corpus = [
        {"id": "d0", "title": "Ed Wood", "text": "Edward Davis Wood Jr. was an American filmmaker."},
        {"id": "d1", "title": "Scott Derrickson", "text": "Scott Derrickson is an American director."},
        {"id": "d2", "title": "Paris", "text": "Paris is the capital of France."},
    ]
    program = get_program("search", corpus=corpus, k_per_query=1)
    generate = scripted(
        {
            "rewriter": ["### Ed Wood nationality; Scott Derrickson ###"],
            "reranker": ["0, 1"],
            "answerer": ["American"],
        }
    )
    (traj,) = fork_on_first(
        program,
        [{"question": "Were Scott Derrickson and Ed Wood of the same nationality?", "answer": "yes"}],
        group_size=1,
        generate=generate,
    )
    assert traj.final_output["retrieved_titles"] == ["Ed Wood", "Scott Derrickson"]


def test_a_giant_id_is_a_format_failure_not_a_crash(search_program):
    # parse_reranker_ids raises past Python's 4300-digit int conversion limit; the program catches it.
    state = search_program.start(rows("hotpotqa/train.jsonl", 1)[0])
    state = search_program.step(state, "rewriter", GOOD_QUERIES).state
    result = search_program.step(state, "reranker", "Document" + "9" * 5000)
    assert result.parsed_ok is False and result.parsed == {"ids": None, "num_candidates": 6}
