"""A small client of Cohort's read API that returns pandas DataFrames.

    from cohort.client import Client
    client = Client("http://localhost:8000", token="<key from /api/tokens/>")
    client.metrics(12)          # step + one column per metric, every stored step

Only the standard library speaks HTTP (urllib); pandas is the one dependency (`pip install
cohort[client]`). Pages are followed transparently. Errors raise `CohortAPIError(status, message)`.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pandas as pd

PAGE_SIZE = 500  # the API's largest page
DATE_COLUMNS = ("created_at", "started_at", "finished_at")


class CohortAPIError(Exception):
    """A request the API refused (`status`: the HTTP status, 0 when the server could not be reached)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


class Client:
    """Read runs, metrics, rollouts and groups of a Cohort server with a personal API token."""

    def __init__(self, url: str, token: str, *, timeout: float = 60.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, not {url!r}")
        self.url = url.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout

    # --- HTTP ---------------------------------------------------------------------------------

    def get(self, path: str, params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> Any:
        """The decoded JSON of `GET /api/<path>` (`params`: a mapping or (name, value) pairs)."""
        items = list(params.items() if isinstance(params, Mapping) else params or [])
        query = urllib.parse.urlencode([(k, v) for k, v in items if v is not None])
        url = urllib.parse.urljoin(self.url, "api/" + path.lstrip("/")) + (f"?{query}" if query else "")
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}",
                                                       "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise _api_error(exc) from None
        except urllib.error.URLError as exc:
            raise CohortAPIError(0, f"cannot reach {self.url}: {exc.reason}") from None

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
             owner: str | None = None, q: str | None = None, config: Mapping[str, Any] | None = None) -> pd.DataFrame:
        """One row per visible run: id, name, state, task, program, owner, the summary fields as
        columns (current_step, best_reward, last_reward_mean, ...) and the config flattened to
        `config.<key>` columns. `config={"estimator": "gdpo", "lora.rank": 8}` keeps runs whose
        config has those values."""
        params: list[tuple[str, Any]] = [("state", state), ("task", task), ("program", program), ("owner", owner),
                                         ("q", q)]
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


def _api_error(exc: urllib.error.HTTPError) -> CohortAPIError:
    try:
        detail = json.loads(exc.read().decode("utf-8")).get("detail")
    except (ValueError, AttributeError, UnicodeDecodeError):
        detail = None
    if exc.code == 401:
        message = f"token rejected ({detail})" if detail else "token rejected"
    elif exc.code == 404:
        message = "no such run" if detail in (None, "No such run.") else f"not found: {detail}"
    else:
        message = detail or exc.reason or "request failed"
    return CohortAPIError(exc.code, str(message))
