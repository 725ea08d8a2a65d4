"""What the model cache already holds (trainer/models/cache.py), read without building anything."""

from trainer.config import SMOLLM2_MODEL, TINY_MODEL
from trainer.models.cache import MARKER_NAME, built_builtin_models, downloaded_hub_models


def built(folder):
    folder.mkdir(parents=True)
    (folder / MARKER_NAME).write_text("{}")


def test_a_builtin_counts_as_built_only_once_its_build_finished(tmp_path):
    assert built_builtin_models(tmp_path / "no-cache-yet") == {}
    built(tmp_path / "tiny-toy")
    built(tmp_path / "tiny-arith_format")
    (tmp_path / "tiny-search").mkdir()  # interrupted: no marker
    (tmp_path / "smollm2-135m-instruct").mkdir()
    assert built_builtin_models(tmp_path) == {TINY_MODEL: ["arith_format", "toy"]}
    (tmp_path / "smollm2-135m-instruct" / MARKER_NAME).write_text("{}")
    assert built_builtin_models(tmp_path)[SMOLLM2_MODEL] == ["smollm2-135m-instruct"]


def test_hub_models_with_a_snapshot_are_listed_by_their_id(tmp_path):
    hub = tmp_path / "hub"
    (hub / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / "abc123").mkdir(parents=True)
    (hub / "models--gpt2" / "snapshots" / "def456").mkdir(parents=True)
    (hub / "models--org--half-downloaded" / "blobs").mkdir(parents=True)  # no snapshot yet
    (hub / "datasets--org--data" / "snapshots" / "x").mkdir(parents=True)  # not a model
    (hub / ".locks").mkdir()
    (hub / "version.txt").write_text("1")
    assert downloaded_hub_models(tmp_path) == ["Qwen/Qwen2.5-0.5B-Instruct", "gpt2"]
    assert downloaded_hub_models(tmp_path / "missing") == []
