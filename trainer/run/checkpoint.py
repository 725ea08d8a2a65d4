"""Atomic, resumable checkpoints.

A checkpoint is a folder `step-000010/` holding everything a resume needs: the policy updater's
state (adapter, AdamW moments, scheduler, counters), the trainer state (step, data cursor, RNG
states) and the config. It is written into a temporary folder and renamed into place, and its
`COMPLETE` marker is written last, so a crash mid-write leaves no folder that looks complete.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

MARKER = "COMPLETE"


def rng_states() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])


def checkpoint_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:06d}"


def save_checkpoint(root: str | Path, step: int, *, policy_state: dict, trainer_state: dict, config: dict) -> Path:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    target = checkpoint_dir(root, step)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=root))
    try:
        torch.save(policy_state, tmp / "policy.pt")
        torch.save({**trainer_state, "rng": rng_states()}, tmp / "trainer.pt")
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        (tmp / MARKER).write_text(f"{step}\n")
        _fsync_dir(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.rename(tmp, target)
        _fsync_dir(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint under `root`, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    complete = [p for p in root.glob("step-*") if (p / MARKER).exists()]
    return max(complete, key=lambda p: int(p.name.removeprefix("step-")), default=None)


def load_checkpoint(path: str | Path) -> tuple[dict, dict]:
    """(policy_state, trainer_state) of a checkpoint folder; RNG states are restored here."""
    path = Path(path)
    if not (path / MARKER).exists():
        raise ValueError(f"{path} is not a complete checkpoint (no {MARKER} marker)")
    policy_state = torch.load(path / "policy.pt", weights_only=False)
    trainer_state = torch.load(path / "trainer.pt", weights_only=False)
    restore_rng_states(trainer_state.pop("rng"))
    return policy_state, trainer_state


def prune_checkpoints(root: str | Path, keep: int) -> None:
    """Keep the newest `keep` complete checkpoints (and never an unfinished temp folder)."""
    root = Path(root)
    complete = sorted((p for p in root.glob("step-*") if (p / MARKER).exists()),
                      key=lambda p: int(p.name.removeprefix("step-")))
    for old in complete[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
