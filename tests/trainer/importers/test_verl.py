"""verl's file log and rollout dumps (in verl 0.9.1's format: tests/trainer/importers/writers.py)."""

from __future__ import annotations

import pytest

from tests.trainer.importers.writers import verl_dump, verl_log_line, write_verl_run
from trainer.importers import BadSource, ImportedRun, Problems, read_runs, verl_source


def test_the_file_log_is_metrics_and_the_dumps_are_groups_by_input(tmp_path):
    root = write_verl_run(tmp_path / "verl", steps=5)
    (run,) = read_runs(root)
    assert run.origin == "verl" and run.name == "grpo-gsm8k" and sorted(run.steps) == [1, 2, 3, 4, 5]
    assert run.steps[3]["metrics"] == {"critic/score/mean": pytest.approx(0.3), "actor/entropy": 0.5,
                                       "response_length/mean": 103.0}
    rollouts = run.steps[3]["rollouts"]
    assert len(rollouts) == 6 and [r["group"] for r in rollouts] == [0, 0, 0, 1, 1, 1]
    assert rollouts[0]["prompt"] == "Q0: 2+0=?" and rollouts[0]["completion"] == "answer 0 at 3"
    # score is the reward; each numeric reward-extra key a component
    assert rollouts[0]["reward"] == 1.0 and rollouts[0]["rewards"] == {"acc": 1.0, "format_ok": 1.0}
    assert any(skip.what == "dump:gts" for skip in run.skipped)


def test_a_log_line_that_is_not_json_is_named_by_its_line(tmp_path):
    root = write_verl_run(tmp_path / "verl", steps=3)
    with (root / "grpo-gsm8k.jsonl").open("ab") as log:
        log.write(b'{"step": 4, "data": {"x": 1\n')
    with pytest.raises(BadSource) as raised:
        read_runs(root)
    assert raised.value.file.endswith("grpo-gsm8k.jsonl") and raised.value.where == "line 4"
    (run,) = read_runs(root, skip_bad=True)
    assert sorted(run.steps) == [1, 2, 3]


def test_a_dump_line_without_input_is_named(tmp_path):
    root = write_verl_run(tmp_path / "verl", steps=2)
    (root / "rollouts" / "2.jsonl").write_text(verl_dump(2) + '{"output": "x", "score": 1.0}\n')
    with pytest.raises(BadSource) as raised:
        read_runs(root)
    assert raised.value.file.endswith("2.jsonl") and raised.value.where == "line 7" and "'input'" in raised.value.problem


def test_following_takes_complete_lines_and_whole_dumps_only(tmp_path):
    root = tmp_path / "verl"
    (root / "rollouts").mkdir(parents=True)
    log = root / "grpo-gsm8k.jsonl"
    log.write_bytes(verl_log_line(1))
    (root / "rollouts" / "1.jsonl").write_text(verl_dump(1))
    source, run = verl_source(root), ImportedRun(origin="verl", source=root, key="k")
    assert source.read(run, Problems(False), whole=False) == {1}  # the log line; the dump is new: looked at again
    assert run.steps[1]["rollouts"] == []
    assert source.read(run, Problems(False), whole=False) == {1} and len(run.steps[1]["rollouts"]) == 6
    line = verl_log_line(2)
    log.write_bytes(verl_log_line(1) + line[:10])  # a line still being written
    assert source.read(run, Problems(False), whole=False) == set() and 2 not in run.steps
    log.write_bytes(verl_log_line(1) + line)
    assert source.read(run, Problems(False), whole=False) == {2}


def test_a_log_written_anew_by_a_resumed_trainer_is_read_from_its_start(tmp_path):
    root = tmp_path / "verl"
    root.mkdir()
    log = root / "grpo-gsm8k.jsonl"
    log.write_bytes(b"".join(verl_log_line(s) for s in (1, 2, 3)))
    source, run = verl_source(root), ImportedRun(origin="verl", source=root, key="k")
    assert source.read(run, Problems(False), whole=False) == {1, 2, 3}
    # verl resumed from step 2 opens its log with "wb": the file starts again, and soon is longer than before
    log.write_bytes(b"".join(verl_log_line(s) for s in (3, 4, 5, 6)))
    assert source.read(run, Problems(False), whole=False) == {3, 4, 5, 6}
