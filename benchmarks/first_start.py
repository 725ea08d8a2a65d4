"""How long a fresh clone's `make run` takes to serve, and where the time goes.

Copies the repository into a temporary folder (a commit with `--ref`, or by default the working tree as it
is: HEAD's clone with the uncommitted and untracked files laid over it), runs `make run` there with the
embedded defaults on a free port and with empty package caches (uv's, pip's and XDG's point at new empty
folders, so every package is downloaded, as on a machine that never installed one), timestamps every
command make runs (through a SHELL wrapper) and every line the stack prints, and stops the stack with
Ctrl-C once it said "Cohort is running at" and, where the manual is built after that, once it is served:

    .venv/bin/python benchmarks/first_start.py                     # the working tree
    .venv/bin/python benchmarks/first_start.py --baseline HEAD     # HEAD, then the working tree
    .venv/bin/python benchmarks/first_start.py --baseline HEAD --only Makefile webapp   # only these changes

It prints the total and each phase: the venv, uv, torch, the rest of the install, bytecode, the
manual, the project's bytecode, and the stack's own steps (Redis, migrate, the admin account, the
programs, the services). Run it on a quiet machine (installs are CPU- and network-bound); it prints the
load average before each run. Only the registries the machine's uv and pip are configured for are used;
nothing is installed outside the temporary folder.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import READY, free_port, interrupt_group  # noqa: E402

WORKTREE = "worktree"  # --ref's default: the working tree as it is, uncommitted changes included
# What the stack prints once the manual it builds after readiness is served, or could not be built.
MANUAL_DONE = ("The manual is built", "The manual could not be built")
# The caches a fresh machine has empty: each is pointed at a new folder of its own.
CACHE_VARIABLES = ("UV_CACHE_DIR", "PIP_CACHE_DIR", "XDG_CACHE_HOME")

WRAPPER = """#!/bin/bash
# make's SHELL: runs the recipe line, then logs its wall time
start=$(date +%s.%N)
/bin/bash "$@"
rc=$?
echo "$(date +%s.%N) $start $rc $(printf '%s' "${@: -1}" | tr '\\n' ' ')" >> "$PHASES_LOG"  # one line a command
exit $rc
"""

# A command of make's (its text) -> the phase it belongs to; the first pattern that matches wins.
COMMAND_PHASES = [
    (r"-m venv", "venv"),
    (r"uv==", "uv"),
    (r"torch==", "torch"),
    (r"ensurepip", "pip (into the venv)"),
    (r"pip install|uv pip install", "install (the rest)"),
    (r"compileall .*purelib", "bytecode (packages)"),
    (r"compileall", "bytecode (project)"),
    (r"mkdocs", "manual"),
    (r"webapp\.stack up", "stack"),
]
# A line the stack prints -> the step that ends there (the time since the previous step's line). A line
# of an older stack that printed no steps still ends at READY.
STACK_STEPS = [
    ("Embedded Redis at", "stack: Python and Redis"),
    ("Using REDIS_URL", "stack: Python"),
    ("Created admin account", "stack: Django, migrations"),
    ("Reusing admin account", "stack: Django, migrations"),
    ("Synced ", "stack: admin account, programs"),
    (READY, "stack: worker and web server until healthy"),
]


@dataclass
class Result:
    label: str
    load: tuple[float, float, float]
    ready_s: float | None = None
    manual_s: float | None = None  # when the stack said how the manual's build after readiness went
    manual_failed: bool = False
    commands: list[tuple[float, float, str]] = field(default_factory=list)  # (start, took, command)
    lines: list[tuple[float, str]] = field(default_factory=list)  # (at, line) of make's output


def phase_of(command: str) -> str:
    for pattern, phase in COMMAND_PHASES:
        if re.search(pattern, command):
            return phase
    return "other"


def parse_phases_log(text: str, started: float) -> list[tuple[float, float, str]]:
    """The wrapper's rows ("end start rc command") as (start since `started`, seconds, command)."""
    commands = []
    for row in text.splitlines():
        end, start, _rc, command = row.split(" ", 3)
        commands.append((float(start) - started, float(end) - float(start), re.sub(r"\s+", " ", command).strip()))
    return commands


