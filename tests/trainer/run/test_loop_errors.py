"""The training loop with a program or reward that raises: the trajectory fails with its error and
the run goes on; when most of a step raises, or a program raises RunAbort, the run fails."""

from __future__ import annotations

import re

import pytest

from tests.trainer.flaky_program import Abort, flaky_config, flaky_trainer, registered_flaky_echo
from tests.trainer.run.test_loop import ListReporter
from trainer.rollouts.failures import RolloutErrors

pytestmark = pytest.mark.usefixtures("torch_setup")


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture
def make_trainer(tmp_path, model_cache):
    """``make_trainer(**config_changes) -> (trainer, reporter)`` with ``FlakyEcho`` registered."""
    with registered_flaky_echo():
        def make(**changes):
            reporter = ListReporter()
            trainer = flaky_trainer(flaky_config(tmp_path / "data", **changes), tmp_path / "run", reporter, model_cache)
            return trainer, reporter

        yield make


def by_example(event):
    out = {}
    for rollout in event["rollouts"]:
        out.setdefault(rollout["example_id"], []).append(rollout)
    return out


def test_a_program_raising_for_one_example_fails_only_its_rollouts(make_trainer):
    trainer, reporter = make_trainer(steps=2)
    trainer.parts.program.program.raise_for = {"e1"}
    assert trainer.run() == "succeeded"
    assert [e["step"] for e in reporter.events] == [1, 2]
    for event in reporter.events:
        rollouts = by_example(event)
        assert sorted(rollouts) == ["e0", "e1", "e2", "e3"] and all(len(r) == 4 for r in rollouts.values())
        for rollout in rollouts["e1"]:
            assert rollout["failed"] and rollout["reward"] == -1.0
            assert rollout["error"].startswith("ZeroDivisionError: cannot echo e1\n  in program step of module 'echo'\n")
            assert "in step" in rollout["error"]  # the traceback tail names the program's method
            (call,) = rollout["calls"]  # the call whose step raised is kept, not parsed
            assert call["module"] == "echo" and call["parsed_ok"] is False
        assert not any(r["error"] for e in ("e0", "e2", "e3") for r in rollouts[e])
        assert event["metrics"]["error_rate"] == 0.25
        assert event["metrics"]["failure_rate"] >= 0.25
        # The failed rollouts' calls are trained with the fallback reward, like format failures.
        assert sum(len(g["members"]) for g in event["groups"]) == 16


def test_more_than_half_raising_fails_the_run_with_the_first_error(make_trainer):
    trainer, reporter = make_trainer(steps=2)
    trainer.parts.program.program.raise_for = {"e0", "e1", "e3"}
    with pytest.raises(RolloutErrors) as info:
        trainer.run()
    assert re.match(r"12 of 16 trajectories raised in step 1; first error \(example 'e[013]'\): "
                    r"ZeroDivisionError: cannot echo e[013]\n  in program step of module 'echo'\nTraceback", str(info.value))
    assert reporter.events == []  # the step did not train
    state, info_ = reporter.statuses[-1]
    assert state == "failed" and info_["error"] == f"RolloutErrors: {info.value}"


def test_exactly_half_raising_goes_on(make_trainer):
    trainer, reporter = make_trainer(steps=1)
    trainer.parts.program.program.raise_for = {"e0", "e1"}
    assert trainer.run() == "succeeded"
    assert reporter.events[0]["metrics"]["error_rate"] == 0.5


def test_run_abort_from_the_program_fails_the_run_at_once(make_trainer):
    trainer, reporter = make_trainer(steps=2)
    trainer.parts.program.program.abort_for = {"e2"}
    with pytest.raises(Abort, match="e2 cannot go on: stop the run"):
        trainer.run()
    assert reporter.events == []
    assert reporter.statuses[-1] == ("failed", {"step": 0, "error": "Abort: e2 cannot go on: stop the run"})


def test_a_reward_that_raises_fails_its_trajectories(make_trainer):
    trainer, reporter = make_trainer(steps=1)
    exact_match = trainer.parts.reward_fns["exact_match"]

    def flaky_exact_match(example, output, trajectory):
        if example["id"] == "e2":
            raise KeyError("gold")
        return exact_match(example, output, trajectory)

    trainer.parts.reward_fns["exact_match"] = flaky_exact_match
    assert trainer.run() == "succeeded"
    rollouts = by_example(reporter.events[0])
    parsed = [r for r in rollouts["e2"] if r["calls"][0]["parsed_ok"]]
    assert parsed, "the tiny model's completions for e2 all failed to parse: no reward was called"
    for rollout in parsed:
        assert rollout["failed"] and rollout["error"].startswith("KeyError: 'gold'\n  in reward 'exact_match'\n")
        assert rollout["rewards"] == {"char_f1": -1.0, "exact_match": -1.0} and rollout["reward"] == -1.0
        assert rollout["final_output"] is not None  # the program finished: its output stays visible
    assert not any(r["error"] for e in ("e0", "e1", "e3") for r in rollouts[e])


def test_a_reward_returning_a_string_gets_an_error_naming_it(make_trainer):
    trainer, reporter = make_trainer(steps=1)
    trainer.parts.reward_fns["char_f1"] = lambda example, output, trajectory: "abc" if example["id"] == "e0" else 0.5
    assert trainer.run() == "succeeded"
    rollouts = by_example(reporter.events[0])
    errors = {r["error"] for r in rollouts["e0"] if r["calls"][0]["parsed_ok"]}
    assert errors == {"TypeError: reward 'char_f1' returned 'abc' (str); a reward returns a float or None"}
    assert all(r["error"] is None for e in ("e1", "e2", "e3") for r in rollouts[e])


def test_a_reward_returning_nan_is_unknown_as_before(make_trainer):
    trainer, reporter = make_trainer(steps=1)
    trainer.parts.reward_fns["char_f1"] = lambda example, output, trajectory: float("nan")
    assert trainer.run() == "succeeded"
    for rollout in reporter.events[0]["rollouts"]:
        assert rollout["error"] is None
        if not rollout["failed"]:
            assert rollout["rewards"]["char_f1"] is None  # NaN: left out, as ever
