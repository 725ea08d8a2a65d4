"""A TensorBoard log directory (event files, read recursively) as an `ImportedRun`.

The contents are read with tbparse (scalars, hparams, text: TensorBoard's own event loader beneath);
each event file is first read record by record with TensorBoard's own record reader, which checks
every record's CRC, because the loader stops quietly at a damaged record and an import must say
which file and which record it could not read. What is kept:
- every scalar at its step, under its tag; a file in a subfolder (TensorBoard shows each as a run of
  its own) has its tags prefixed with the subfolder (`eval/reward`, `run2/train/loss`);
- hparams (`add_hparams`, or the HParams plugin) as the run's config;
- text summaries, with their step and tag.
"""

from __future__ import annotations

import math
from pathlib import Path

from trainer.importers.records import ImportedRun, Problems, Skip
from trainer.run import events


def event_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and "tfevents" in p.name)


def check_event_file(path: Path, problems: Problems) -> bool:
    """Reads every record of `path` with TensorBoard's reader (CRC checked); False if one is bad."""
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

    reader = pywrap_tensorflow.PyRecordReader_New(str(path).encode(), 0)
    number = 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return True
        except errors.DataLossError as exc:
            detail = str(exc).split(str(path))[-1].strip(" '") or "corrupt"
            problems.bad(path, f"record {number + 1}", f"unreadable ({detail})")
            return False
        number += 1


def read_tensorboard_run(root: Path, problems: Problems) -> ImportedRun:
    from tbparse import SummaryReader

    run = ImportedRun(origin="tensorboard", source=root, key=str(root.resolve()), name=root.name)
    files = event_files(root)
    base = root if root.is_dir() else root.parent
    for path in files:
        check_event_file(path, problems)
    for path in files:
        reader = SummaryReader(str(path), pivot=False)
        prefix = "" if path.parent == base else path.parent.relative_to(base).as_posix() + "/"
        scalars = reader.scalars
        if len(scalars):
            for step, tag, value in zip(scalars["step"], scalars["tag"], scalars["value"], strict=True):
                step = int(step)
                if not events.step_in_bounds(step):
                    problems.bad(path, f"scalar {tag!r}", f"step {step} is not 0-{events.MAX_STEP:,}")
                    continue
                value = float(value)
                run.step(step)["metrics"][prefix + str(tag)] = value if math.isfinite(value) else None
        hparams = reader.hparams
        if len(hparams):
            for tag, value in zip(hparams["tag"], hparams["value"], strict=True):
                run.config[prefix + str(tag)] = _plain(value)
        text = reader.text
        if len(text):
            for step, tag, value in zip(text["step"], text["tag"], text["value"], strict=True):
                run.texts.append({"step": int(step), "tag": prefix + str(tag), "text": str(value)})
        for kind in ("histograms", "images", "audio", "tensors"):
            try:
                frame = getattr(reader, kind)
            except Exception:  # a kind tbparse cannot read here: nothing of it is imported anyway
                continue
            for tag in sorted(set(frame["tag"])) if len(frame) else ():
                run.skipped.append(Skip(prefix + str(tag), f"TensorBoard {kind}, not scalars"))
    return run


def _plain(value):
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value
