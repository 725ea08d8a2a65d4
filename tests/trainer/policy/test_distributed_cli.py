"""A two-process run through the real CLI (`python -m trainer train`, torch.distributed.run, gloo on
this CPU): one event stream with the whole batch, rank 0's checkpoints, a cancel and a kill that stop
every rank, a crashed rank that fails the run with its name. The step gate holds the run where a
test acts; no test guesses with sleeps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from trainer.run.gate import GATE_ENV, StepGate
from trainer.run.reporting import read_events

pytestmark = pytest.mark.usefixtures("torch_setup")

ROLLOUTS = 8
EXAMPLES = 4


def write_config(tmp_path: Path, **fields) -> Path:
    config = {"program": "toy", "steps": 2, "examples_per_step": EXAMPLES, "rollouts_per_example": ROLLOUTS,
              "group_size": ROLLOUTS, "num_processes": 2, "eval_every": 0, "checkpoint_every": 1, **fields}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    return path


def start(tmp_path: Path, config: Path, gate: StepGate | None = None) -> subprocess.Popen:
    env = {**os.environ, "COHORT_MODEL_CACHE": str(tmp_path / "models")}
    if gate is not None:
        env[GATE_ENV] = str(gate.path)
    return subprocess.Popen([sys.executable, "-m", "trainer", "train", "--config", str(config), "--run-dir",
                             str(tmp_path / "run"), "--quiet"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def events(tmp_path: Path) -> list[dict]:
    path = tmp_path / "run" / "events.jsonl"
    return read_events(path) if path.exists() else []


def wait_until(condition, process: subprocess.Popen, what: str, timeout: float = 300) -> None:
    """Polls `condition` (the event log, the process table) until it holds; fails at once if the run
    ended first. The timeout only bounds a hung test."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"the run ended (exit {process.returncode}) before {what}:\n{process.stdout.read()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def ranks_of(launcher: psutil.Process) -> dict[int, psutil.Process]:
    found = {}
    for child in launcher.children(recursive=True):
        try:
            rank = child.environ().get("RANK")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if rank is not None:
            found[int(rank)] = child
    return found


def held_at_step_two(tmp_path: Path) -> tuple[subprocess.Popen, dict[int, psutil.Process]]:
    """A run that trained step 1 and waits at the gate before step 2; its two rank processes."""
    gate = StepGate(tmp_path / "gate")
    gate.allow(1)
    process = start(tmp_path, write_config(tmp_path, steps=5), gate)
    wait_until(lambda: any(e["type"] == "step" for e in events(tmp_path)), process, "step 1")
    launcher = psutil.Process(process.pid)
    wait_until(lambda: len(ranks_of(launcher)) == 2, process, "two rank processes")
    return process, ranks_of(launcher)


def test_a_two_process_run_reports_one_stream_with_the_whole_batch(tmp_path):
    process = start(tmp_path, write_config(tmp_path))
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output
    log = events(tmp_path)
    statuses = [(e["state"], e.get("processes")) for e in log if e["type"] == "status"]
    assert statuses == [("running", 2), ("succeeded", None)]
    steps = [e for e in log if e["type"] == "step"]
    assert [e["step"] for e in steps] == [1, 2]  # one stream: rank 1 wrote nothing
    for event in steps:
        rollouts = event["rollouts"]
        assert len(rollouts) == EXAMPLES * ROLLOUTS
        assert len({r["example_id"] for r in rollouts}) == EXAMPLES  # both ranks' shards
        assert len(event["groups"]) == EXAMPLES  # one group per example, over both ranks' rollouts
        metrics = event["metrics"]
        for rank in (0, 1):
            assert metrics[f"system/rank{rank}/sample_s"] > 0 and metrics[f"system/rank{rank}/update_s"] >= 0
        # Per-token details (token_details = "all") of both ranks' calls, written by rank 0.
        calls = [c for r in rollouts for c in r["calls"]]
        assert all(len(c["tokens"]["trainer"]) == len(c["tokens"]["sampler"]) == len(c["tokens"]["pieces"]) > 0
                   for c in calls)
        assert metrics["tokens/entropy/mean"] > 0 and 0 <= metrics["tokens/mismatch/share"] <= 1
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-000001", "step-000002"]
    assert not (tmp_path / "run" / "rank-errors").exists()


def test_cancelling_stops_every_rank_at_the_step_boundary(tmp_path):
    process, ranks = held_at_step_two(tmp_path)
    (tmp_path / "run" / "STOP").touch()
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    assert [(e["state"], e.get("step")) for e in events(tmp_path) if e["type"] == "status"][-1] == ("cancelled", 1)
    _, alive = psutil.wait_procs(list(ranks.values()), timeout=60)
    assert alive == []


def test_killing_the_run_kills_every_rank(tmp_path):
    process, ranks = held_at_step_two(tmp_path)
    process.kill()  # SIGKILL: the launcher cannot forward it; the ranks die with their parent
    process.wait(timeout=60)
    _, alive = psutil.wait_procs(list(ranks.values()), timeout=60)
    assert alive == []


def test_sigterm_stops_every_rank_and_the_launcher_dies_of_it(tmp_path):
    """What the worker sends when it is shut down: the run ends as a killed single process would
    (exit by the signal, so the worker records "interrupted"), with no rank left behind."""
    process, ranks = held_at_step_two(tmp_path)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=300)
    assert process.returncode == -signal.SIGTERM
    _, alive = psutil.wait_procs(list(ranks.values()), timeout=60)
    assert alive == []
    assert [e["state"] for e in events(tmp_path) if e["type"] == "status"] == ["running"]  # no verdict written


def test_a_crashed_rank_fails_the_run_naming_it(tmp_path):
    process, ranks = held_at_step_two(tmp_path)
    ranks[1].send_signal(signal.SIGKILL)  # what the OOM killer does
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 1, output
    final = [e for e in events(tmp_path) if e["type"] == "status"][-1]
    assert final["state"] == "failed" and final["step"] == 1
    assert "rank 1 was killed by SIGKILL" in final["error"]
    _, alive = psutil.wait_procs(list(ranks.values()), timeout=60)
    assert alive == []


@pytest.mark.parametrize(("processes", "dtype"), [(1, "auto"), (2, "bfloat16")])
def test_sharded_weights_train_evaluate_checkpoint_and_resume(tmp_path, processes, dtype):
    """sharding = "fsdp" (FSDP2 over gloo here): one process is a mesh of one, the path a one-GPU
    machine checks; two shard the base weights, in bfloat16 with the adapter in float32 (PEFT's
    default), which FSDP computes in bfloat16. A resumed attempt loads the gathered state."""
    config = write_config(tmp_path, num_processes=processes, sharding="fsdp", eval_every=1, steps=2, dtype=dtype)
    first = start(tmp_path, config)
    output, _ = first.communicate(timeout=600)
    assert first.returncode == 0, output
    config.write_text(json.dumps({**json.loads(config.read_text()), "steps": 3}))
    resumed = subprocess.run([sys.executable, "-m", "trainer", "train", "--config", str(config), "--run-dir",
                              str(tmp_path / "run"), "--quiet", "--resume"], capture_output=True, text=True,
                             env={**os.environ, "COHORT_MODEL_CACHE": str(tmp_path / "models")}, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = events(tmp_path)
    assert [(e["attempt"], e["step"]) for e in log if e["type"] == "step"] == [(1, 1), (1, 2), (2, 3)]
    assert all("eval/reward/mean" in e["metrics"] for e in log if e["type"] == "step")
    assert [(e["state"], e.get("step")) for e in log if e["type"] == "status"][-2:] == [("running", 2), ("succeeded", 3)]
