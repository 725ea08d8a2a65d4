"""Files a user names for a run to read (issue 35): today `program_state`, a DSPy program's saved
state (prompt-optimized instructions and demos) that the trainer loads before training.

The trainer reads whatever path the run's config holds, with the worker's rights, so a path is checked
as a permission, not as a format: resolved (symlinks followed, no `..`), it must lie in a folder this
user may read from:

* the states this user stored through the API (`<runs dir>/program-states/<user id>/`), or a state
  stored there before states were kept per user (`<runs dir>/program-states/<sha256>.json`: named by
  a hash of its content, so only someone who had the content can name it);
* a folder of one of this user's own runs (a run's phase 1 writes
  `<runs dir>/<id>/prompt-optimization/program_state.json`); staff may name any run's;
* a local root an admin set on the model allow-list (the folders users may point the trainer at).

Never the server's own files (the code, the var dir with the database and secrets, dataset uploads,
the hub cache). The check runs at launch (beside the field) and again when a worker claims the run.

Whose run a run folder is, is the runs app's to answer: the caller passes `may_read_run(user, run_id)`
(webapp/runs/launch/limits.py), so the limits app never imports the runs app.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from webapp.limits.local_paths import PathRefused, PathWords, inside, resolve_user_path
from webapp.limits.model_allowlist import local_roots, server_areas

PROGRAM_STATES_DIR = "program-states"  # under COHORT_RUNS_DIR, which the web server shares with workers
LEGACY_STATE_NAME = re.compile(r"[0-9a-f]{64}\.json")
PROGRAM_STATE_WORDS = PathWords(
    control="A program_state path cannot contain control characters.",
    parent="A program_state path may not contain '..'; write the file's full path.",
    relative=("program_state {path!r} must be an absolute path to a state saved by a DSPy program's save(), "
              "e.g. a run's <runs dir>/<id>/prompt-optimization/program_state.json."))

# may_read_run(user, run_id): whether `user` may read the folder of run `run_id` (their own run; staff any).
RunReadable = Callable[[Any, int], bool]


def program_states_folder(user) -> Path:
    """Where the API stores the program states `user` sends (their own folder, so no one else's run
    can name them)."""
    return Path(settings.COHORT_RUNS_DIR) / PROGRAM_STATES_DIR / str(user.pk)


def _run_folder_readable(user, real: str, runs_dir: str, may_read_run: RunReadable) -> bool:
    run_id = real[len(runs_dir):].lstrip(os.sep).split(os.sep, 1)[0]
    return run_id.isdigit() and may_read_run(user, int(run_id))


def program_state_refusal(user, path: str, *, may_read_run: RunReadable) -> str | None:
    """Why `user` may not train from the saved program state at `path` (None: allowed). A path in a
    run's folder is allowed when `may_read_run(user, run_id)` says so."""
    try:
        resolved = resolve_user_path(path, PROGRAM_STATE_WORDS)
    except PathRefused as refused:
        return str(refused)
    real, shown = resolved.real, resolved.shown
    runs_dir = os.path.realpath(settings.COHORT_RUNS_DIR)
    if inside(real, runs_dir):
        allowed = _runs_dir_allows(user, real, runs_dir, may_read_run)
    else:
        for folder, what in server_areas():
            if inside(real, folder):
                return f"{shown} is inside the server's own files ({what}); a program state cannot be read from there."
        allowed = user.is_staff or any(inside(real, os.path.realpath(root)) for root in local_roots())
    if not allowed:
        return (f"program_state {shown} is not yours to read: name a state from one of your own runs, one you "
                "sent through the API, or a file under a folder an admin allowed (Allowed models: local roots).")
    if not os.path.isfile(real):
        return f"program_state {shown} is not a file: no saved program state there."
    return None


def _runs_dir_allows(user, real: str, runs_dir: str, may_read_run: RunReadable) -> bool:
    states = os.path.join(runs_dir, PROGRAM_STATES_DIR)
    if inside(real, states):
        relative = real[len(states):].lstrip(os.sep)
        mine = os.path.realpath(program_states_folder(user))
        return inside(real, mine) or bool(LEGACY_STATE_NAME.fullmatch(relative))
    return _run_folder_readable(user, real, runs_dir, may_read_run)
