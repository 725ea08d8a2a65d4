"""One SDK run of benchmarks/lab_load.py, in a process of its own, and the handle the benchmark drives
it with (`SdkProcess`).

The child is a trainer as a lab runs one: `cohort.init(...)`, then S steps of R rollouts (groups of G)
logged as fast as the loop can go, then `finish()`. It imports the standard library and `cohort` only,
so 32 of them start in a second. The protocol is two lines of JSON on stdout around one line on stdin:
`{"run": id}` once the server created the run (so viewers can open its page before any step is
logged), then it waits for a line on stdin (the benchmark releases every run at once), logs, and prints
what it measured.

Every HTTP exchange the SDK makes is timed by wrapping `urllib.request.urlopen`, the call cohort/http.py
sends through: one record per exchange on the wire (method, path, status, start, seconds until the
answer's headers), so the SDK's own retries show as the separate answers they are (a 503 and the 200
that followed it), and a Retry-After wait between them is not counted as latency. The body of a step
post is a few hundred bytes, so the headers' arrival is the answer's. Status 0: no answer (refused,
reset, timed out).

    COHORT_TOKEN=... .venv/bin/python benchmarks/lab_load_sdk.py '{"url": ..., "steps": 3, ...}'
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]


# --- the child ----------------------------------------------------------------------------------

def timed_urlopen(records: list[dict[str, Any]]):
    """`urllib.request.urlopen` that appends one record per exchange to `records`."""
    real = urllib.request.urlopen

    def urlopen(request, *args, **kwargs):
        steps = 0
        if getattr(request, "data", None) and request.full_url.endswith("/steps/"):
            steps = len(json.loads(request.data)["steps"])  # before the clock: a post may carry a batch
        record = {"method": request.get_method(), "path": urllib.parse.urlsplit(request.full_url).path,
                  "status": 0, "at": time.time(), "steps": steps}
        started = time.perf_counter()
        try:
            response = real(request, *args, **kwargs)
            record["status"] = response.status
            return response
        except urllib.error.HTTPError as exc:
            record["status"] = exc.code
            raise
        finally:
            record["seconds"] = time.perf_counter() - started
            records.append(record)

    return urlopen


def rollouts(step: int, count: int, group: int, rng: random.Random) -> list[dict[str, Any]]:
    """`count` rollouts of one step in groups of `group` (one example per group), two rewards each."""
    rows = []
    for i in range(count):
        g = i // group
        fmt, correct = float(rng.random() < 0.8), float(rng.random() < 0.4)
        rows.append({"prompt": [{"role": "user", "content": f"Question {step}-{g}: " + "context word " * 12}],
                     "completion": f"<think>step {step} try {i}</think> answer {rng.randint(0, 99)}",
                     "rewards": {"format": fmt, "correct": correct}, "reward": fmt + correct,
                     "advantage": rng.uniform(-1, 1), "group": g, "example_id": f"q{step}-{g}"})
    return rows


def child(spec: dict[str, Any]) -> int:
    sys.path.insert(0, str(ROOT))
    import cohort

    records: list[dict[str, Any]] = []
    urllib.request.urlopen = timed_urlopen(records)
    rng = random.Random(spec["seed"])
    run = cohort.init(spec["url"], task=spec["task"], name=spec["name"], tags=["lab-load"],
                      total_steps=spec["steps"], dir=spec["dir"], config={"rollouts": spec["rollouts"]})
    created = run.wait(spec["timeout"])  # the sender's first request: the run's creation
    print(json.dumps({"run": run.id}), flush=True)
    if not created:
        return 1
    sys.stdin.readline()  # released with the others
    started = time.time()
    for step in range(1, spec["steps"] + 1):
        run.log({"loss": 1.0 / step, "reward/mean": rng.random()}, step=step)
        run.log_rollouts(step, rollouts(step, spec["rollouts"], spec["group"], rng))
    logged = time.time()
    run.finish(timeout=spec["timeout"])
    print(json.dumps({"run": run.id, "steps": spec["steps"], "rollouts": spec["steps"] * spec["rollouts"],
                      "uploaded": run.wait(0), "started": started, "logged": logged, "ended": time.time(),
                      "requests": records}), flush=True)
    return 0


# --- the benchmark's handle ---------------------------------------------------------------------

class SdkProcess:
    """One child SDK run: `start` it, read its `run_id`, `release` it, then its `result()`."""

    def __init__(self, spec: dict[str, Any], token: str, log: Path):
        self.spec, self.token, self.log = spec, token, log
        self.process: subprocess.Popen | None = None
        self.run_id: int | None = None

    def start(self) -> None:
        with open(self.log, "wb") as err:  # the SDK's warnings (a retried upload) and any traceback
            self.process = subprocess.Popen([sys.executable, str(HERE), json.dumps(self.spec)], cwd=ROOT,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                            start_new_session=True,
                                            env={**os.environ, "COHORT_TOKEN": self.token})  # not in `ps`

    def read_run_id(self) -> int:
        """Blocks until the child says its run exists (its own init timeout bounds the wait)."""
        line = self.process.stdout.readline()
        self.run_id = json.loads(line)["run"] if line else None
        if self.run_id is None:
            raise RuntimeError(f"an SDK run was not created (exit {self.process.poll()}):\n{self.errors()}")
        return self.run_id

    def release(self) -> None:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def result(self, timeout_s: float) -> dict[str, Any]:
        out, _ = self.process.communicate(timeout=timeout_s)
        if self.process.returncode or not out.strip():
            raise RuntimeError(f"SDK run {self.run_id} exited with {self.process.returncode}:\n{self.errors()}")
        return json.loads(out.strip().splitlines()[-1])

    def errors(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(child(json.loads(sys.argv[1])))
