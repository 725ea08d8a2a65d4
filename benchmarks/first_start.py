"""How long a fresh clone's `make run` takes to serve, and where the time goes.

Clones the repository at `--ref` (default: HEAD) into a temporary folder, runs `make run` there with
the embedded defaults on a free port, timestamps every command make runs (through a SHELL wrapper)
and every line the stack prints, and stops the stack once it says "Cohort is running at". Pass
several refs to compare them in one sitting (run them on a quiet machine: installs are CPU-bound):

    .venv/bin/python benchmarks/first_start.py --ref 54aa636 --ref HEAD

Only the registries the machine's pip is configured for are used; nothing is installed here.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import READY, free_port, interrupt_group  # noqa: E402

WRAPPER = """#!/bin/bash
# make's SHELL: runs the recipe line, then logs its wall time
start=$(date +%s.%N)
/bin/bash "$@"
rc=$?
echo "$(date +%s.%N) $start $rc $(printf '%s' "${@: -1}" | tr '\n' ' ')" >> "$PHASES_LOG"  # one line a command
exit $rc
"""


def measure(ref: str, timeout_s: float) -> dict:
    work = Path(tempfile.mkdtemp(prefix="first-start-"))
    clone = work / "cohort"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", ref], check=True)
    wrapper, phases_log = work / "shell", work / "phases.log"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "VIRTUAL_ENV")}
    env.update(PHASES_LOG=str(phases_log), COHORT_PORT=str(free_port()), COHORT_VAR_DIR=str(work / "var"),
               COHORT_MODEL_CACHE=str(work / "models"))
    started = time.time()
    process = subprocess.Popen(["make", "run", f"SHELL={wrapper}"], cwd=clone, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines, ready = [], None
    try:
        for line in process.stdout:
            lines.append((time.time() - started, line.rstrip()))
            if READY in line:
                ready = time.time() - started
                break
            if time.time() - started > timeout_s:
                break
    finally:
        interrupt_group(process)  # make run's stack stops what it started, as on Ctrl-C
    commands = []
    for row in phases_log.read_text().splitlines() if phases_log.exists() else []:
        end, start, _rc, command = row.split(" ", 3)
        commands.append((float(start) - started, float(end) - float(start), command))
    return {"ref": ref, "ready_s": ready, "commands": commands, "lines": lines}


def report(result: dict) -> None:
    print(f"\n{result['ref']}: ready after {result['ready_s']:.1f} s" if result["ready_s"] is not None
          else f"\n{result['ref']}: never said it was running")
    stack_start = None
    for at, took, command in result["commands"]:
        command = re.sub(r"\s+", " ", command)
        print(f"  {at:7.1f} s  {took:6.1f} s  {command[:110]}")
        stack_start = at + took
    last = stack_start or 0.0
    for at, line in result["lines"]:
        if at >= last and line.strip() and not line.startswith(("test -x", ".venv/bin/python -m pip", "touch")):
            print(f"  {at:7.1f} s  {at - last:6.1f} s  (stack) {line[:100]}")
            last = at


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", action="append", help="git refs to measure (default: HEAD)")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args(argv)
    results = [measure(ref, args.timeout) for ref in args.ref or ["HEAD"]]
    for result in results:
        report(result)
    return 0 if all(r["ready_s"] is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
