"""A replay of one module (webapp/runs/replay/): the Celery task's body. Like training, the trainer
runs in a subprocess (`python -m trainer.run.replay`), never inside the forked Celery worker; the
worker claims the replay (compare-and-set), writes the trainer's request into the run's folder, waits
for the result file and stores it, or the error's words."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from webapp.runs.models import Replay
from webapp.runs.replay.services import replay_claim, replay_finish, replay_trainer_request
from webapp.runs.services import run_directory
from workers.supervisor import Supervisor, with_database

REPLAY_TIMEOUT_S = 3600  # a replay is G x (1 + later calls) generations: minutes, not hours


def replay_folder(replay: Replay) -> Path:
    return run_directory(replay.run_id) / "replays" / f"replay-{replay.pk}"


def replay_execute(replay_id: int) -> str:
    """Claims the replay and runs it; its final state ("not claimed" when another delivery had it)."""
    replay = with_database("claiming the replay", lambda: replay_claim(replay_id))
    if replay is None:
        return "not claimed"
    try:
        request = with_database("reading the replay's trajectory",
                                lambda: replay_trainer_request(replay))
        request["model_cache_dir"] = str(settings.COHORT_MODEL_CACHE)
    except ValueError as exc:
        message = str(exc)
        with_database("recording the replay failed", lambda: replay_finish(replay_id, error=message))
        return Replay.State.FAILED
    folder = replay_folder(replay)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "request.json").write_text(json.dumps(request))
    output = folder / "result.json"
    output.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "trainer.run.replay", "--request", str(folder / "request.json"),
            "--output", str(output)]
    with open(folder / "replay.log", "wb") as log:
        try:
            code = subprocess.run(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=Supervisor.environment(),
                                  timeout=REPLAY_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            code = None
    result, error = _read_result(output, folder / "replay.log", code)
    with_database("storing the replay", lambda: replay_finish(replay_id, result=result, error=error))
    return Replay.State.FAILED if error else Replay.State.SUCCEEDED


def _read_result(output: Path, log: Path, code: int | None) -> tuple[dict | None, str]:
    if code is None:
        return None, f"the replay ran past {REPLAY_TIMEOUT_S} s and was stopped"
    try:
        data = json.loads(output.read_text())
    except (OSError, ValueError):
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        return None, f"the replay process exited with {code} and left no result: {tail}"
    if data.get("error"):
        return None, str(data["error"])
    return data, ""
