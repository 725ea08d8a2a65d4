"""`cohort.init` and the `Run` it returns: what a training loop calls.

The loop's side is kept to in-memory work and one appended line per step, so `log` never waits for
the network (cohort/sdk/sender.py sends in the background, cohort/sdk/spool.py is the file).

Steps follow wandb's habits: several `log` calls with the same step merge into one step (a later
value of a metric wins); `step=None` is the step after the newest; an older step than the pending one
is dropped with a warning. The server takes a step exactly once, so a step is only written (sealed)
when it can no longer change: when a later step arrives, on `flush()`, or at `finish()`.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cohort.http import base_url
from cohort.sdk import exit_hook, request, values
from cohort.sdk.sender import Sender
from cohort.sdk.spool import Spool, runs_home
from trainer.run import events

MODES = ("online", "offline", "disabled")
FINISH_STATES = ("succeeded", "failed")
MAX_ERROR_CHARS = 10_000  # the server's limit
# How long `init` waits for the server to create the run, so the page's URL is printed before the
# training's own output. A server that is slower (or down) costs the loop nothing more: the URL is
# printed when the server answers, from the background.
ANSWER_WAIT_S = 5.0
TRUE_WORDS = ("1", "true", "yes", "on")


class CohortWarning(UserWarning):
    """Something the SDK dropped or could not send (the training goes on)."""


def warn(message: str) -> None:
    warnings.warn(f"cohort: {message}", CohortWarning, stacklevel=3)


class Run:
    """A run being logged. Make one with `cohort.init(...)`; see the module's docstring for steps."""

    def __init__(self, spool: Spool | None, sender: Sender | None, *, mode: str):
        self.mode = mode
        self._spool = spool
        self._sender = sender
        self._lock = threading.Lock()
        self._pending: int | None = None  # the step being gathered
        self._metrics: dict[str, Any] = {}
        self._rollouts: list[dict[str, Any]] = []
        self._spans: list[dict[str, Any]] = []
        self._reward_names: set[str] = set()  # of the pending step's rollouts (the server's limits are per step)
        self._modules: set[str | None] = set()
        self._sealed = -1  # the newest step written
        self._lines = 0  # steps written to the folder
        self._warned: set[str] = set()
        self._finished = False

    # --- what the server and the folder say ---------------------------------------------------

    @property
    def id(self) -> int | None:
        """The run's id on the server; None until the server created it (or offline)."""
        return self._spool.state["run_id"] if self._spool else None

    @property
    def url(self) -> str | None:
        """The run's page; None until the server created it (or offline)."""
        return self._spool.state["run_url"] if self._spool else None

    @property
    def folder(self) -> Path | None:
        """The run's local folder (steps.jsonl, run.json): what `cohort sync` takes."""
        return self._spool.folder if self._spool else None

    # --- logging ------------------------------------------------------------------------------

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Adds `metrics` (name -> number) to `step` (None: the step after the newest). Values that
        are not numbers are skipped, with one warning per name."""
        kept, skipped = values.metrics_numbers(metrics)
        for key in skipped:
            self._warn_once(f"metric:{key}", f"metric {key!r} is not a number ({type(metrics[key]).__name__}): "
                                             "skipped (warned once per name)")
        with self._lock:
            merged = self._metrics.keys() | kept.keys() if step is not None and step == self._pending else kept.keys()
            if len(merged) > events.MAX_METRICS_PER_STEP:
                raise ValueError(f"a step holds at most {events.MAX_METRICS_PER_STEP} metrics; this one would hold {len(merged)}")
            if self._take(step):
                self._metrics.update(kept)

    def log_rollouts(self, step: int, rollouts: Iterable[Mapping[str, Any]]) -> None:
        """Adds rollouts to `step`: dicts with prompt, completion (text or chat messages), rewards
        (name -> number), reward, advantage, group (the rollouts of one group share it), example_id,
        module; and, optionally, the completion token by token: tokens (each token's text, at most
        32,768), logprobs (each token's log-prob under the policy that sampled it) and entropies (nats),
        one value per token (lists, numpy arrays or 1-d tensors; finite, log-probs <= 0, entropies >= 0).
        A malformed rollout raises a ValueError here (`rollouts[3].entropies: 12 values for 11 tokens`),
        and nothing of the call is kept."""
        step = values.step_number(step)
        with self._lock:
            same = self._pending == step
            held = (len(self._rollouts), set(self._reward_names), set(self._modules)) if same else (0, (), ())
        clean = values.rollouts(rollouts, held=held[0], names=held[1], modules=held[2])
        with self._lock:
            if self._take(step):
                self._rollouts.extend(clean)
                self._reward_names.update(name for r in clean for name in r.get("rewards", ()))
                self._modules.update(r.get("module") for r in clean)

    def log_span(self, name: str, start: float, end: float, *, lane: str = "trainer", step: int | None = None,
                 policy_version: int | None = None) -> None:
        """Adds a bar to the run's timeline: what `lane` (a process: sampler, trainer, or any name) did from
        `start` to `end` (seconds since the epoch, `time.time()`), on `step` (None: the pending step, or
        the step after the newest), `policy_version` on a generation (the updates its weights had had).
        A bar that is not one raises a ValueError here, and nothing of it is kept."""
        span = {"lane": lane, "name": name, "start": start, "end": end}
        if policy_version is not None:
            span["policy_version"] = policy_version
        checked = events.span_checked(span)
        if checked is None:
            raise ValueError(f"a span needs a lane of 1 to {events.MAX_LANE} characters, a name of 1 to "
                             f"{events.MAX_SPAN_NAME}, finite start and end seconds, and a whole policy_version "
                             f"if any; not {span!r:.200}")
        with self._lock:
            if step is None and self._pending is not None:
                step = self._pending
            held = len(self._spans) if step is not None and step == self._pending else 0
            if held >= events.MAX_SPANS_PER_STEP:
                raise ValueError(f"a step holds at most {events.MAX_SPANS_PER_STEP} spans")
            if self._take(step):
                self._spans.append(checked)

    def flush(self) -> None:
        """Seals the pending step now (it is sent; a later `log` to it is dropped)."""
        with self._lock:
            self._seal()

    def _take(self, step: int | None) -> bool:
        """Makes `step` the pending one if it may still be written to; False (with a warning) if not."""
        if self._finished:
            self._warn_once("finished", "the run is finished: later logs are dropped")
            return False
        if step is None:
            step = (self._pending if self._pending is not None else self._sealed) + 1
        else:
            step = values.step_number(step)
        if self._pending is not None and step == self._pending:
            return True
        if self._pending is not None and step < self._pending:
            warn(f"step {step} is older than the pending step {self._pending}: dropped")
            return False
        if step <= self._sealed:
            warn(f"step {step} is not after step {self._sealed}, which is sealed (written for good): dropped")
            return False
        self._seal()
        self._pending = step
        return True

    def _seal(self) -> None:
        if self._pending is None:
            return
        step = {"step": self._pending, "metrics": self._metrics, "rollouts": self._rollouts,
                **({"spans": self._spans} if self._spans else {})}
        self._sealed, self._pending, self._metrics, self._rollouts, self._spans = self._pending, None, {}, [], []
        self._reward_names, self._modules = set(), set()
        if self._spool is None:
            return
        self._spool.append(json.dumps(step, allow_nan=False, separators=(",", ":")))
        self._lines += 1
        if self._sender is not None:
            self._sender.put(self._lines)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warn(message)

    # --- the end --------------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> bool:
        """True once the server has acknowledged everything sealed so far (the run, the steps, and
        the finish if requested); False after `timeout` s, offline, or when the upload stopped."""
        return self._sender.wait(timeout) if self._sender is not None else False

    def finish(self, state: str = "succeeded", error: str = "", timeout: float | None = 60.0) -> None:
        """Seals the pending step and finishes the run as `state` ("succeeded" or "failed", with
        `error`), waiting up to `timeout` s for the upload. If it could not finish in time, says how
        many steps are left and the `cohort sync` command that uploads them; nothing is lost."""
        if state not in FINISH_STATES:
            raise ValueError(f"state must be one of {', '.join(FINISH_STATES)}, not {state!r}")
        with self._lock:
            if self._finished:
                return
            self._seal()
            self._finished = True
        exit_hook.untrack(self)
        if self._spool is None:
            return
        self._spool.close()
        self._spool.update(finish={"state": state, "error": str(error or "")[:MAX_ERROR_CHARS]})
        command = f"cohort sync {shlex.quote(str(self._spool.folder))}"
        if self._sender is None:
            print(f"cohort: {self._lines} steps saved offline in {self._spool.folder}; upload them with: {command}",
                  file=sys.stderr)
            return
        self._sender.finish()
        if not self._sender.wait(timeout):
            print(f"cohort: {self._sender.unsent} of {self._lines} steps are not uploaded yet "
                  f"{'(' + self._sender.stopped + ') ' if self._sender.stopped else ''}and the run is not "
                  f"finished on the server; they are kept in {self._spool.folder}: upload them with: {command}",
                  file=sys.stderr)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind, value, traceback) -> bool:
        if kind is None:
            self.finish()
        else:
            self.finish("failed", error=exit_hook.summary(kind, value))
        return False

    def __repr__(self) -> str:
        return f"<cohort.Run {self.mode} id={self.id} folder={self.folder}>"


def new_client_id() -> str:
    """A run's own id, sortable by time and unique: `20261127-023712-9f3c1a2b`."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(4)


def announce(url: str) -> None:
    """The one line `init` prints: where to watch the run."""
    print(f"cohort: streaming to {url}", file=sys.stderr, flush=True)


def init(url: str | None = None, token: str | None = None, *, task: str, name: str = "",
         config: Any = None, tags: Iterable[str] = (), notes: str = "", origin: str = "sdk",
         mode: str | None = None, dir: str | Path | None = None, total_steps: int = 0,
         project: str | None = None, quiet: bool | None = None) -> Run:
    """Starts a run of `task` on the Cohort server at `url` (default: $COHORT_URL) with a personal API
    token (default: $COHORT_TOKEN), and returns it (also a context manager: an exception inside
    finishes it as failed).

    `mode` (default: $COHORT_MODE, else "online"): "online" uploads in the background; "offline" only
    writes the run folder, for `cohort sync <folder>` later; "disabled" does nothing (other ranks).
    `dir` (default: $COHORT_DIR, else $XDG_CACHE_HOME/cohort/runs, else ~/.cache/cohort/runs): where
    the run's folder is made, never the working folder unless you say so; `cohort sync` without a
    folder uploads what those folders hold that the server has not answered.
    Online, init waits up to 5 s for the server to create the run and prints one line to stderr,
    `cohort: streaming to http://.../runs/42/` (later, from the background, if the server answers
    later); `quiet` (default: $COHORT_QUIET, e.g. `1`) prints nothing but problems.
    `config`: a dict, dataclass or Namespace (JSON, at most 64 KiB); `origin`: which trainer logged it.
    `project` (default: $COHORT_PROJECT, else the token's project if it is scoped to one, else your
    personal project): the Cohort project the run is logged into; its members see it. The token needs
    write access there (a member or an admin of it).
    """
    mode = mode or os.environ.get("COHORT_MODE") or "online"
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    url = url or os.environ.get("COHORT_URL") or None
    token = token or os.environ.get("COHORT_TOKEN") or None
    client_id = new_client_id()
    project = project or os.environ.get("COHORT_PROJECT") or None
    create = request.create_request(client_id=client_id, task=task, name=name, config=config, tags=tags,
                                   notes=notes, origin=origin, total_steps=total_steps, project=project)
    if mode == "disabled":
        return Run(None, None, mode=mode)
    if url is not None:
        url = base_url(url)
    if mode == "online" and (url is None or not token):
        raise ValueError("Cohort needs a server and a token: pass url= and token= or set COHORT_URL and "
                         "COHORT_TOKEN (a key from the server's /api/tokens/ page), or use mode='offline'")
    if quiet is None:
        quiet = os.environ.get("COHORT_QUIET", "").strip().lower() in TRUE_WORDS
    folder = (Path(dir).expanduser().absolute() if dir else runs_home()) / client_id
    spool = Spool.create(folder, url=url, create=create)
    sender = None
    if mode == "online":
        sender = Sender(spool, url, token, warn=warn, announce=None if quiet else announce)
    run = Run(spool, sender, mode=mode)
    exit_hook.track(run)
    if sender is not None:
        sender.start()
        sender.wait_answered(ANSWER_WAIT_S)
    return run
