"""The step gate (trainer/run/gate.py): a test decides when the training loop's steps start."""

from __future__ import annotations

import pytest

from tests.trainer.run.test_loop import ListReporter, run, toy_config
from trainer.run.gate import GATE_ENV, StepGate


def test_no_variable_or_no_file_means_no_limit(tmp_path, monkeypatch):
    monkeypatch.delenv(GATE_ENV, raising=False)
    assert StepGate.from_env().limit() is None
    monkeypatch.setenv(GATE_ENV, str(tmp_path / "gate"))
    gate = StepGate.from_env()
    assert gate.path == tmp_path / "gate" and gate.limit() is None
    gate.wait_for(1_000, should_stop=lambda: pytest.fail("an open gate must not wait"))


def test_allow_writes_the_last_step_that_may_start(tmp_path):
    gate = StepGate(tmp_path / "gate")
    gate.allow(3)
    assert gate.limit() == 3
    gate.wait_for(3, should_stop=lambda: pytest.fail("step 3 is allowed"))
    gate.allow(5)
    assert gate.limit() == 5 and [p.name for p in tmp_path.iterdir()] == ["gate"]  # no temporary left


def test_a_stop_request_ends_the_wait(tmp_path):
    gate = StepGate(tmp_path / "gate")
    gate.allow(0)
    asked = []
    gate.wait_for(1, should_stop=lambda: asked.append(1) or len(asked) == 3)
    assert len(asked) == 3


class GateKeeper(ListReporter):
    """Opens the gate to `then` once the loop has polled it `polls` times while waiting."""

    def __init__(self, gate: StepGate, *, polls: int, then: int):
        super().__init__()
        self.gate, self.polls, self.then, self.seen_waiting = gate, polls, then, []

    def should_stop(self):
        if self.gate.limit() == self.then:
            return False
        self.seen_waiting.append(len(self.events))  # steps done while the loop waits
        if len(self.seen_waiting) >= self.polls:
            self.gate.allow(self.then)
        return False


@pytest.mark.usefixtures("torch_setup")
def test_the_loop_waits_at_the_gate_until_its_step_is_allowed(tmp_path, monkeypatch):
    gate = StepGate(tmp_path / "gate")
    gate.allow(1)
    monkeypatch.setenv(GATE_ENV, str(gate.path))
    reporter = GateKeeper(gate, polls=5, then=3)
    _, reporter, state = run(toy_config(steps=3, checkpoint_every=0), tmp_path, "gated",
                             model_cache=tmp_path / "models", reporter=reporter)
    assert state == "succeeded" and [e["step"] for e in reporter.events] == [1, 2, 3]
    # The boundary check before step 1, then polls after step 1 until step 2 was allowed; none after.
    assert reporter.seen_waiting == [0, 1, 1, 1, 1]


def test_a_run_of_its_own_line_goes_its_own_way(tmp_path):
    gate = StepGate(tmp_path / "gate")
    gate.allow(2)
    gate.allow(9, run="run-12")
    assert gate.named("run-12").limit() == 9 and gate.named("run-13").limit() == 2 and gate.limit() == 2
    gate.allow(3)  # the line for every run changes; run-12's own stays
    assert gate.named("run-12").limit() == 9 and gate.named("run-13").limit() == 3
