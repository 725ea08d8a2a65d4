"""Programs and rewards from installed packages (entry points), with the real test plugins of
tests/plugins installed in build/test-plugins: listed like built-ins, broken ones reported and never
fatal, clashes refused, plain callable rewards with parameters, loaded lazily and once."""

import os
import subprocess
import sys
import textwrap

import pytest

from trainer.catalog import unavailable_plugins
from trainer.config import RunConfig
from trainer.plugins import Unavailable
from trainer.programs import PROGRAMS, get_program, list_programs, program_error, program_info
from trainer.programs.toy import ToyEcho
from trainer.rewards import REWARDS, Reward, get_reward, reward_defaults

pytestmark = pytest.mark.usefixtures("test_plugins")

BUILTIN_PROGRAMS = {"toy", "banking77", "search", "hover", "toolcall", "math"}
BROKEN_ERROR = "cohort-broken-plugin 0.1.0: RuntimeError: broken on purpose"


def run_python(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter with this environment (the test plugins on PYTHONPATH)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))


def cli(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "trainer", *args], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_cli_lists_plugin_programs_like_built_ins_then_the_unavailable_ones():
    out = cli("programs")
    listed, _, unavailable = out.partition("unavailable plugins:")
    lines = {line.split()[0]: line for line in listed.splitlines() if line.strip()}
    assert BUILTIN_PROGRAMS | {"demo_echo", "demo_factory"} <= set(lines)
    assert "echo  (Demo: answer in one word (test plugin))  [cohort-demo-plugin 0.1.0]" in lines["demo_echo"]
    assert lines["toy"].endswith("[cohort]") and "broken_program" not in lines
    assert f"broken_program       {BROKEN_ERROR}" in unavailable
    assert "program name 'toy' of cohort-clash-plugin 0.1.0 clashes with the built-in program of cohort" in unavailable


def test_the_cli_lists_plugin_rewards_with_their_parameters():
    out = cli("rewards")
    listed, _, unavailable = out.partition("unavailable plugins:")
    lines = {line.split()[0]: line for line in listed.splitlines() if line.strip()}
    assert lines["demo_len"].split() == ["demo_len", "[0,", "1]", "(limit=20)", "[cohort-demo-plugin", "0.1.0]"]
    assert "(gold_field='answer')  [cohort-demo-plugin 0.1.0]" in lines["demo_overlap"]
    assert "[-1, 0]" in lines["demo_penalty"] and lines["exact_match"].endswith("[cohort]")
    assert "twin" not in lines
    assert unavailable.count("reward name 'twin' is declared by both cohort-broken-plugin 0.1.0 and "
                             "cohort-clash-plugin 0.1.0; neither is used") == 2


def test_plugin_programs_are_registered_with_their_metadata():
    info = program_info("demo_echo")
    assert info | {"suggested_config": None, "model_suggestions": None} == {
        "name": "demo_echo", "title": "Demo: answer in one word (test plugin)",
        "description": "One module reads the question and answers with its first word.", "agents": ["echo"],
        "dataset_kind": None, "example_fields": ["question", "answer"],
        "default_rewards": [{"name": "demo_overlap", "weight": 1.0, "params": {}},
                            {"name": "demo_len", "weight": 1.0, "params": {"limit": 20}}],
        "needs_corpus": False, "optimizes_prompts": False, "generates_examples": False, "suggested_config": None,
        "model_suggestions": None, "distribution": "cohort-demo-plugin 0.1.0"}
    assert "demo_echo" in PROGRAMS and "demo_echo" in {p["name"] for p in list_programs()}
    program = get_program("demo_echo", corpus_path="ignored.jsonl")  # options it does not take are left out
    state = program.start({"question": "say apple", "answer": "apple"})
    assert program.process_prompt(state, "echo")[-1]["content"] == "Question: say apple"
    result = program.step(state, "echo", "apple pie")
    assert result.parsed_ok and program.final_output(result.state) == "apple"


def test_a_factory_is_called_once_for_metadata_then_per_program_with_the_options_it_accepts():
    result = run_python("""
        from trainer.programs import PROGRAMS, get_program, list_programs, program_info
        from cohort_demo_plugin.program import FACTORY_CALLS, demo_factory
        list(PROGRAMS); list_programs(); program_info("demo_factory"); program_info("demo_factory")
        assert FACTORY_CALLS == [{"corpus_path": None}], FACTORY_CALLS
        assert PROGRAMS["demo_factory"] is demo_factory
        assert program_info("demo_factory")["title"] == "Demo from a factory (corpus: none)"  # from the instance
        program = get_program("demo_factory", corpus_path="c.jsonl", words=["apple"])
        assert FACTORY_CALLS[1:] == [{"corpus_path": "c.jsonl"}] and program.title.endswith("(corpus: c.jsonl)")
    """)
    assert result.returncode == 0, result.stderr


def test_plugins_load_lazily_and_once_per_process():
    result = run_python("""
        import sys
        from importlib import metadata
        calls, original = [], metadata.entry_points

        def counting(**kw):
            if kw.get("group", "").startswith("cohort."):  # plugins may look up groups of their own
                calls.append(kw)
            return original(**kw)

        metadata.entry_points = counting
        from trainer.programs import PROGRAMS, get_program, program_info, unavailable_programs
        from trainer.rewards import get_reward
        get_program("toy"); program_info("search"); get_reward("exact_match")  # built-ins need no plugin
        assert calls == [] and not [m for m in sys.modules if m.startswith("cohort_")], calls
        list(PROGRAMS); get_program("demo_echo"); unavailable_programs(); "nope" in PROGRAMS
        assert calls == [{"group": "cohort.programs"}], calls
        assert "cohort_demo_plugin.program" in sys.modules and "cohort_clash_plugin.program" not in sys.modules
    """)
    assert result.returncode == 0, result.stderr


