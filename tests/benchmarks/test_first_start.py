"""benchmarks/first_start.py's pure parts: its arguments, how make's commands and the stack's lines become
phases, and the report (the clone and `make run` themselves are what the benchmark is run for)."""

import pytest

from benchmarks.first_start import (
    CACHE_VARIABLES,
    Result,
    breakdown,
    compare,
    fresh_environment,
    parse_args,
    parse_phases_log,
    phase_of,
    report,
)


def test_arguments_default_to_the_working_tree_and_refuse_what_cannot_be_compared(capsys):
    args = parse_args([])
    assert args.ref == "worktree" and args.baseline is None and args.timeout == 900.0
    assert parse_args(["--baseline", "HEAD"]).baseline == "HEAD"
    for bad in (["--baseline", "HEAD", "--ref", "HEAD"], ["--timeout", "0"], ["--manual-timeout", "-5"]):
        with pytest.raises(SystemExit) as exited:
            parse_args(bad)
        assert exited.value.code == 2
    assert "nothing to compare" in capsys.readouterr().err


def test_each_command_of_make_run_has_its_phase():
    assert phase_of("test -x .venv/bin/python || python3 -m venv .venv") == "venv"
    assert phase_of(".venv/bin/python -m pip install --quiet uv==0.13.9") == "uv"
    assert phase_of(".venv/bin/uv pip install --quiet --python .venv/bin/python torch==2.13.0") == "torch"
    assert phase_of("if uv; then .venv/bin/uv pip install pip; else .venv/bin/python -m ensurepip; fi") == "pip (into the venv)"
    assert phase_of(".venv/bin/uv pip install --quiet -e '.[train,dspy]'") == "install (the rest)"
    assert phase_of(".venv/bin/python -m compileall -q -q -j 0 $(... purelib ...)") == "bytecode (packages)"
    assert phase_of(".venv/bin/python -m compileall -q -q -j 0 trainer webapp") == "bytecode (project)"
    assert phase_of("NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict") == "manual"
    assert phase_of(".venv/bin/python -m webapp.stack up --build-manual 'make docs'") == "stack"
    assert phase_of("touch .venv/.cohort-installed-run") == "other"


def test_the_phases_add_up_to_the_ready_time_the_stack_split_at_its_lines():
    started = 1000.0
    log = "\n".join([
        "1003.0 1000.5 0 python3 -m venv .venv",
        "1010.0 1003.0 0 uv pip install torch==2.13.0",
        "1011.0 1010.0 0 python -m compileall -q trainer webapp",
        "1060.0 1011.0 0 python -m webapp.stack up",  # ran past readiness
        "1040.0 1031.0 0 python -m mkdocs build --strict",  # beside the ready stack
    ])
    commands = parse_phases_log(log, started)
    assert commands[0] == (0.5, 2.5, "python3 -m venv .venv")
    result = Result("after", (0.5, 0.4, 0.3), ready_s=30.0, manual_s=40.0, commands=commands, lines=[
        (12.0, "Embedded Redis at redis://127.0.0.1:1/0"),
        (20.0, "Created admin account. Log in as 'admin' with password 'x'"),
        (21.0, "Synced 5 programs (0 no longer registered); 3 built-in task(s) ready."),
        (30.0, "Cohort is running at http://127.0.0.1:8000/"),
    ])
    phases = dict(breakdown(result))
    assert phases["venv"] == 2.5 and phases["torch"] == 7.0 and phases["bytecode (project)"] == 1.0
    assert phases["stack: Python and Redis"] == 1.0
    assert phases["stack: Django, migrations"] == 8.0
    assert phases["stack: admin account, programs"] == 1.0
    assert phases["stack: worker and web server until healthy"] == 9.0
    assert "manual" not in phases  # after readiness: not part of the wait
    assert sum(phases.values()) == pytest.approx(30.0)
    text = report(result)
    assert "after: ready after 30.0 s; the manual served at 40.0 s (load before: 0.50 0.40 0.30)" in text
    assert "after readiness, beside the running stack" in text and "manual: python -m mkdocs" in text
    before = Result("HEAD", (0, 0, 0), ready_s=82.4)
    assert compare(before, result) == "ready: HEAD 82.4 s -> after 30.0 s (-52.4 s)"
    assert "never said it was running" in report(Result("broken", (0, 0, 0), lines=[(1.0, "make: *** Error 2")]))
    failed = Result("failed", (0, 0, 0), ready_s=30.0, manual_s=35.0, manual_failed=True)
    assert "the manual could not be built (said at 35.0 s)" in report(failed)


def test_every_package_cache_starts_empty(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://elsewhere")
    env = fresh_environment(tmp_path, tmp_path / "phases.log")
    assert set(CACHE_VARIABLES) >= {"UV_CACHE_DIR", "PIP_CACHE_DIR"}
    for name in CACHE_VARIABLES:
        assert env[name].startswith(str(tmp_path)) and not any((tmp_path / name.lower()).iterdir())
    assert "DATABASE_URL" not in env and env["COHORT_VAR_DIR"].startswith(str(tmp_path))


def test_only_lays_the_named_paths_over_head():
    from benchmarks.first_start import under

    assert under("webapp/stack.py", ["webapp"]) and under("Makefile", ["Makefile", "webapp/"])
    assert not under("webapp2/x.py", ["webapp"]) and not under("README.md", ["Makefile"])
    assert under("anything", None)
    with pytest.raises(SystemExit):
        parse_args(["--ref", "HEAD", "--only", "Makefile"])
