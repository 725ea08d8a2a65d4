"""TensorBoard event files written by torch's SummaryWriter, read by trainer/importers."""

from __future__ import annotations

import shutil

import pytest

from tests.trainer.importers.writers import write_tensorboard_log
from trainer.importers import BadSource, read_runs


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    return write_tensorboard_log(tmp_path_factory.mktemp("tb") / "run1", steps=10)


def test_scalars_hparams_and_text_equal_what_was_written(logdir):
    (run,) = read_runs(logdir)
    assert run.origin == "tensorboard" and run.name == "run1"
    assert sorted(run.steps) == list(range(10))
    for i in range(10):
        assert run.steps[i]["metrics"]["train/reward"] == pytest.approx(i * 0.25)
        assert run.steps[i]["metrics"]["train/loss"] == pytest.approx(1.0 / (i + 1))
    assert run.config == {"lr": pytest.approx(1e-4), "optimizer": "adam", "batch_size": 8}
    assert run.steps[0]["metrics"]["hparam/final_reward"] == pytest.approx(0.9)
    assert run.texts == [{"step": 3, "tag": "notes", "text": "lr warm-up ends here"}]


def test_a_log_in_a_subfolder_keeps_its_tags_under_the_subfolder(logdir, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(logdir, root / "seed1")
    (run,) = read_runs(root)
    assert run.steps[4]["metrics"]["seed1/train/reward"] == pytest.approx(1.0)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_event_file_is_named_with_its_record(logdir, tmp_path, damage):
    copy = tmp_path / "bad"
    shutil.copytree(logdir, copy)
    target = max(copy.glob("*tfevents*"), key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[:-10]
    target.write_bytes(bytes(data))
    with pytest.raises(BadSource) as raised:
        read_runs(copy)
    assert raised.value.file == str(target) and raised.value.where.startswith("record ")
    (run,) = read_runs(copy, skip_bad=True)
    assert any(str(target) in skip.what for skip in run.skipped)
