"""A succeeded run's trained LoRA adapter, as the API and the run page (a share link's too) hand it out.

The trainer writes it into the run folder (`trainer.policy.adapter_files.FINAL_ADAPTER_DIR`) when the run succeeds;
the web server reads it from COHORT_RUNS_DIR, which it shares with the workers (docker-compose's
`runs` volume, the embedded stack's one folder), or for a run on Slurm from the cluster's shared
filesystem (COHORT_SLURM_RUNS_DIR), where its job wrote it."""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

from trainer.policy.adapter_files import FINAL_ADAPTER_DIR
from webapp.runs.models import Run
from webapp.runs.services import run_directory


def adapter_folder(run: Run) -> Path | None:
    """The run's final adapter folder, or None while it has none (only a succeeded run has one)."""
    folder = run_directory(run.pk, on_slurm=run.on_slurm) / FINAL_ADAPTER_DIR
    if run.state != Run.State.SUCCEEDED or not (folder / "adapter_config.json").is_file():
        return None
    return folder


def zip_folder(folder: Path):
    """The folder's files as a zip in an anonymous temporary file, rewound (closed by the response)."""
    archive = tempfile.TemporaryFile()
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            zipped.write(path, path.relative_to(folder).as_posix())
    archive.seek(0)
    return archive
