"""What the model cache already holds, read without loading torch (the launch form lists it).

The cache (`$COHORT_MODEL_CACHE`, the web server's `settings.COHORT_MODEL_CACHE`) holds the built-in
models built on first use (`trainer.models`: `tiny-<program>/` per program, `smollm2-135m-instruct/`),
each finished build marked by `MARKER_NAME`, and the hub downloads under `hub/` in the Hugging Face
layout (`hub/models--org--name/snapshots/<revision>/`, see `webapp.limits.model_allowlist`).
"""

from __future__ import annotations

import os
from pathlib import Path

from trainer.config import SMOLLM2_MODEL, TINY_MODEL

# Written last into a finished build (trainer.models.tiny.build_atomically): a folder without it is
# a build that was interrupted, or someone else's folder.
MARKER_NAME = "cohort_build.json"
TINY_FOLDER_PREFIX = "tiny-"  # + the program whose words the tokenizer holds
SMOLLM2_NAME = "smollm2-135m-instruct"
HUB_FOLDER_PREFIX = "models--"


def built_builtin_models(cache_dir: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Built-in model -> the builds of it the cache holds: the programs a tiny model was built for
    (`{"builtin:tiny": ["toy"]}`), `[SMOLLM2_NAME]` for SmolLM2. Models not built yet are left out."""
    cache = Path(cache_dir)
    built: dict[str, list[str]] = {}
    tiny = sorted(p.name.removeprefix(TINY_FOLDER_PREFIX) for p in _folders(cache)
                  if p.name.startswith(TINY_FOLDER_PREFIX) and (p / MARKER_NAME).is_file())
    if tiny:
        built[TINY_MODEL] = tiny
    if (cache / SMOLLM2_NAME / MARKER_NAME).is_file():
        built[SMOLLM2_MODEL] = [SMOLLM2_NAME]
    return built


def downloaded_hub_models(cache_dir: str | os.PathLike[str]) -> list[str]:
    """Hub ids (`org/name`) with at least one complete snapshot in the cache's `hub/` folder, sorted.
    A folder with no snapshot yet is a download that never finished, so it is left out."""
    models = []
    for folder in _folders(Path(cache_dir) / "hub"):
        if not folder.name.startswith(HUB_FOLDER_PREFIX):
            continue  # datasets--..., spaces--..., the hub's own lock and token files
        snapshots = folder / "snapshots"
        if any(_folders(snapshots)):
            models.append(folder.name.removeprefix(HUB_FOLDER_PREFIX).replace("--", "/"))
    return sorted(models)


def _folders(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except OSError:  # no cache yet, or not readable: nothing is cached
        return []
