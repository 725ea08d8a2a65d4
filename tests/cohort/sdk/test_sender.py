"""The background upload against a stand-in server (conftest.py): batches, the finish, a 413 split,
a refused step set aside, an outage ridden out, a refused token, and a training loop that never
waits for any of it."""

from __future__ import annotations

import json
import time

import pytest

import cohort
from cohort.http import CohortAPIError, retry_after_s
from cohort.sdk import CohortWarning
from cohort.sdk.spool import Spool
from cohort.sdk.sync import sync_main
from tests.cohort.sdk.conftest import RUN_ID, TOKEN
from tests.conftest import wait_for
from webapp.stack import free_local_port


def online(stub, tmp_path, **kwargs):
    return cohort.init(stub.url, TOKEN, task="toy-task", dir=tmp_path, **kwargs)


def test_steps_go_in_batches_then_the_finish(stub, tmp_path):
    run = online(stub, tmp_path, origin="my-trainer")
    for step in range(120):
        run.log({"loss": 1 / (step + 1)}, step=step)
        if step % 40 == 0:
            run.log_rollouts(step, [{"prompt": "p", "completion": f"c{i}", "reward": i % 2, "group": i // 4}
                                    for i in range(8)])
    run.finish()
    assert run.wait(0)  # finish returned because everything was acknowledged
    assert run.id == RUN_ID and run.url == f"{stub.url}runs/{RUN_ID}/"
    assert stub.created == [Spool.open(run.folder).state["create"]] and stub.created[0]["origin"] == "my-trainer"
    assert sorted(stub.steps) == list(range(120)) and len(stub.steps[40]["rollouts"]) == 8
    assert all(status == 200 and len(numbers) <= 50 for status, numbers, _ in stub.posts)
    assert [n for _, numbers, _ in stub.posts for n in numbers] == list(range(120))  # each step sent once, in order
    assert stub.finishes == [{"state": "succeeded", "error": ""}]
    record = Spool.open(run.folder).state
    assert record["run_id"] == RUN_ID and record["acked"] == 120 and record["finished"]


def test_a_413_splits_the_batch_and_a_step_still_too_large_is_set_aside(stub, tmp_path):
    stub.max_body = 3_000  # about three steps of ~900 bytes
    # The sender meets the refusal as soon as step 6 is sealed (step 7 logged), before finish() or
    # after: the warning is awaited from the run's start.
    with pytest.warns(CohortWarning, match="refused step 6 \\(413: Request body too large.\\)"):
        run = online(stub, tmp_path)
        for step in range(10):
            size = 5_000 if step == 6 else 800
            run.log_rollouts(step, [{"prompt": "p", "completion": "x" * size, "reward": 1.0}])
        run.finish()
    assert sorted(stub.steps) == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    assert any(status == 413 for status, _, _ in stub.posts)
    assert all(size <= stub.max_body for status, _, size in stub.posts if status == 200)
    (rejected,) = [json.loads(line) for line in (run.folder / "rejected.jsonl").read_text().splitlines()]
    assert rejected["status"] == 413 and rejected["step"]["step"] == 6
    assert rejected["step"]["rollouts"][0]["completion"] == "x" * 5_000
    assert stub.finishes and Spool.open(run.folder).state["acked"] == 10


def test_one_refused_step_never_holds_back_the_others(stub, tmp_path):
    stub.refuse = {3}
    with pytest.warns(CohortWarning, match="refused step 3 \\(400: step 3: a reward is not a number\\)"):
        run = online(stub, tmp_path)
        for step in range(6):
            run.log({"loss": float(step)}, step=step)
        run.finish()
    assert sorted(stub.steps) == [0, 1, 2, 4, 5] and stub.finishes == [{"state": "succeeded", "error": ""}]
    (rejected,) = [json.loads(line) for line in (run.folder / "rejected.jsonl").read_text().splitlines()]
    assert rejected == {"status": 400, "message": "step 3: a reward is not a number", "errors": {"steps": ["bad"]},
                        "step": {"step": 3, "metrics": {"loss": 3.0}, "rollouts": []}}


def test_a_post_stored_without_refused_token_arrays_is_answered_with_one_warning(stub, tmp_path, recwarn):
    """The server's 400 for bad per-token arrays says it stored the steps all the same: the batch is
    answered (not split, not retried, nothing set aside) and one warning gives the server's words."""
    stub.partly = {2, 4}
    run = online(stub, tmp_path)
    for step in range(6):
        run.log({"loss": float(step)}, step=step)
    run.finish()
    assert run.wait(0) and sorted(stub.steps) == [0, 1, 2, 3, 4, 5] and stub.finishes
    assert [n for _, numbers, _ in stub.posts for n in numbers] == list(range(6))  # each step posted once
    assert any(status == 400 for status, _, _ in stub.posts)
    assert not (run.folder / "rejected.jsonl").exists() and Spool.open(run.folder).state["acked"] == 6
    warned = [str(w.message) for w in recwarn if w.category is CohortWarning]
    assert len(warned) == 1 and "Cohort stored the steps but left out per-token arrays it refused (400: 1 " \
                                "per-token array refused: steps[" in warned[0], warned


def test_sync_counts_posts_stored_without_refused_token_arrays_and_exits_zero(stub, tmp_path, capsys):
    run = cohort.init(stub.url, task="toy-task", mode="offline", dir=tmp_path)
    for step in range(3):
        run.log({"loss": float(step)}, step=step)
    run.finish()
    stub.partly = {1}
    assert sync_main([str(run.folder)], url=None, token=TOKEN) == 0
    assert sorted(stub.steps) == [0, 1, 2] and len(stub.posts) == 1
    out, err = capsys.readouterr()
    assert "3 steps uploaded, 0 already there, 1 posts stored without per-token arrays the server refused" in out
    assert "steps[1].rollouts[0].entropies: 3 values for 2 tokens" in err


def test_an_outage_is_ridden_out_and_finish_retries_at_once(stub, tmp_path):
    stub.down = True
    with pytest.warns(CohortWarning, match="cannot upload to Cohort \\(503: down for maintenance\\)"):
        run = online(stub, tmp_path)  # the sender meets the outage at once: creating the run
        for step in range(5):
            run.log({"loss": float(step)}, step=step)
        run.flush()
        wait_for(lambda: stub.down_answers >= 2, 30, "the sender to retry")  # it warned after the first
    assert not run.wait(0)
    assert run.id is None and stub.steps == {}
    with pytest.warns(CohortWarning, match="reached .* again; uploading"):
        stub.down = False  # the sender's next retry (within 5 s) may come before finish() wakes it
        run.finish(timeout=30)
    assert run.wait(0) and sorted(stub.steps) == [0, 1, 2, 3, 4] and stub.finishes


def test_an_overloaded_servers_retry_after_is_waited_before_asking_again(stub, tmp_path):
    stub.down, stub.retry_after = True, "1"  # the SDK's own first waits are 0.2 s, 0.4 s, ...
    with pytest.warns(CohortWarning, match="cannot upload to Cohort \\(503"):
        run = online(stub, tmp_path)
        wait_for(lambda: stub.down_answers >= 3, 30, "the sender to ask three times")
    stub.down = False
    gaps = [later - earlier for earlier, later in zip(stub.down_times, stub.down_times[1:], strict=False)]
    assert min(gaps[:2]) >= 0.95, gaps  # the server's second, not the 0.2 s and 0.4 s backoff
    with pytest.warns(CohortWarning, match="reached .* again"):
        run.finish(timeout=30)
    assert run.wait(0) and stub.finishes


@pytest.mark.parametrize("header, seconds", [
    ("3", 3.0), ("0", 0.0), (None, None), ("soon", None), ("-1", None),
    ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date gone by: ask now
])
def test_retry_after_is_read_as_seconds_or_a_date(header, seconds):
    assert retry_after_s(header) == seconds


def test_a_retry_after_is_waited_at_least_the_backoff_and_at_most_five_minutes():
    assert CohortAPIError(503, "busy", retry_after=2).wait_s(0.2) == 2
    assert CohortAPIError(503, "busy", retry_after=0).wait_s(0.4) == 0.4
    assert CohortAPIError(503, "busy", retry_after=86_400).wait_s(0.2) == 300
    assert CohortAPIError(503, "busy").wait_s(0.8) == 0.8


def test_log_never_waits_for_an_unreachable_server(tmp_path, capsys, recwarn):
    run = cohort.init(f"http://127.0.0.1:{free_local_port()}", "any", task="toy-task", dir=tmp_path)
    durations = []
    for step in range(1000):
        started = time.perf_counter()
        run.log({"loss": 1.0 / (step + 1), "reward/mean": step / 1000}, step=step)
        durations.append(time.perf_counter() - started)
    run.finish(timeout=0.2)
    durations.sort()
    # Each call is a dict update, and for the step it seals one JSON line appended to the file:
    # tens of microseconds. The bounds leave room for a busy CI machine.
    assert durations[500] < 0.0005 and sum(durations) < 1.0, (durations[500], sum(durations))
    assert len(Spool.open(run.folder).lines()) == 1000
    err = capsys.readouterr().err
    assert "1000 of 1000 steps are not uploaded yet" in err and f"cohort sync {run.folder}" in err


def test_a_refused_token_stops_the_upload_with_one_warning(stub, tmp_path, capsys):
    # The sender meets the 401 creating the run, right after init: the warning is awaited from there.
    with pytest.warns(CohortWarning, match="Cohort refused the upload \\(401: token rejected") as caught:
        run = cohort.init(stub.url, "revoked", task="toy-task", dir=tmp_path)
        run.log({"loss": 1.0}, step=0)
        started = time.monotonic()
        run.finish(timeout=30)
    assert time.monotonic() - started < 10  # it stopped: no waiting for a timeout
    assert len([w for w in caught if issubclass(w.category, CohortWarning)]) == 1
    assert not run.wait(0) and stub.steps == {}
    assert f"cohort sync {run.folder}" in capsys.readouterr().err
    # The steps are all there: `cohort sync` with a good token uploads them.
    assert sync_main([str(run.folder)], url=None, token=TOKEN) == 0
    assert sorted(stub.steps) == [0] and stub.finishes == [{"state": "succeeded", "error": ""}]


def test_sync_uploads_an_offline_run_once_and_exits_nonzero_when_a_step_is_refused(stub, tmp_path, capsys):
    runs = []
    for _ in range(2):
        run = cohort.init(stub.url, task="toy-task", mode="offline", dir=tmp_path)
        for step in range(3):
            run.log({"loss": float(step)}, step=step)
        run.finish()
        runs.append(run)
    assert sync_main([str(runs[0].folder)], url=None, token=TOKEN) == 0
    assert sorted(stub.steps) == [0, 1, 2] and len(stub.posts) == 1
    out = capsys.readouterr().out
    assert out == (f"{runs[0].folder}: 3 steps: 3 steps uploaded, 0 already there; finished as succeeded: "
                   f"{stub.url}runs/{RUN_ID}/\n")
    assert sync_main([str(tmp_path)], url=None, token=TOKEN) == 0  # a folder of runs; the first is up to date
    assert len(stub.posts) == 2  # only the second run's steps were sent
    assert "3 steps: 0 steps uploaded, 0 already there" in capsys.readouterr().out
    stub.refuse = {1}
    Spool.open(runs[1].folder).update(acked=0, finished=False)  # as if it had never been uploaded
    assert sync_main([str(runs[1].folder)], url=None, token=TOKEN) == 1
    assert "1 refused" in capsys.readouterr().out
    assert sync_main([str(tmp_path / "nothing-here")], url=None, token=TOKEN) == 1
