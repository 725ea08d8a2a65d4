"""The program registry: what the web app mirrors, how programs are built, what registration checks."""

from __future__ import annotations

import json

import pytest

from tests.trainer.programs.fakes import HOTPOT_CORPUS
from trainer.config import RewardSpec
from trainer.programs import PROGRAMS, Program, get_program, list_programs, program_info, register_program
from trainer.programs.registry import program_options
from trainer.sampling import AgentProgram

BUILT_IN = {"toy", "banking77", "search", "hover", "toolcall", "math"}
CORPUS = {"corpus_path": str(HOTPOT_CORPUS)}


def build(name: str):
    return get_program(name, **(CORPUS if program_info(name)["needs_corpus"] else {}))


def test_every_built_in_program_is_listed_as_plain_json():
    infos = list_programs()
    assert {i["name"] for i in infos} == BUILT_IN
    assert [i["name"] for i in infos] == sorted(BUILT_IN)
    json.dumps(infos, allow_nan=False)
    kinds = {i["name"]: i["dataset_kind"] for i in infos}
    assert kinds == {
        "toy": None,
        "banking77": "classification",
        "search": "qa",
        "hover": "claim",
        "toolcall": "toolcall",
        "math": "math",
    }
    for info in infos:
        assert info["title"] and info["description"] and info["agents"] and info["example_fields"]
        assert info["generates_examples"] == (info["dataset_kind"] is None)


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_each_program_implements_the_sampling_protocol_and_declares_its_modules(name):
    program = build(name)
    assert isinstance(program, AgentProgram)
    assert list(program.agents) == program_info(name)["agents"] == list(program.modules)
    assert all(program.modules[a].name == a for a in program.agents)


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_default_rewards_are_full_run_config_reward_tables(name):
    for spec in program_info(name)["default_rewards"]:
        assert set(spec) == {"name", "weight", "params", "condition_on", "threshold"}
        RewardSpec(**spec)  # validates the reward name and parameters like a run form does


def test_paper_reward_choices():
    rewards = {i["name"]: [r["name"] for r in i["default_rewards"]] for i in list_programs()}
    assert rewards["search"] == [
        "token_f1",
        "mhgpo_penalty_rewriter",
        "mhgpo_penalty_reranker",
        "mhgpo_penalty_answerer",
    ]  # MHGPO App. B: F1 shared, penalties per agent
    assert rewards["toolcall"] == ["toolrl_format", "toolrl_correctness"]  # GDPO App. C
    math_length = program_info("math")["default_rewards"][1]
    assert (math_length["name"], math_length["condition_on"], math_length["threshold"]) == (
        "length",
        "numeric_match",
        1.0,
    )


def test_options_are_listed_with_defaults():
    assert program_options("hover")["max_hops"] == 3
    assert set(program_options("search")) >= {"corpus_path", "corpus", "max_queries", "k_per_query"}
    assert program_options("toy") == {"words": ["apple"]}
    assert program_options("math") == {}


def test_unknown_program_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown program 'nope'; known programs: banking77, hover, math"):
        get_program("nope")
    with pytest.raises(ValueError, match="unknown program"):
        program_info("nope")


def test_unknown_option_lists_the_accepted_ones():
    with pytest.raises(
        ValueError, match=r"program 'math' takes no option\(s\) corpus_path; its options: \(none\)"
    ):
        get_program("math", corpus_path="x.jsonl")
    with pytest.raises(ValueError, match="its options: words"):
        get_program("toy", word="apple")


@pytest.mark.parametrize("name", ["search", "hover"])
def test_retrieval_programs_explain_a_missing_or_doubled_corpus(name, tmp_path):
    with pytest.raises(ValueError, match="needs a retrieval corpus"):
        get_program(name)
    with pytest.raises(ValueError, match="does not exist"):
        get_program(name, corpus_path=str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="either corpus or corpus_path"):
        get_program(name, corpus_path=str(HOTPOT_CORPUS), corpus=[{"id": "d", "title": "t", "text": "x"}])
    with pytest.raises(ValueError, match="corpus is empty"):
        get_program(name, corpus=[])


def test_a_corpus_file_is_indexed_once_for_every_program_instance(search_program, hover_program):
    again = get_program("search", corpus_path=str(HOTPOT_CORPUS))
    assert again.index is search_program.index is hover_program.index


def _program(registry_name: str, **attributes):
    return type(
        "Fake",
        (Program,),
        {
            "name": registry_name,
            "title": "Fake",
            "description": "A fake.",
            "agents": ("a",),
            "default_rewards": ({"name": "exact_match"},),
            **attributes,
        },
    )


@pytest.mark.parametrize(
    "attributes, message",
    [
        ({"title": ""}, "must define 'title'"),
        ({"name": "Bad Name"}, "lowercase slug"),
        ({"agents": ("a", "a")}, "lists an agent twice"),
        ({"dataset_kind": "images"}, "dataset_kind must be one of"),
        ({"default_rewards": ()}, "at least one default reward"),
        ({"default_rewards": ({"name": "no_such_reward"},)}, "unknown reward 'no_such_reward'"),
        ({"default_rewards": ({"name": "length", "params": {"limt": 3}},)}, "unknown parameter"),
        (
            {"default_rewards": ({"name": "length", "condition_on": "exact_match"},)},
            "not one of its default rewards",
        ),
        ({"default_rewards": ({"name": "exact_match", "wieght": 2},)}, "unknown reward keys"),
    ],
)
def test_registration_rejects_a_malformed_program(attributes, message):
    with pytest.raises((TypeError, ValueError), match=message):
        register_program(_program("fake-malformed", **attributes))
    assert "fake-malformed" not in PROGRAMS


def test_two_programs_cannot_share_a_name():
    with pytest.raises(ValueError, match="two programs are named 'toy'"):
        register_program(_program("toy"))
    assert PROGRAMS["toy"].__name__ == "ToyEcho"