def breakdown(result: Result) -> list[tuple[str, float]]:
    """(phase, seconds) until ready, in order of first appearance: make's commands by `COMMAND_PHASES`,
    the stack's command split at its step lines. A command that ran on past readiness (the stack)
    counts until then."""
    totals: dict[str, float] = {}
    stack_start = None
    end = result.ready_s if result.ready_s is not None else float("inf")
    for start, took, command in result.commands:
        phase = phase_of(command)
        if phase == "stack":
            stack_start = start
            continue
        if start < end:
            totals[phase] = totals.get(phase, 0.0) + min(took, end - start)
    if stack_start is not None and result.ready_s is not None:
        last = stack_start
        for at, line in result.lines:
            if at < stack_start or at > result.ready_s:
                continue
            step = next((name for prefix, name in STACK_STEPS if line.strip().startswith(prefix)), None)
            if step:
                totals[step] = totals.get(step, 0.0) + at - last
                last = at
    accounted = sum(totals.values())
    if result.ready_s is not None and result.ready_s - accounted > 0.05:
        totals["make itself, between commands"] = result.ready_s - accounted
    return list(totals.items())


def under(name: str, paths: list[str] | None) -> bool:
    return paths is None or any(name == p.rstrip("/") or name.startswith(p.rstrip("/") + "/") for p in paths)


def prepare_clone(ref: str, clone: Path, only: list[str] | None = None) -> None:
    """`clone` holds `ref`'s tree, or for WORKTREE, HEAD's with the working tree's changes laid over it (only
    those under `only`'s paths, where given: another change in progress beside them stays out)."""
    subprocess.run(["git", "clone", "--quiet", "--no-local", str(ROOT), str(clone)], check=True)
    if ref != WORKTREE:
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", ref], check=True)
        return
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    present = set()
    for name in (n for n in listed if n and under(n, only)):
        source = ROOT / name
        if source.is_file():
            present.add(name)
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    tracked = subprocess.run(["git", "-C", str(clone), "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode().split("\0")
    for name in (n for n in tracked if n and under(n, only)):
        if name not in present:  # deleted in the working tree
            (clone / name).unlink(missing_ok=True)


def fresh_environment(work: Path, phases_log: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "VIRTUAL_ENV")}
    for name in CACHE_VARIABLES:
        (work / name.lower()).mkdir()
        env[name] = str(work / name.lower())
    env.update(PHASES_LOG=str(phases_log), COHORT_PORT=str(free_port()), COHORT_VAR_DIR=str(work / "var"),
               COHORT_MODEL_CACHE=str(work / "models"), HF_HOME=str(work / "hf"))
    return env


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line.rstrip())
    lines.put(None)


def _next_line(lines: queue.Queue, deadline: float) -> str | None:
    """make's next line, or None once it ended or `deadline` passed."""
    try:
        return lines.get(timeout=max(0.0, deadline - time.time()))
    except queue.Empty:
        return None


def manual_built_by_make(phases_log: Path) -> bool:
    """Whether make ran MkDocs itself (before the stack started), as make run did before the manual was
    built beside the running stack."""
    return phases_log.exists() and any(phase_of(row.split(" ", 3)[-1]) == "manual"
                                       for row in phases_log.read_text().splitlines())


