"""Metric renames from a TOML mapping file."""

from __future__ import annotations

import pytest

from trainer.importers import ImportedRun, MetricMapping


def run_with(metrics):
    run = ImportedRun(origin="verl", source=".", key="k")
    run.step(1)["metrics"].update(metrics)
    return run


def test_a_mapping_renames_onto_cohorts_names(tmp_path):
    path = tmp_path / "map.toml"
    path.write_text('[metrics]\n"critic/score/mean" = "reward/mean"\n')
    run = run_with({"critic/score/mean": 0.5, "actor/entropy": 1.0})
    MetricMapping.load(path).apply(run)
    assert run.steps[1]["metrics"] == {"reward/mean": 0.5, "actor/entropy": 1.0}


def test_keep_original_keeps_both_names(tmp_path):
    path = tmp_path / "map.toml"
    path.write_text('[metrics]\n"a" = "reward/mean"\n[options]\nkeep_original = true\n')
    run = run_with({"a": 0.5})
    MetricMapping.load(path).apply(run)
    assert run.steps[1]["metrics"] == {"a": 0.5, "reward/mean": 0.5}


@pytest.mark.parametrize("text, words", [
    ("[metrics\n", "not a readable TOML"), ("[renames]\n", "unknown table"), ('[metrics]\n"a" = 3\n', "non-empty name"),
])
def test_a_bad_mapping_file_is_refused_with_its_reason(tmp_path, text, words):
    path = tmp_path / "map.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=words):
        MetricMapping.load(path)


def test_renaming_onto_a_name_the_source_logs_is_refused(tmp_path):
    path = tmp_path / "map.toml"
    path.write_text('[metrics]\n"a" = "b"\n')
    with pytest.raises(ValueError, match="'b', which the source logs too"):
        MetricMapping.load(path).apply(run_with({"a": 1.0, "b": 2.0}))
