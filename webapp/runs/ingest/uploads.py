"""The runs page's upload form for another trainer's files (`cohort import` in the browser): a `.wandb`
run file, a TensorBoard event file, verl's file log, or a `.zip` of a folder of them.

The files are read by the same readers as `cohort import` (trainer/importers), fitted to the step-event
contract the same way, and stored through the logging API's own services (webapp/runs/ingest/external.py)
in one transaction per run: a bad record stores nothing of its run, and an import either lands whole or
not at all. The upload is unpacked into a temporary folder that is removed afterwards; a zip member whose
path leaves that folder, or a zip that unpacks to more than the upload limit, is refused.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.db import transaction

from trainer.importers import BadSource, ImportedRun, fitted, read_runs
from webapp.runs.ingest.external import external_run_finish, external_run_start, external_steps_log


class UploadRefused(ValueError):
    """An upload that cannot be imported, with the words to show beside the field."""


@dataclass
class ImportedUpload:
    runs: list  # the stored Run rows
    skipped: list[str]  # what was left out, with the reason (--skip-bad's list and the contract's cuts)


def max_upload_bytes() -> int:
    return int(getattr(settings, "COHORT_IMPORT_MAX_UPLOAD_MB", 200)) * 1024 * 1024


def upload_import(owner, files: list, *, project, task: str, tags: list[str], skip_bad: bool) -> ImportedUpload:
    """Stores the runs found in the uploaded `files` (Django UploadedFiles) as imported runs of `owner`."""
    limit = max_upload_bytes()
    if sum(f.size for f in files) > limit:
        raise UploadRefused(f"The upload is {sum(f.size for f in files) / 2**20:,.1f} MB; the limit is "
                            f"{limit // 2**20} MB (COHORT_IMPORT_MAX_UPLOAD_MB). Import a larger run with `cohort import`.")
    folder = Path(tempfile.mkdtemp(prefix="cohort-upload-"))
    try:
        _unpack(files, folder, limit)
        entries = list(folder.iterdir())
        root = entries[0] if len(entries) == 1 and entries[0].is_dir() else folder  # a zip of one folder: that folder
        try:
            runs = read_runs(root, skip_bad=skip_bad)
        except BadSource as exc:
            raise UploadRefused(f"{_shown(exc, folder)} Nothing was imported; tick \"Skip bad records\" to import "
                                "what is sound.") from None
        except (ValueError, OSError) as exc:  # not a format found, the reader's extra missing, an unreadable file
            raise UploadRefused(_shown(exc, folder)) from None
        stored, skipped = [], []
        uploaded = ",".join(sorted(PurePosixPath(f.name).name for f in files))
        for run in runs:
            if run.origin != "wandb":  # a W&B run is known by its id; another source by what was uploaded
                run.key = f"upload:{owner.pk}:{uploaded}:{_relative(run.source, folder)}"
            if run.source == folder:
                run.name = PurePosixPath(files[0].name).stem
            fields = fitted(run)
            run.config["_import"] = {**fields["config"]["_import"], "source": f"upload: {_relative(run.source, folder)}"}
            fields["config"]["_import"] = run.config["_import"]
            stored.append(_store(owner, run, fields, project=project, task=task, tags=tags))
            skipped.extend(f"{s.what}: {s.reason}".replace(str(folder) + "/", "") for s in run.skipped)
        return ImportedUpload(stored, skipped)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _store(owner, run: ImportedRun, fields: dict, *, project, task: str, tags: list[str]):
    with transaction.atomic():  # the run and every step, or nothing
        stored, _ = external_run_start(owner, client_id=run.client_id, task=task, name=fields["name"],
                                       config=fields["config"], tags=tags, notes=fields["notes"], origin=run.origin,
                                       total_steps=fields["total_steps"], project=project)
        steps = run.ordered_steps()
        for start in range(0, len(steps), 100):
            external_steps_log(stored, steps[start:start + 100])
        external_run_finish(stored, state=run.ended or "succeeded", error=run.error)
    stored.refresh_from_db()
    return stored


def _unpack(files: list, folder: Path, limit: int) -> None:
    for index, upload in enumerate(files):
        name = PurePosixPath(upload.name).name or f"upload-{index}"
        if name.endswith(".zip"):
            try:
                with zipfile.ZipFile(upload) as archive:
                    members = archive.infolist()
                    if sum(m.file_size for m in members) > limit:
                        raise UploadRefused(f"{name} unpacks to more than the {limit // 2**20} MB limit.")
                    for member in members:
                        target = (folder / member.filename).resolve()
                        if not target.is_relative_to(folder.resolve()):
                            raise UploadRefused(f"{name}: {member.filename!r} would unpack outside its folder.")
                    archive.extractall(folder)
            except zipfile.BadZipFile as exc:
                raise UploadRefused(f"{name} is not a readable zip file ({exc}).") from None
        else:
            with open(folder / name, "wb") as out:
                for chunk in upload.chunks():
                    out.write(chunk)


def _relative(path: Path, folder: Path) -> str:
    try:
        return Path(path).relative_to(folder).as_posix() if Path(path) != folder else "."
    except ValueError:
        return str(path)


def _shown(exc: Exception, folder: Path) -> str:
    """An error's words with the temporary folder taken out of its paths."""
    text = str(exc).replace(str(folder) + "/", "").replace(str(folder), "the upload")
    return text if text.endswith(".") else text + "."