def test_a_broken_plugin_is_unavailable_with_its_error_and_everything_else_works():
    assert Unavailable("broken_program", "program", "cohort-broken-plugin 0.1.0", BROKEN_ERROR) in unavailable_plugins()
    assert "broken_program" not in PROGRAMS and program_error("broken_program") == BROKEN_ERROR
    for ask in (get_program, program_info):
        with pytest.raises(ValueError, match=f"program 'broken_program' is unavailable: {BROKEN_ERROR}"):
            ask("broken_program")
    with pytest.raises(ValueError, match="unknown program 'nope'; known programs: .*demo_echo"):
        get_program("nope")
    # Its working reward is refused only because of the clash; every built-in is untouched.
    for name in BUILTIN_PROGRAMS - {"search", "hover"}:
        assert get_program(name).agents
    assert isinstance(get_reward("exact_match"), Reward)


def test_a_name_clashing_with_a_built_in_is_refused_and_the_built_in_keeps_it():
    assert PROGRAMS["toy"] is ToyEcho and program_info("toy")["distribution"] == "cohort"
    assert isinstance(get_program("toy"), ToyEcho) and program_error("toy") is None
    [clash] = [u for u in unavailable_plugins() if u.name == "toy"]
    assert clash.kind == "program" and clash.distribution == "cohort-clash-plugin 0.1.0"
    assert clash.error == ("program name 'toy' of cohort-clash-plugin 0.1.0 clashes with the built-in program of "
                           "cohort; the built-in keeps the name (rename the entry point in cohort-clash-plugin)")


def test_two_plugins_with_one_name_are_both_refused():
    twins = [u for u in unavailable_plugins() if u.name == "twin"]
    assert sorted(u.distribution for u in twins) == ["cohort-broken-plugin 0.1.0", "cohort-clash-plugin 0.1.0"]
    assert "twin" not in REWARDS
    message = ("reward 'twin' is unavailable: reward name 'twin' is declared by both cohort-broken-plugin 0.1.0 "
               "and cohort-clash-plugin 0.1.0; neither is used")
    with pytest.raises(ValueError, match=message):
        get_reward("twin")
    with pytest.raises(ValueError, match=message):  # config validation asks the same registry
        RunConfig(program="demo_echo", rewards=[{"name": "twin"}])


def test_a_plain_callable_reward_takes_its_keyword_parameters_as_params():
    assert reward_defaults("demo_len") == {"limit": 20}
    reward = get_reward("demo_len", limit=3)
    assert isinstance(reward, Reward)
    assert (reward.name, reward.params, reward.value_range) == ("demo_len", {"limit": 3}, (0.0, 1.0))
    assert reward({}, "abcd", None) == 0.0 and reward({}, "abc", None) == 1.0 and get_reward("demo_len")({}, "abcd", None) == 1.0
    with pytest.raises(ValueError, match="unknown parameter\\(s\\) limt for reward 'demo_len'; accepted: limit"):
        get_reward("demo_len", limt=3)
    with pytest.raises(ValueError, match="accepted: \\(none\\)"):
        get_reward("demo_penalty", limit=3)
    assert get_reward("demo_penalty").value_range == (-1.0, 0.0) and get_reward("demo_penalty")({}, "", None) == -1.0
    config = RunConfig(program="demo_echo", rewards=[{"name": "demo_len", "params": {"limit": 5}},
                                                     {"name": "demo_overlap"}])
    assert [r.name for r in config.rewards] == ["demo_len", "demo_overlap"]


def test_a_reward_subclass_plugin_is_used_as_it_is():
    from cohort_demo_plugin.rewards import DemoOverlap

    reward = get_reward("demo_overlap", gold_field="answer")
    assert type(reward) is DemoOverlap and REWARDS["demo_overlap"] is DemoOverlap
    assert reward({"answer": "apple"}, "apple", None) == 1.0 and reward({}, "apple", None) is None


def test_entries_that_do_not_fit_the_contract_are_refused_with_a_reason():
    from trainer.programs.registry import _build as build_program
    from trainer.rewards.registry import _build as build_reward

    class NoAgents:
        title = "x"

    with pytest.raises(TypeError, match="agents must be a non-empty tuple of module names, got None"):
        build_program("x", NoAgents)
    with pytest.raises(TypeError, match="not an AgentProgram: missing start, has_next"):
        build_program("x", type("Half", (), {"agents": ("a",)}))
    with pytest.raises(TypeError, match="must name an AgentProgram class or a factory"):
        build_program("x", 42)

    def two_args(example, output):
        return 1.0

    def required_keyword(example, output, trajectory, *, limit):
        return 1.0

    with pytest.raises(TypeError, match="takes \\(example, output, trajectory\\); r takes \\(example, output\\)"):
        build_reward("r", two_args)
    with pytest.raises(TypeError, match="keyword parameter 'limit' needs a default"):
        build_reward("r", required_keyword)
    with pytest.raises(TypeError, match="not a trainer.rewards.base.Reward subclass"):
        build_reward("r", dict)
