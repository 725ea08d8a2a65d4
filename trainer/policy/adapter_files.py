"""The files of a saved LoRA adapter: written whole or not at all, and, for the final adapter, naming
a base model that exists beyond this machine."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

# The folder of a run's final adapter, inside the run folder (the adapter download serves it).
FINAL_ADAPTER_DIR = "adapter"


def write_folder_atomically(path: str | os.PathLike[str], fill) -> Path:
    """`fill(folder)` into a temporary folder beside `path`, then renamed over it: a reader (vLLM, the
    adapter download) never sees half an adapter."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        fill(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.rename(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def name_base_model(folder: Path, base_model: str, readme: str) -> None:
    """Rewrites the saved adapter_config.json, not the live PEFT config: a later save with a hub id
    there would ask the hub whether the model's vocabulary changed. PEFT's model card (README.md)
    names the local folder too, so `readme` replaces it."""
    config_file = folder / "adapter_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base_model
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
    (folder / "README.md").write_text(readme, encoding="utf-8")
