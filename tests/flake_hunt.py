"""Repeat the integration and browser tests to catch a test that depends on the machine's speed, and
the API fuzz with a new seed each run.

    python -m tests.flake_hunt --runs 10                  # idle machine
    python -m tests.flake_hunt --runs 10 --hog 2          # with two busy processes beside it
    python -m tests.flake_hunt --runs 5 -- -k outage  # pytest arguments after --

(`make flake-hunt N=10 HOG=2` does the first two.) Each run is a fresh `webapp.stack test`, so it
gets the same services as `make test`: PostgreSQL and Redis when DATABASE_URL / REDIS_URL are set,
the embedded defaults otherwise. Each run gives the API fuzz (tests/webapp/api/test_schema_fuzz.py) a
seed of its own in COHORT_FUZZ_SEED, printed on the run's line, so a failure can be replayed. It stops
at the first failing run (its log is kept) unless --keep-going, and ends with a line of counts.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The load tests too (issue 43): a crowd of posts at once, writers taking turns across processes, and a
# trainer killed mid-run are exactly what a busier machine times differently.
DEFAULT_TESTS = ["tests/workers", "tests/browser", "tests/webapp/api/test_schema_fuzz.py", "tests/webapp/test_overload.py",
                 "tests/webapp/db", "tests/webapp/runs/ingest/test_lost.py"]
HOG = "while True: pass"


def start_hogs(count: int) -> list[subprocess.Popen]:
    """`count` processes that each keep one core busy (a loaded CI machine, a neighbour's job)."""
    return [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.flake_hunt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="how many times to run the tests (default 10)")
    parser.add_argument("--hog", type=int, default=0, help="busy processes to run beside the tests (default 0)")
    parser.add_argument("--keep-going", action="store_true", help="run every repetition even after a failure")
    parser.add_argument("pytest_args", nargs="*", help=f"pytest arguments (default: {' '.join(DEFAULT_TESTS)})")
    args = parser.parse_args(argv)
    pytest_args = args.pytest_args or DEFAULT_TESTS
    logs = Path(tempfile.mkdtemp(prefix="flake-hunt-"))
    hogs = start_hogs(args.hog)
    passed = failed = 0
    try:
        for number in range(1, args.runs + 1):
            log = logs / f"run-{number}.log"
            seed = random.randrange(1, 2**31)
            started = time.monotonic()
            with open(log, "wb") as out:
                rc = subprocess.call([sys.executable, "-m", "webapp.stack", "test", "-q", "-p", "no:cacheprovider",
                                      *pytest_args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, COHORT_FUZZ_SEED=str(seed)))
            summary = (log.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1]
            print(f"run {number}/{args.runs} (COHORT_FUZZ_SEED={seed}): {'ok' if rc == 0 else f'FAILED (exit {rc})'} "
                  f"in {time.monotonic() - started:.0f} s: {summary}", flush=True)
            if rc == 0:
                passed += 1
                log.unlink()
                continue
            failed += 1
            print(f"  log: {log}", flush=True)
            if not args.keep_going:
                break
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"flake hunt ({args.hog} busy processes beside it): {passed} runs passed, {failed} runs failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
