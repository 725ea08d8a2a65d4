"""Uploads staged between the admin's preview and its confirmation: the files and a manifest under
`upload_dir()/<token>/`, removed after the import and dropped after a day when never confirmed."""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from webapp.datasets.scan import ImportOptions, SourceFile
from webapp.paths import VAR_DIR

STALE_UPLOAD_S = 24 * 3600


def upload_dir() -> Path:
    """Where uploads wait between preview and import: under the var dir, never in the repository."""
    return Path(getattr(settings, "COHORT_DATASET_UPLOAD_DIR", None) or VAR_DIR / "dataset-uploads")


@dataclass
class StagedUpload:
    """An upload waiting for its preview to be confirmed: files under `upload_dir()/<token>/`."""

    token: str
    directory: Path
    manifest: dict[str, Any]

    @property
    def options(self) -> ImportOptions:
        return ImportOptions.from_dict(self.manifest["options"])

    @property
    def sources(self) -> list[SourceFile]:
        return sources_in(self.directory, self.manifest["files"])


def sources_in(directory: str | Path, files: list[dict[str, str]]) -> list[SourceFile]:
    return [SourceFile(str(Path(directory) / f["stored"]), f["filename"], f["split"]) for f in files]


def _safe_name(filename: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", Path(filename).name)[-100:]
    return name.lstrip(".") or "upload"


def upload_stage(files: list[tuple[Any, str]], options: ImportOptions, meta: dict[str, Any]) -> StagedUpload:
    """Saves uploaded files (`(UploadedFile, split)` pairs) under a new token with a manifest."""
    _remove_stale_uploads()
    token = uuid.uuid4().hex
    directory = upload_dir() / token
    directory.mkdir(parents=True)
    entries = []
    for index, (upload, split) in enumerate(files):
        stored = f"{index}-{_safe_name(upload.name)}"
        with open(directory / stored, "wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
        entries.append({"filename": Path(upload.name).name, "stored": stored, "split": split})
    manifest = {"options": options.to_dict(), "files": entries, **meta}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return StagedUpload(token, directory, manifest)


def upload_get(token: str) -> StagedUpload | None:
    if not re.fullmatch(r"[0-9a-f]{32}", token or ""):
        return None
    directory = upload_dir() / token
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return StagedUpload(token, directory, manifest)


def upload_discard(directory: str | Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def _remove_stale_uploads() -> None:
    """Previews that were never confirmed are dropped after a day."""
    root = upload_dir()
    if not root.exists():
        return
    cutoff = time.time() - STALE_UPLOAD_S
    for entry in root.iterdir():
        try:
            if entry.is_dir() and entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass
