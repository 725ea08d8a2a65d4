"""W&B offline runs written by the real `wandb` package, read by trainer/importers."""

from __future__ import annotations

import shutil

import pytest

from tests.trainer.importers.writers import write_wandb_run
from trainer.importers import BadSource, read_runs


@pytest.fixture(scope="module")
def wandb_file(tmp_path_factory):
    return write_wandb_run(tmp_path_factory.mktemp("wandb"), steps=20)


def test_every_scalar_is_at_its_step_axis_with_the_config_summary_and_end(wandb_file):
    (run,) = read_runs(wandb_file.parent.parent)
    assert run.origin == "wandb" and run.name == "grpo smollm2" and run.ended == "succeeded"
    assert run.key.startswith("trl-grpo/")
    assert run.config["learning_rate"] == 1e-5 and run.config["reward_weights"] == [1.0, 0.5]
    assert run.summary["best_reward"] == 0.95
    # define_metric put train/* on train/global_step (2, 4, ... 40), not W&B's own _step
    assert sorted(run.steps) == [2 * i for i in range(1, 21)]
    for i in range(1, 21):
        metrics = run.steps[2 * i]["metrics"]
        assert metrics["train/reward"] == pytest.approx(i / 20) and metrics["train/loss"] == pytest.approx(1 / i)
    assert not any(name.startswith("_") for step in run.steps.values() for name in step["metrics"])


def test_trls_completions_table_becomes_rollouts_grouped_by_prompt(wandb_file):
    (run,) = read_runs(wandb_file)
    (table,) = run.tables
    assert (table.name, table.rows, table.steps, table.groups, table.into) == ("completions", 24, 4, 8, "rollouts")
    rollouts = run.steps[10]["rollouts"]
    assert len(rollouts) == 6 and {r["group"] for r in rollouts} == {0, 1}
    first = rollouts[0]
    assert first["prompt"] == "What is 0 + 0?" and first["completion"] == "answer 0 at 5"
    # the reward columns are those TRL logs as rewards/<name>/mean; the total is weighted by reward_weights
    assert first["rewards"] == {"accuracy": 1.0, "format": 1.0} and first["reward"] == pytest.approx(1.5)
    assert first["advantage"] == pytest.approx(0.6)
    assert len({r["example_id"] for r in rollouts}) == 2


def test_a_truncated_run_file_is_named_with_its_record_and_nothing_is_read(wandb_file, tmp_path):
    cut = tmp_path / wandb_file.name
    data = wandb_file.read_bytes()
    cut.write_bytes(data[: len(data) - 100])
    with pytest.raises(BadSource) as raised:
        read_runs(cut)
    assert str(cut) in str(raised.value) and "record" in raised.value.where and "truncated" in raised.value.problem


def test_a_corrupt_record_is_named_and_skip_bad_keeps_the_records_before_it(wandb_file, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(wandb_file.parent, folder)
    bad = folder / wandb_file.name
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(BadSource) as raised:
        read_runs(bad)
    assert "checksum" in raised.value.problem or "not a W&B record" in raised.value.problem
    (run,) = read_runs(bad, skip_bad=True)
    assert 0 < len(run.steps) < 20 and any(str(bad) in skip.what for skip in run.skipped)


def test_a_file_that_is_not_a_wandb_run_is_refused(tmp_path):
    other = tmp_path / "run-x.wandb"
    other.write_bytes(b"hello world, not W&B")
    with pytest.raises(BadSource, match="not a W&B run file"):
        read_runs(other)


def test_a_run_file_without_its_folder_imports_its_scalars_and_says_where_the_tables_went(wandb_file, tmp_path):
    alone = tmp_path / wandb_file.name
    alone.write_bytes(wandb_file.read_bytes())
    (run,) = read_runs(alone)
    assert len(run.steps) == 20 and not any(step["rollouts"] for step in run.steps.values())
    assert sum("table 'completions'" in skip.what for skip in run.skipped) == 4
    assert "import the whole offline-run folder" in run.skipped[0].reason


def test_a_fractional_step_axis_leaves_its_metrics_at_wandbs_own_step(tmp_path):
    from tests.trainer.importers.writers import run_wandb

    run_wandb(tmp_path, """
run.define_metric("epoch")
run.define_metric("val/*", step_metric="epoch")
for i in range(4):
    run.log({"val/acc": i / 4, "epoch": i / 2})
""")
    (run,) = read_runs(tmp_path / "wandb")
    assert sorted(s for s, step in run.steps.items() if "val/acc" in step["metrics"]) == [0, 1, 2, 3]
    assert any(skip.what == "step axis epoch" for skip in run.skipped)


def test_without_the_import_extra_the_error_says_what_to_install(wandb_file, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb.proto", None)  # as if wandb were not installed
    with pytest.raises(ValueError, match=r"needs the import extra: pip install 'cohort\[import\]'"):
        read_runs(wandb_file)
