"""The run folder's format: what a run writes is what `cohort sync` (and the sender) read back."""

from __future__ import annotations

import json

import pytest

import cohort
from cohort.sdk.spool import Spool, run_folders
from cohort.sdk.upload import Backoff, batches, body, step_of


def test_a_run_folder_round_trips(tmp_path):
    run = cohort.init("http://cohort.example/", task="toy-task", config={"lr": 0.1}, mode="offline", dir=tmp_path)
    rollouts = [{"prompt": [{"role": "user", "content": "Répète: «mot»"}], "completion": "mot.",
                 "rewards": {"format": 1.0, "content": None}, "reward": 1.0, "advantage": -0.5, "group": "p0",
                 "example_id": "e0", "module": "answer"}]
    run.log({"loss": 0.5, "reward/mean": 1.0}, step=3)
    run.log_rollouts(3, rollouts)
    run.log({"loss": 0.25}, step=4)
    run.finish("failed", error="stopped by hand")
    assert sorted(p.name for p in run.folder.iterdir()) == ["run.json", "steps.jsonl"]
    spool = Spool.open(run.folder)
    assert [json.loads(line) for line in spool.lines()] == [
        {"step": 3, "metrics": {"loss": 0.5, "reward/mean": 1.0}, "rollouts": rollouts},
        {"step": 4, "metrics": {"loss": 0.25}, "rollouts": []}]
    assert spool.lines(1) == spool.lines()[1:]
    assert spool.state == {"format": 1, "client_id": run.folder.name, "url": "http://cohort.example/",
                           "create": {"client_id": run.folder.name, "task": "toy-task", "name": "",
                                      "config": {"lr": 0.1}, "tags": [], "notes": "", "origin": "sdk",
                                      "total_steps": 0},
                           "run_id": None, "run_url": None, "acked": 0,
                           "finish": {"state": "failed", "error": "stopped by hand"}, "finished": False}
    # The steps post is the lines as they are, and reads as the API's body.
    items = list(enumerate(spool.lines()))
    assert json.loads(body(items)) == {"steps": [json.loads(line) for line in spool.lines()]}
    assert [step_of(line) for _, line in items] == ["3", "4"]


def test_a_line_cut_short_by_a_crash_is_left_out(tmp_path):
    spool = Spool.create(tmp_path / "r", url=None, create={"client_id": "r"})
    spool.append('{"step":0,"metrics":{},"rollouts":[]}')
    spool.close()
    with open(tmp_path / "r" / "steps.jsonl", "a") as out:
        out.write('{"step":1,"metr')
    assert Spool.open(tmp_path / "r").lines() == ['{"step":0,"metrics":{},"rollouts":[]}']
    with pytest.raises(FileExistsError):
        Spool.create(tmp_path / "r", url=None, create={"client_id": "r"})


def test_a_folder_that_is_no_run_is_refused_and_a_folder_of_runs_stands_for_its_runs(tmp_path):
    with pytest.raises(ValueError, match="is not a Cohort run folder"):
        Spool.open(tmp_path)
    (tmp_path / "run.json").write_text('{"something": "else"}')
    with pytest.raises(ValueError, match="not a run record"):
        Spool.open(tmp_path)
    runs = tmp_path / "cohort-runs"
    for name in ("b", "a"):
        Spool.create(runs / name, url=None, create={"client_id": name})
    (runs / "notes").mkdir()
    assert run_folders([runs]) == [runs / "a", runs / "b"]
    assert run_folders([runs / "b", tmp_path / "missing"]) == [runs / "b", tmp_path / "missing"]


def test_batches_hold_at_most_50_steps_and_about_4_mb():
    small = [(i, f'{{"step":{i}}}') for i in range(120)]
    assert [len(b) for b in batches(small)] == [50, 50, 20]
    big = [(i, "x" * 1_500_000) for i in range(5)]
    assert [[i for i, _ in b] for b in batches(big)] == [[0, 1], [2, 3], [4]]
    assert [[i for i, _ in b] for b in batches([(0, "x" * 5_000_000), (1, "y")])] == [[0], [1]]


def test_backoff_doubles_up_to_its_cap():
    backoff = Backoff()
    assert [backoff.next() for _ in range(8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next() == 0.2
