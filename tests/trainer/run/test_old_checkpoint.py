"""A run checkpointed by the last landed commit before the trainer became packages (5af5e3a) resumes
on today's code and replays its next step exactly.

`tests/trainer/data/run-5af5e3a/` holds what that commit wrote for `run.toml` (the toy program on the
tiny model, char F1, a learning rate that moves the adapter in step 1): the config, the checkpoint of
step 1, and the events of the whole two-step run. Resuming from step 1 must sample, score and log
step 2 as that commit did: same completions, same rewards.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from trainer.run.cli import main

OLD_RUN = Path(__file__).resolve().parents[1] / "data" / "run-5af5e3a"


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _completions(step_event: dict) -> list[list[str]]:
    return [[call["completion"] for call in rollout["calls"]] for rollout in step_event["rollouts"]]


def test_a_run_checkpointed_before_the_packages_resumes_and_replays_its_next_step(tmp_path, monkeypatch):
    monkeypatch.setenv("COHORT_MODEL_CACHE", str(tmp_path / "models"))
    old = _events(OLD_RUN / "events-of-the-whole-run.jsonl")
    old_steps = {e["step"]: e for e in old if e["type"] == "step"}
    run_dir = tmp_path / "run"
    shutil.copytree(OLD_RUN / "checkpoints", run_dir / "checkpoints")
    shutil.copy(OLD_RUN / "config.json", run_dir / "config.json")
    # The run as it stood when it stopped: its events up to step 1.
    stopped = [e for e in old if not (e["type"] == "step" and e["step"] > 1) and e.get("state") != "succeeded"]
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in stopped))

    assert main(["train", "--config", str(OLD_RUN / "run.toml"), "--run-dir", str(run_dir), "--resume",
                 "--quiet"]) == 0

    events = _events(run_dir / "events.jsonl")
    new_steps = [e for e in events[len(stopped):] if e["type"] == "step"]
    assert [e["step"] for e in new_steps] == [2]  # step 1 came from the checkpoint, not trained again
    resumed = new_steps[0]
    assert _completions(resumed) == _completions(old_steps[2])
    assert resumed["metrics"]["reward/mean"] == old_steps[2]["metrics"]["reward/mean"]
    assert events[-1]["type"] == "status" and events[-1]["state"] == "succeeded"
    assert (run_dir / "adapter" / "adapter_config.json").exists()