def measure(work: Path, ref: str, timeout_s: float, manual_timeout_s: float, only: list[str] | None = None) -> Result:
    """`make run` of `ref` in a clone under `work` until ready (and its manual built), then stopped."""
    clone = work / "cohort"
    prepare_clone(ref, clone, only)
    wrapper, phases_log = work / "shell", work / "phases.log"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    env = fresh_environment(work, phases_log)
    result = Result(ref, os.getloadavg())
    started = time.time()
    process = subprocess.Popen(["make", "run", f"SHELL={wrapper}"], cwd=clone, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
    try:
        deadline = started + timeout_s
        while (line := _next_line(lines, deadline)) is not None:
            at = time.time() - started
            result.lines.append((at, line))
            if READY in line:
                result.ready_s = at
                if manual_built_by_make(phases_log):
                    break  # the manual was built before readiness: nothing more to wait for
                deadline = time.time() + manual_timeout_s
            elif result.ready_s is not None and line.startswith(MANUAL_DONE):
                result.manual_s, result.manual_failed = at, line.startswith(MANUAL_DONE[1])
                break
    finally:
        interrupt_group(process)  # make run's stack stops what it started, as on Ctrl-C
    if phases_log.exists():
        result.commands = parse_phases_log(phases_log.read_text(), started)
    return result


def report(result: Result, *, verbose: bool = False) -> str:
    load = " ".join(f"{x:.2f}" for x in result.load)
    if result.ready_s is None:
        lines = [f"{result.label}: never said it was running (load {load})"]
        lines += [f"  {at:7.1f} s  {line[:110]}" for at, line in result.lines[-30:]]
        return "\n".join(lines)
    manual = ""
    if result.manual_s is not None:
        manual = (f"; the manual could not be built (said at {result.manual_s:.1f} s)" if result.manual_failed
                  else f"; the manual served at {result.manual_s:.1f} s")
    lines = [f"{result.label}: ready after {result.ready_s:.1f} s{manual} (load before: {load})"]
    lines += [f"  {seconds:6.1f} s  {phase}" for phase, seconds in breakdown(result)]
    after = [(start, took, command) for start, took, command in result.commands  # a make's own look-ups: noise
             if start >= result.ready_s and phase_of(command) != "stack" and took >= 0.1]
    if after:
        lines.append("  after readiness, beside the running stack:")
        lines += [f"    {took:6.1f} s  {phase_of(command)}: {command[:90]}" for start, took, command in after]
    if verbose:
        lines.append("  every command:")
        lines += [f"    {start:7.1f} s  {took:6.1f} s  {command[:100]}" for start, took, command in result.commands]
    return "\n".join(lines)


def compare(before: Result, after: Result) -> str:
    if before.ready_s is None or after.ready_s is None:
        return "no comparison: a run never said it was running"
    return (f"ready: {before.label} {before.ready_s:.1f} s -> {after.label} {after.ready_s:.1f} s "
            f"({after.ready_s - before.ready_s:+.1f} s)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", default=WORKTREE,
                        help=f"the revision to measure (default: {WORKTREE}, the working tree with its changes)")
    parser.add_argument("--baseline", metavar="REV", help="measure REV first and print before/after")
    parser.add_argument("--only", nargs="+", metavar="PATH",
                        help="with the working tree: lay only these paths' changes over HEAD")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for readiness")
    parser.add_argument("--manual-timeout", type=float, default=300.0,
                        help="seconds after readiness to wait for a manual built then")
    parser.add_argument("--verbose", action="store_true", help="also list every command make ran")
    args = parser.parse_args(argv)
    if args.timeout <= 0 or args.manual_timeout <= 0:
        parser.error("--timeout and --manual-timeout must be positive")
    if args.baseline is not None and args.baseline == args.ref:
        parser.error("--baseline names the revision --ref measures: nothing to compare")
    if args.only and args.ref != WORKTREE:
        parser.error("--only picks changes of the working tree: it needs the default --ref")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    refs = [args.baseline, args.ref] if args.baseline else [args.ref]
    results = []
    for ref in refs:
        work = Path(tempfile.mkdtemp(prefix="first-start-"))
        try:
            results.append(measure(work, ref, args.timeout, args.manual_timeout, args.only if ref == WORKTREE else None))
            print(report(results[-1], verbose=args.verbose), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)  # a venv and two caches: minutes of disk on a busy machine
    if len(results) == 2:
        print(compare(*results))
    return 0 if all(r.ready_s is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
