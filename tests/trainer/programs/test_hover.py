"""The HoVer multi-hop program: query + notes per hop, stopping early, so call counts vary (MMGRPO B.3)."""

from __future__ import annotations

import numpy as np

from tests.trainer.programs.fakes import HOTPOT_CORPUS, assert_well_recorded, default_rewards, rows, scripted
from trainer.grouping import form_module_level_groups
from trainer.programs import get_program
from trainer.sampling import fork_on_first

# hover/dev.jsonl line 185: a 2-hop claim whose supporting titles (Faxe, Region Zealand) are in the
# bundled HotpotQA corpus (one of the 9 claims that are), label NOT_SUPPORTED.
FAXE_LINE = 185


def faxe_claim() -> dict:
    (example,) = rows("hover/dev.jsonl", 1, start=FAXE_LINE)
    assert example["supporting_titles"] == ["Faxe", "Region Zealand"]
    return example


def test_calls_vary_with_when_the_notes_say_enough(hover_program):
    example = faxe_claim()
    queries = ["Query: Faxe beer soft drinks\nQuery: southernmost administrative region Denmark"]
    notes = [
        "Notes: Faxe brewery is in Region Zealand.\nEnough: yes\nLabel: NOT_SUPPORTED",  # stops after hop 1
        "Notes: Faxe makes beer.\nEnough: no",  # goes on
        "Notes: Faxe makes beer.\nEnough: no",
    ]
    generate = scripted({"create_query": queries, "summarize": notes})
    trajs = fork_on_first(hover_program, [example], group_size=3, generate=generate, example_ids=["v0"])
    for traj in trajs:
        assert_well_recorded(hover_program, traj)
    lengths = [len(t.calls) for t in trajs]
    assert lengths[0] == 2 and max(lengths) == 6 and len(set(lengths)) >= 2  # 2 calls per hop, max_hops=3
    assert all(
        [c.module for c in t.calls] == ["create_query", "summarize"] * (len(t.calls) // 2) for t in trajs
    )
    assert [c.invocation_index for c in trajs[1].calls] == [0, 0, 1, 1, 2, 2][: len(trajs[1].calls)]

    first = trajs[0]
    assert first.calls[0].parsed == {
        "queries": ["Faxe beer soft drinks", "southernmost administrative region Denmark"]
    }
    assert first.calls[1].parsed == {
        "notes": "Faxe brewery is in Region Zealand.",
        "enough": True,
        "label": "NOT_SUPPORTED",
    }
    assert first.final_output["num_hops"] == 1 and first.final_output["label"] == "NOT_SUPPORTED"
    assert {"Faxe", "Region Zealand"} <= set(first.final_output["titles"])
    assert "[Faxe] " in first.calls[1].prompt and example["claim"] in first.calls[0].prompt
    assert default_rewards("hover", example, first) == {"title_recall": 1.0, "label_match": 1.0}

    longest = max(trajs, key=lambda t: len(t.calls))
    assert longest.final_output["num_hops"] == 3 and longest.final_output["label"] is None
    assert "last search" in longest.calls[-1].prompt and "last search" not in longest.calls[1].prompt
    assert "- Faxe makes beer." in longest.calls[2].prompt  # notes carry into the next hop's query
    titles = longest.final_output["titles"]
    assert len(titles) == len(set(titles)) and len(titles) <= 3 * hover_program.docs_per_hop
    assert default_rewards("hover", example, longest)["label_match"] == 0.0

    # MMGRPO groups over trajectories of different lengths: 'fill' keeps every invocation index.
    groups = form_module_level_groups(trajs, group_size=3, padding="fill", rng=np.random.default_rng(0))
    assert sorted({(g.module, g.invocation_index) for g in groups}) == [
        ("create_query", 0),
        ("create_query", 1),
        ("create_query", 2),
        ("summarize", 0),
        ("summarize", 1),
        ("summarize", 2),
    ]


def test_query_formats_and_format_failures(hover_program):
    example = faxe_claim()
    generate = scripted(
        {
            "create_query": [
                '["Faxe", "Region Zealand"]',
                "Query: None\nQuery: Faxe",
                "I would search for Faxe",
                "",
                "Query: Faxe",
            ],
            "summarize": ["Notes: enough.\nEnough: yes", "Notes: x\nEnough: yes", "Enough: yes"],
        }
    )
    trajs = fork_on_first(hover_program, [example], group_size=5, generate=generate, example_ids=["v1"])
    for traj in trajs:
        assert_well_recorded(hover_program, traj)
    assert trajs[0].calls[0].parsed == {"queries": ["Faxe", "Region Zealand"]}  # a JSON list is read too
    assert trajs[1].calls[0].parsed == {"queries": ["Faxe"]}  # "None" is DSPy's "no query here"
    assert [(len(t.calls), t.failed) for t in trajs] == [
        (2, False),
        (2, False),
        (1, True),
        (1, True),
        (2, True),
    ]
    assert trajs[4].calls[1].parsed is None  # notes without a Notes: section
    assert default_rewards("hover", example, trajs[0])["title_recall"] == 1.0


def test_labels_are_normalized_and_unknown_ones_dropped(hover_program):
    ok, parsed = hover_program.modules["summarize"].read("Notes: a\nb\nEnough: Yes.\nLabel: not supported")
    assert ok and parsed == {"notes": "a b", "enough": True, "label": "NOT_SUPPORTED"}
    assert hover_program.modules["summarize"].read("Notes: a\nLabel: maybe")[1]["label"] is None


def test_queries_per_hop_and_max_hops_are_options():
    program = get_program("hover", corpus_path=str(HOTPOT_CORPUS), max_hops=1, queries_per_hop=1)
    example = faxe_claim()
    generate = scripted(
        {"create_query": ["Query: Faxe\nQuery: Region Zealand"], "summarize": ["Notes: x\nEnough: no"]}
    )
    (traj,) = fork_on_first(program, [example], group_size=1, generate=generate)
    assert traj.calls[0].parsed == {"queries": ["Faxe"]} and len(traj.calls) == 2 and not traj.failed
    assert "up to 1 search queries" in traj.calls[0].prompt
