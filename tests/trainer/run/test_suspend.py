"""Suspending a run at a step boundary (a Slurm preemption or time limit): the SUSPEND file or a signal
that COHORT_SUSPEND_ON_SIGNALS names checkpoints the current step, logs `suspended` and exits with 3;
`--resume` then trains the remaining steps, none lost or repeated. Real `python -m trainer train` runs
of the toy program on the tiny model, one process and two ranks (gloo on this CPU); the step gate
holds each run where the test acts, so no test guesses with sleeps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.trainer.policy.test_distributed_cli import wait_until
from tests.trainer.run.test_loop import ListReporter, toy_config
from trainer.run.checkpoint import MARKER, latest_checkpoint
from trainer.run.cli import SUSPEND_FILE, SUSPEND_SIGNALS_ENV, SUSPENDED_EXIT
from trainer.run.gate import GATE_ENV, StepGate
from trainer.run.reporting import read_events

pytestmark = pytest.mark.usefixtures("torch_setup")

STEPS = 4


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def write_config(tmp_path: Path, **fields) -> Path:
    config = {"program": "toy", "steps": STEPS, "examples_per_step": 2, "rollouts_per_example": 2, "group_size": 2,
              "max_new_tokens": 3, "max_context_length": 64, "eval_every": 0, "checkpoint_every": 0, **fields}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    return path


def start(tmp_path: Path, config: Path, model_cache: Path, *, gate: StepGate | None = None, resume: bool = False,
          **env: str) -> subprocess.Popen:
    environment = {name: value for name, value in os.environ.items() if name not in (GATE_ENV, SUSPEND_SIGNALS_ENV)}
    environment.update(COHORT_MODEL_CACHE=str(model_cache), **env)
    if gate is not None:
        environment[GATE_ENV] = str(gate.path)
    return subprocess.Popen([sys.executable, "-m", "trainer", "train", "--config", str(config), "--run-dir",
                             str(tmp_path / "run"), "--quiet", *(["--resume"] if resume else [])],
                            env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def events(tmp_path: Path) -> list[dict]:
    path = tmp_path / "run" / "events.jsonl"
    return read_events(path) if path.exists() else []


def statuses(tmp_path: Path) -> list[tuple]:
    return [(e["state"], e.get("attempt"), e.get("step")) for e in events(tmp_path) if e["type"] == "status"]


def steps(tmp_path: Path) -> list[tuple[int, int]]:
    return [(e["attempt"], e["step"]) for e in events(tmp_path) if e["type"] == "step"]


def trained(tmp_path: Path, step: int):
    return lambda: any(e["type"] == "step" and e["step"] == step for e in events(tmp_path))


def assert_suspended_at(tmp_path: Path, step: int, returncode: int, output: str) -> None:
    assert returncode == SUSPENDED_EXIT, output
    assert statuses(tmp_path)[-1] == ("suspended", 1, step)
    assert steps(tmp_path) == [(1, s) for s in range(1, step + 1)]
    checkpoint = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert checkpoint is not None and checkpoint.name == f"step-{step:06d}" and (checkpoint / MARKER).exists()


def assert_resumes_from(tmp_path: Path, config: Path, model_cache: Path, step: int, total: int = STEPS) -> None:
    """`--resume` continues as attempt 2 with step `step` + 1: every step once over the two attempts."""
    returncode, output = finish(start(tmp_path, config, model_cache, resume=True))
    assert returncode == 0, output
    assert not (tmp_path / "run" / SUSPEND_FILE).exists()  # removed when the attempt started
    assert steps(tmp_path) == [(1, s) for s in range(1, step + 1)] + [(2, s) for s in range(step + 1, total + 1)]
    assert statuses(tmp_path)[-3:] == [("suspended", 1, step), ("running", 2, step), ("succeeded", None, total)]


def test_the_suspend_file_checkpoints_the_step_exits_3_and_resume_goes_on(tmp_path, model_cache):
    gate = StepGate(tmp_path / "gate")
    gate.allow(2)
    config = write_config(tmp_path)
    process = start(tmp_path, config, model_cache, gate=gate)
    wait_until(trained(tmp_path, 2), process, "step 2")
    (tmp_path / "run" / SUSPEND_FILE).touch()  # while the gate holds step 3
    gate.allow(STEPS)
    assert_suspended_at(tmp_path, 2, *finish(process))  # checkpoint_every = 0: the suspend's own save
    assert_resumes_from(tmp_path, config, model_cache, 2)


def test_a_signal_suspends_only_after_the_attempt_trained_a_step(tmp_path, model_cache):
    """SIGUSR1 before step 1: the run trains step 1 all the same, then suspends; the step was just saved
    (checkpoint_every = 1), so the suspend saves nothing more."""
    gate = StepGate(tmp_path / "gate")
    gate.allow(0)
    config = write_config(tmp_path, checkpoint_every=1)
    process = start(tmp_path, config, model_cache, gate=gate, **{SUSPEND_SIGNALS_ENV: "USR1"})
    wait_until(lambda: statuses(tmp_path) == [("running", 1, 0)], process, "the running status")
    process.send_signal(signal.SIGUSR1)
    wait_until((tmp_path / "run" / SUSPEND_FILE).exists, process, "the handler's SUSPEND file")
    gate.allow(STEPS)
    assert_suspended_at(tmp_path, 1, *finish(process))
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step-000001"]
    assert_resumes_from(tmp_path, config, model_cache, 1)


def test_a_signal_while_gated_after_step_two_suspends_there(tmp_path, model_cache):
    gate = StepGate(tmp_path / "gate")
    gate.allow(2)
    config = write_config(tmp_path)
    process = start(tmp_path, config, model_cache, gate=gate, **{SUSPEND_SIGNALS_ENV: "SIGUSR1,USR2"})
    wait_until(trained(tmp_path, 2), process, "step 2")
    process.send_signal(signal.SIGUSR2)
    # A suspend ends the gate's wait once the attempt has trained a step: no need to open it.
    assert_suspended_at(tmp_path, 2, *finish(process))


def test_a_cancel_wins_over_a_suspend(tmp_path, model_cache):
    from trainer.run.loop import Trainer

    reporter = ListReporter(stop_after_step=1)
    trainer = Trainer(toy_config(steps=3, checkpoint_every=0), tmp_path / "run", reporter,
                      model_cache_dir=model_cache, should_suspend=lambda: True)
    assert trainer.run() == "cancelled"
    assert [e["step"] for e in reporter.events] == [1]
    assert [state for state, _ in reporter.statuses] == ["running", "cancelled"]
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_an_unknown_signal_name_is_a_clear_error(tmp_path, model_cache):
    returncode, output = finish(start(tmp_path, write_config(tmp_path), model_cache,
                                      **{SUSPEND_SIGNALS_ENV: "USR1,NOPE"}), timeout=60)
    assert returncode == 2 and "'NOPE' is not a signal" in output
    assert not (tmp_path / "run").exists()


def ranks_of(launcher: psutil.Process) -> list[psutil.Process]:
    found = []
    for child in launcher.children(recursive=True):
        try:
            if child.environ().get("RANK") is not None:
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_two_ranks_suspend_together_on_a_signal_to_the_launcher(tmp_path, model_cache):
    """SIGTERM to the launcher (what Slurm sends the job's process), when TERM is a suspend signal:
    torchrun leaves it to the launcher's handler, which asks rank 0, which tells rank 1; rank 0
    checkpoints, both exit with 3, which becomes the launcher's exit, with no failure recorded. The
    resumed two-rank attempt trains the remaining steps."""
    gate = StepGate(tmp_path / "gate")
    gate.allow(1)
    config = write_config(tmp_path, num_processes=2, steps=3)
    process = start(tmp_path, config, model_cache, gate=gate, **{SUSPEND_SIGNALS_ENV: "USR1,TERM"})
    wait_until(trained(tmp_path, 1), process, "step 1")
    launcher = psutil.Process(process.pid)
    wait_until(lambda: len(ranks_of(launcher)) == 2, process, "two rank processes")
    ranks = ranks_of(launcher)
    process.send_signal(signal.SIGTERM)
    returncode, output = finish(process)
    assert_suspended_at(tmp_path, 1, returncode, output)
    assert "failed" not in [state for state, _, _ in statuses(tmp_path)]
    assert not (tmp_path / "run" / "rank-errors").exists()
    _, alive = psutil.wait_procs(ranks, timeout=60)
    assert alive == []
    assert_resumes_from(tmp_path, config, model_cache, 1, total=3)


def test_the_launcher_exits_3_when_the_ranks_suspended(tmp_path):
    """torchrun stops the other ranks with SIGTERM as soon as one exits with 3; a rank that dies of it
    while leaving still counts as suspended once rank 0 logged the suspend, and nothing else does."""
    from types import SimpleNamespace

    from trainer.run.launch import _suspended
    from trainer.run.reporting import JsonlReporter

    def exits(*codes):
        return {rank: SimpleNamespace(exitcode=code) for rank, code in enumerate(codes)}

    reporter = JsonlReporter(tmp_path / "events.jsonl")
    reporter.status("running", attempt=1, step=0)
    assert _suspended(exits(3, 3), tmp_path)
    assert not _suspended(exits(3, -signal.SIGTERM), tmp_path)  # rank 0 did not say so
    reporter.status("suspended", attempt=1, step=2)
    assert _suspended(exits(3, -signal.SIGTERM), tmp_path) and _suspended(exits(-signal.SIGTERM, 3), tmp_path)
    assert not _suspended(exits(3, 1), tmp_path) and not _suspended(exits(3, -signal.SIGKILL), tmp_path)
    assert not _suspended(exits(-signal.SIGTERM, -signal.SIGTERM), tmp_path)
