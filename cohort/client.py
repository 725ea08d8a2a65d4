"""A small client of Cohort's read API that returns pandas DataFrames.

    from cohort.client import Client
    client = Client("http://localhost:8000", token="<key from /api/tokens/>")
    client.metrics(12)          # step + one column per metric, every stored step

Only the standard library speaks HTTP (urllib, cohort/http.py); pandas is the one dependency (`pip install
cohort[client]`). Pages are followed transparently. Errors raise `CohortAPIError(status, message)`.
`create_run`, `wait` and `download_adapter` queue a run as the launch form would, follow it, and
fetch the adapter it trained (what `cohort.dspy.MMGRPO(client=...)` does).
"""

from __future__ import annotations

import io
import json
import math
import time
import urllib.parse
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from cohort import http
from cohort.http import CohortAPIError

__all__ = ["Client", "CohortAPIError"]

PAGE_SIZE = 500  # the API's largest page
DATE_COLUMNS = ("created_at", "started_at", "finished_at")
FINAL_STATES = frozenset({"succeeded", "failed", "cancelled", "interrupted"})


class Client:
    """Read runs, metrics, rollouts and groups of a Cohort server with a personal API token."""

    def __init__(self, url: str, token: str, *, timeout: float = 60.0, busy_retries: int = 5):
        self.url = http.base_url(url)
        self.token = token
        self.timeout = timeout
        self.busy_retries = busy_retries  # how often a 429 or 503 with Retry-After is asked again

    # --- HTTP ---------------------------------------------------------------------------------

    def get(self, path: str, params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> Any:
        """The decoded JSON of `GET /api/<path>` (`params`: a mapping or (name, value) pairs)."""
        items = list(params.items() if isinstance(params, Mapping) else params or [])
        query = urllib.parse.urlencode([(k, v) for k, v in items if v is not None])
        return json.loads(self._send("GET", path + (f"?{query}" if query else "")).decode("utf-8"))

    def post(self, path: str, body: Any) -> Any:
        """The decoded JSON answer of `POST /api/<path>` with `body` as JSON."""
        return json.loads(self._send("POST", path, json.dumps(body).encode("utf-8")).decode("utf-8"))

    def _send(self, method: str, path: str, data: bytes | None = None) -> bytes:
        """The answer's body. A 429 or 503 that says when to ask again (Retry-After) is asked again then,
        `busy_retries` times: the server answers so only for a request it did nothing with (it was
        overloaded, or this token sent too many), so a POST is safe to repeat too."""
        for attempt in range(self.busy_retries + 1):
            try:
                return http.send(self.url, self.token, method, path, data, timeout=self.timeout)
            except CohortAPIError as exc:
                if exc.status not in (429, 503) or exc.retry_after is None or attempt == self.busy_retries:
                    raise
                time.sleep(exc.wait_s(0.0))
        raise AssertionError("unreachable")

    def _pages(self, path: str, params: list[tuple[str, Any]]) -> Iterator[dict]:
        """Every result of a paged list: pages are asked for by offset until the total is reached."""
        offset = 0
        while True:
            page = self.get(path, [*params, ("limit", PAGE_SIZE), ("offset", offset)])
            yield from page["results"]
            offset += len(page["results"])
            if not page["results"] or offset >= page["count"]:
                return

    # --- runs ---------------------------------------------------------------------------------

    def runs(self, *, state: str | None = None, task: str | None = None, program: str | None = None,
             owner: str | None = None, q: str | None = None, config: Mapping[str, Any] | None = None,
             project: str | None = None) -> pd.DataFrame:
        """One row per visible run: id, name, state, task, program, owner, the summary fields as
        columns (current_step, best_reward, last_reward_mean, ...) and the config flattened to
        `config.<key>` columns. `config={"estimator": "gdpo", "lora.rank": 8}` keeps runs whose
        config has those values; `project="vision"` only that project's runs."""
        params: list[tuple[str, Any]] = [("state", state), ("task", task), ("program", program), ("owner", owner),
                                         ("q", q), ("project", project)]
        params += [("config", f"{key}={json.dumps(value)}") for key, value in (config or {}).items()]
        rows = [_flat_run(run) for run in self._pages("runs/", params)]
        frame = pd.DataFrame(rows)
        if frame.empty:
            return pd.DataFrame(columns=["id", "name", "state", "task", "program", "owner"])
        for column in DATE_COLUMNS:
            frame[column] = pd.to_datetime(frame[column], utc=True, format="ISO8601")
        return frame

    def run(self, run_id: int) -> dict:
        """The run as the API gives it: its full config and a `summary` dict."""
        return self.get(f"runs/{int(run_id)}/")

    def create_run(self, task: str, *, config: Mapping[str, Any] | None = None, program: str | None = None,
                   name: str = "", tags: Iterable[str] = (), notes: str = "", preset: str | None = None,
                   program_state: Mapping[str, Any] | None = None, project: str | None = None,
                   partition: str | None = None, time_limit: int | None = None) -> dict:
        """Queues a run of `task` as the launch form would (its defaults, then `config`), with the same
        checks: a refused setting, limit or model raises CohortAPIError(400) naming the field. Returns
        the queued run as `run()` gives it. `program_state`: a DSPy program's saved state to train from;
        `project`: the project to launch into (default: the token's, else your personal project);
        `partition`: a Slurm partition the server offers, to train it there as a batch job of
        `time_limit` minutes (default: the server's)."""
        body = {"task": task, "program": program, "name": name, "tags": list(tags), "notes": notes,
                "preset": preset, "config": dict(config or {}), "program_state": program_state,
                "project": project, "partition": partition, "time_limit": time_limit}
        return self.post("runs/", {k: v for k, v in body.items() if v is not None})

    def wait(self, run_id: int, *, timeout: float | None = None, poll_s: float = 2.0) -> dict:
        """Polls the run until it is no longer queued or running (succeeded, failed, cancelled,
        interrupted); returns it. TimeoutError after `timeout` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            run = self.run(run_id)
            if run["state"] in FINAL_STATES:
                return run
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} is still {run['state']} after {timeout:.0f} s")
            time.sleep(poll_s)

    def download_adapter(self, run_id: int, folder: str | Path) -> Path:
        """Unpacks the LoRA adapter a succeeded run trained (PEFT format, naming the run's model id; its
        README.md says how to load it) into `folder`; returns it."""
        data = self._send("GET", f"runs/{int(run_id)}/adapter/")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.infolist():
                target = (folder / member.filename).resolve()
                if not target.is_relative_to(folder.resolve()):  # never write outside the folder
                    raise CohortAPIError(0, f"the adapter archive names a file outside it: {member.filename!r}")
                archive.extract(member, folder)
        return folder

    # --- metrics ------------------------------------------------------------------------------

    def metrics(self, run_id: int, series: Iterable[str] | None = None, max_points: int | None = None, *,
                from_step: int | None = None, to_step: int | None = None) -> pd.DataFrame:
        """Wide metrics, like the CSV export: a `step` column and one float column per metric key
        (sorted), NaN where a step has no value. Every stored step by default (the newest attempt
        wins a step); at most `max_points` per series (downsampled) when given."""
        params = {"series": ",".join(series) if series is not None else None, "max_points": max_points,
                  "from_step": from_step, "to_step": to_step}
        body = self.get(f"runs/{int(run_id)}/metrics/", params)
        columns = {
            key: pd.Series([math.nan if v is None else float(v) for v in trace["y"]],
                           index=pd.Index(trace["x"], dtype="int64"), dtype="float64")
            for key, trace in sorted(body["series"].items())
        }
        if not columns:
            return pd.DataFrame({"step": pd.Series([], dtype="int64")})
        frame = pd.concat(columns, axis=1, sort=True)  # outer join on step
        frame.index.name = "step"
        return frame.reset_index()

    # --- steps --------------------------------------------------------------------------------

    def rollouts(self, run_id: int, step: int, *, attempt: int | None = None, prompts: bool = False) -> pd.DataFrame:
        """One row per rollout of the step (the newest attempt that stored it unless `attempt`),
        in index order; `calls` holds each rollout's module calls (with prompts if asked)."""
        params = [("attempt", attempt), ("prompts", 1 if prompts else None)]
        rows = list(self._pages(f"runs/{int(run_id)}/steps/{int(step)}/rollouts/", params))
        frame = pd.DataFrame(rows)
        if not frame.empty:
            frame["n_calls"] = frame["calls"].map(len)
        return frame

    def groups(self, run_id: int, step: int, *, attempt: int | None = None, module: str | None = None) -> pd.DataFrame:
        """One row per module-level group of the step, in index order; `members` holds its members."""
        params = [("attempt", attempt), ("module", module)]
        return pd.DataFrame(list(self._pages(f"runs/{int(run_id)}/steps/{int(step)}/groups/", params)))

    # --- examples across runs -----------------------------------------------------------------

    def examples_diff(self, a: int | Iterable[int], b: int | Iterable[int], *, solved: float | None = None,
                      kind: str | None = None) -> pd.DataFrame:
        """Where two runs part: one row per example, ranked by how differently side `a` and side `b`
        did on it (a run id, or several: a seed group, averaged), as the part-ways page shows it.
        Columns: example_id, category (learned_a, learned_b, lost_a, lost_b, solved_both, unsolved_both,
        only_a, only_b), late_gap, gain_gap, and per side `a_`/`b_` runs, visits, early, late, gain,
        early_mean, late_mean, first_right, right_at_end, first_step, last_step. `solved` is the total
        reward that counts as right (default: each run's sum of its rewards' weights); `kind` keeps one
        category. The counts per category are `frame.attrs["counts"]`, the notes on what the table could
        not count (runs without rollouts, steps retention dropped) `frame.attrs["notes"]`."""
        params = [("a", _ids(a)), ("b", _ids(b)), ("solved", solved), ("kind", kind)]
        offset, rows, first = 0, [], None
        while True:
            page = self.get("examples/diff/", [*params, ("limit", PAGE_SIZE), ("offset", offset)])
            first = first or page
            rows += page["results"]
            offset += len(page["results"])
            if not page["results"] or offset >= page["count"]:
                break
        frame = pd.DataFrame(rows, columns=list(rows[0]) if rows else ["example_id", "category"])
        frame.attrs["counts"] = first["counts"]
        frame.attrs["notes"] = first["notes"]
        return frame


def _ids(runs: int | Iterable[int]) -> str:
    return str(int(runs)) if isinstance(runs, int) else ",".join(str(int(r)) for r in runs)


def _flat_run(run: dict) -> dict:
    row = {key: value for key, value in run.items() if key not in ("summary", "config")}
    row.update(run.get("summary") or {})
    row.update({f"config.{key}": value for key, value in _flatten(run.get("config") or {}).items()})
    return row


def _flatten(config: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
