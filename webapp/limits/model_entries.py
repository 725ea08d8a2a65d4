"""An entry of the model allow-list as an admin types it: its kinds, and what can be wrong with one.

No database access here: `models.py` checks an entry with it (`AllowedModel.clean`) and
`model_allowlist.py` reads the stored entries, so both import it and neither imports the other's rules.
"""

from __future__ import annotations

import os

from django.db.models import TextChoices

from webapp.limits.local_paths import path_segments


class AllowedModelKind(TextChoices):
    ID = "id", "Hub id (exact)"
    PREFIX = "prefix", "Hub id prefix"
    LOCAL_ROOT = "local_root", "Local folder (models under it)"


def looks_like_local_path(model: str) -> bool:
    """True when `model` names a folder rather than a hub id (the trainer's loader would read it from disk)."""
    return (model.startswith(("/", ".", "~", "\\")) or ".." in path_segments(model)
            or os.path.isabs(model) or os.path.isdir(model))


def allowed_model_entry_error(kind: str, value: str) -> str | None:
    """What is wrong with an allow-list entry an admin typed (None: fine)."""
    value = (value or "").strip()
    if not value:
        return "Give a hub id, a hub id prefix or a folder."
    if kind == AllowedModelKind.LOCAL_ROOT:
        if not os.path.isabs(value):
            return f"A local root must be an absolute folder such as /srv/models, not {value!r}."
        if ".." in path_segments(value):
            return "A local root may not contain '..'; write the folder's full path."
        return None
    if looks_like_local_path(value):
        return (f"{value!r} looks like a folder; choose 'Local folder' for folders, or give a hub id "
                f"such as Qwen/Qwen2.5-0.5B-Instruct.")
    return None
