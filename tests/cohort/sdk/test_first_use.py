"""What a new user meets first: `cohort.init` prints where to watch the run (one line, quiet on
request), its run folder lives outside the working folder (`runs_home()`), and `cohort sync` without a
folder finds what is left to upload there. The README's snippet, run as a reader would, leaves nothing
in the folder it ran in."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cohort
from cohort.sdk.spool import Spool, runs_home
from cohort.sdk.sync import sync_main
from tests.cohort.sdk.conftest import RUN_ID, TOKEN
from tests.conftest import ROOT
from tests.docs.blocks import page_blocks
from webapp.stack import free_local_port


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A user's home with no COHORT_DIR and no XDG_CACHE_HOME: the defaults apply."""
    monkeypatch.delenv("COHORT_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("COHORT_QUIET", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_the_run_folders_go_to_cohort_dir_else_the_user_cache(home, tmp_path, monkeypatch):
    assert runs_home() == home / ".cache" / "cohort" / "runs"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert runs_home() == tmp_path / "xdg" / "cohort" / "runs"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec: a relative path is ignored
    assert runs_home() == home / ".cache" / "cohort" / "runs"
    monkeypatch.setenv("COHORT_DIR", str(tmp_path / "mine"))
    assert runs_home() == tmp_path / "mine"


def test_init_without_dir_writes_nothing_in_the_working_folder(home, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    run = cohort.init(task="toy-task", mode="offline")
    run.log({"loss": 1.0}, step=1)
    run.finish()
    assert list(work.iterdir()) == []
    assert run.folder.parent == home / ".cache" / "cohort" / "runs"
    assert len(Spool.open(run.folder).lines()) == 1


def test_init_prints_the_run_page_once_before_it_returns(stub, home, tmp_path, capsys):
    run = cohort.init(stub.url, TOKEN, task="toy-task", dir=tmp_path)
    assert capsys.readouterr().err == f"cohort: streaming to {stub.url}runs/{RUN_ID}/\n"
    run.log({"loss": 1.0}, step=1)
    run.finish()
    assert capsys.readouterr().err == ""  # nothing more when all went well


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_quiet_prints_nothing(stub, home, tmp_path, capsys, monkeypatch, how):
    if how == "environment":
        monkeypatch.setenv("COHORT_QUIET", "1")
    run = cohort.init(stub.url, TOKEN, task="toy-task", dir=tmp_path, **({"quiet": True} if how == "argument" else {}))
    run.log({"loss": 1.0}, step=1)
    run.finish()
    assert run.wait(0) and capsys.readouterr().err == ""


def test_an_unreachable_server_does_not_hold_init_for_long(home, tmp_path, capsys, recwarn):
    started = time.monotonic()
    run = cohort.init(f"http://127.0.0.1:{free_local_port()}", "any", task="toy-task", dir=tmp_path)
    assert time.monotonic() - started < 3  # a refused connection answers at once
    assert "streaming to" not in capsys.readouterr().err
    run.finish(timeout=0)


def test_sync_without_a_folder_uploads_what_is_left_in_the_runs_home(stub, home, capsys):
    assert sync_main([], url=stub.url, token=TOKEN) == 0
    assert capsys.readouterr().out.startswith(f"Nothing to upload: no run folder in {runs_home()} ")
    runs = []
    for steps in (2, 3):
        run = cohort.init(stub.url, task="toy-task", mode="offline")
        for step in range(steps):
            run.log({"loss": float(step)}, step=step)
        run.finish()
        runs.append(run)
    (runs_home() / "not-a-run").mkdir()  # left alone: only run folders are looked at
    assert sync_main([], url=None, token=TOKEN) == 0
    out = capsys.readouterr().out.splitlines()
    assert sorted(line.split(":", 1)[0] for line in out) == sorted(str(run.folder) for run in runs)
    assert all("finished as succeeded" in line for line in out) and len(stub.posts) == 2
    assert sync_main([], url=None, token=TOKEN) == 0  # all uploaded: nothing is sent again
    assert capsys.readouterr().out.startswith("Nothing to upload") and len(stub.posts) == 2


def test_the_readme_snippet_leaves_nothing_in_its_folder(stub, tmp_path):
    """The README's SDK snippet, as a reader runs it (COHORT_URL and COHORT_TOKEN set, no dir=)."""
    [snippet] = [b for b in page_blocks(ROOT / "README.md") if b.lang == "python" and "cohort.init" in b.text]
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "snippet.py").write_text(snippet.text)
    env = {k: v for k, v in os.environ.items() if k not in ("COHORT_DIR", "XDG_CACHE_HOME", "COHORT_QUIET")}
    env.update(COHORT_URL=stub.url, COHORT_TOKEN=TOKEN, HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, str(tmp_path / "snippet.py")], cwd=work, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert list(work.iterdir()) == []
    assert done.stderr == f"cohort: streaming to {stub.url}runs/{RUN_ID}/\n"
    assert sorted(stub.steps) == [1, 2, 3] and stub.finishes == [{"state": "succeeded", "error": ""}]
    assert len(list((tmp_path / "home" / ".cache" / "cohort" / "runs").glob("*/run.json"))) == 1
