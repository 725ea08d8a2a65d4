"""Which models users may train (issue 13 item 4): the admin-managed allow-list, the safety rules for
local model folders, and the environment that points training at the one shared hub cache.

A `RunConfig.model` is one of three things:

* a built-in model (`builtin:tiny`, `builtin:smollm2-135m-instruct`): always allowed;
* a local folder: anything absolute, starting with `.` or `~`, holding a `..` segment, or naming a
  folder that exists. It must be absolute and free of `..`; its real path (symlinks followed) must lie
  outside the run directories, the server's own files (the code, its venv, the var dir with the
  database and secrets, dataset uploads, the hub cache) and then inside a `local_root` entry;
* otherwise a hub id: allowed when an `id` entry equals it or a `prefix` entry (or a prefix in the
  COHORT_MODEL_ALLOWED_PREFIXES setting) begins it.

An empty allow-list therefore allows only the built-in models, so a fresh install still trains it.

Staff may train any hub id and any local folder outside the roots, but the local-folder safety rules
(`..`, run directories, the server's own files) hold for them too: a mistyped path must not make the
trainer read the server's files. The check runs at launch (form, `launch_run`) and again when a worker
claims the run, so a model removed from the list meanwhile is refused before it is loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from trainer.config import BUILTIN_MODELS
from webapp.limits.local_paths import PathRefused, PathWords, inside, resolve_user_path
from webapp.limits.model_entries import (  # noqa: F401 - allowed_model_entry_error re-exported
    allowed_model_entry_error,
    looks_like_local_path,
)

CONTROL_MESSAGE = "A model name cannot contain control characters."
PARENT_MESSAGE = "Model paths may not contain '..'; write the folder's full path."
RUN_DIR_MESSAGE = "Run directories are not models: {path} is inside the runs folder."
SERVER_FILES_MESSAGE = "{path} is inside the server's own files ({area}); a model cannot be loaded from there."
LOCAL_PATH_WORDS = PathWords(
    control=CONTROL_MESSAGE, parent=PARENT_MESSAGE,
    relative=("Local model folder {path!r} must be an absolute path (e.g. /srv/models/my-model); "
              "a relative or '~' path depends on where the worker runs."))


def server_areas() -> list[tuple[str, str]]:
    """(real path, what it is) of the folders no model may come from, the runs folder first."""
    # The most specific first: the var dir usually lies inside the code's folder.
    areas = [(settings.COHORT_RUNS_DIR, "the runs folder"),
             (getattr(settings, "COHORT_MODEL_CACHE", None), "the hub cache; use the model's hub id"),
             (getattr(settings, "COHORT_DATASET_UPLOAD_DIR", None), "dataset uploads"),
             (getattr(settings, "VAR_DIR", None), "the var dir: database, secrets, logs"),
             (settings.BASE_DIR, "the Cohort code and its virtual environment")]
    return [(os.path.realpath(folder), what) for folder, what in areas if folder]


def local_roots() -> list[str]:
    from webapp.limits.models import AllowedModel

    return list(AllowedModel.objects.filter(kind=AllowedModel.Kind.LOCAL_ROOT).values_list("value", flat=True))


def _local_refusal(model: str, *, staff: bool) -> str | None:
    try:
        path = resolve_user_path(model, LOCAL_PATH_WORDS)
    except PathRefused as refused:
        return str(refused)
    for folder, what in server_areas():
        if inside(path.real, folder):
            if what == "the runs folder":
                return RUN_DIR_MESSAGE.format(path=path.shown)
            return SERVER_FILES_MESSAGE.format(path=path.shown, area=what)
    if staff:
        return None
    roots = local_roots()
    if any(inside(path.real, os.path.realpath(root)) for root in roots):
        return None
    if not roots:
        return f"Local model folders are not allowed on this server ({model!r}); ask an admin to add a local root."
    return (f"Local model folder {path.shown} is outside the allowed folders ({', '.join(sorted(roots))}). "
            f"Ask an admin to add it.")


def _hub_refusal(model: str) -> str | None:
    from webapp.limits.models import AllowedModel

    rows = list(AllowedModel.objects.exclude(kind=AllowedModel.Kind.LOCAL_ROOT).values_list("kind", "value"))
    ids = {value for kind, value in rows if kind == AllowedModel.Kind.ID}
    prefixes = {value for kind, value in rows if kind == AllowedModel.Kind.PREFIX}
    prefixes.update(p for p in getattr(settings, "COHORT_MODEL_ALLOWED_PREFIXES", []) if p)
    if model in ids or any(model.startswith(prefix) for prefix in prefixes):
        return None
    allowed = sorted(f"{p}…" for p in prefixes) + sorted(ids)
    listed = ", ".join(allowed) if allowed else f"only the built-in models, {', '.join(BUILTIN_MODELS)}"
    return f"Model {model!r} is not on this server's allow-list (allowed: {listed}). Ask an admin to add it."


def model_refusal(user, model: str) -> str | None:
    """Why `user` may not train `model` (None: allowed). See the module docstring for the rules."""
    if model in BUILTIN_MODELS:
        return None
    if any(ord(char) < 32 for char in model):  # a hub id too, not only a folder
        return CONTROL_MESSAGE
    staff = bool(getattr(user, "is_staff", False))
    if looks_like_local_path(model):
        return _local_refusal(model, staff=staff)
    if staff:
        return None
    return _hub_refusal(model)


def trainer_environment() -> dict[str, str]:
    """Environment for the training subprocess: every hub download goes to the one shared cache."""
    cache = Path(settings.COHORT_MODEL_CACHE)
    return {"HF_HOME": str(cache), "HF_HUB_CACHE": str(cache / "hub")}
