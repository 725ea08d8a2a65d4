"""Where CI's time went: each phase's wall time, each suite's total, and its slowest tests.

    python3 .ci/report.py --phases PHASES.tsv [--top 25] NAME=JUNIT.xml [NAME=JUNIT.xml ...]

PHASES.tsv has one `name<TAB>start<TAB>end` line a phase (epoch seconds, written by .ci/run). Each
JUNIT.xml is pytest's `--junitxml` report of one suite; a test's time there is its setup, call and
teardown together (pytest's default `junit_duration_report = total`), so a fixture that starts a
server for one test is charged to that test. Standard library only: it runs before and without the
virtualenv.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def read_phases(path: Path) -> list[tuple[str, float]]:
    phases = []
    for line in path.read_text().splitlines():
        name, start, end = line.split("\t")
        phases.append((name, float(end) - float(start)))
    return phases


def read_suite(path: Path) -> tuple[list[tuple[float, str]], dict[str, int]]:
    """(seconds, test id) of every test case, and the counts of passed/failed/skipped/errors."""
    root = ET.parse(path).getroot()
    cases, counts = [], {"tests": 0, "failed": 0, "errors": 0, "skipped": 0}
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        cases.append((float(case.get("time") or 0.0), test_id))
        counts["tests"] += 1
        for outcome, key in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
            if case.find(outcome) is not None:
                counts[key] += 1
    return cases, counts


def minutes(seconds: float) -> str:
    return f"{seconds:8.1f} s ({seconds / 60:5.1f} min)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", type=Path, help="the phases' start and end times (TSV)")
    parser.add_argument("--top", type=int, default=25, help="how many of each suite's slowest tests (default 25)")
    parser.add_argument("suites", nargs="*", help="NAME=JUNIT.xml for each suite")
    args = parser.parse_args(argv)

    if args.phases and args.phases.exists():
        print("CI phases (wall time):")
        phases = read_phases(args.phases)
        for name, seconds in phases:
            print(f"  {minutes(seconds)}  {name}")
        print(f"  {minutes(sum(s for _, s in phases))}  all phases")
    for spec in args.suites:
        name, _, path = spec.partition("=")
        if not Path(path).exists():
            print(f"\nSuite {name}: no report at {path} (pytest did not finish)")
            continue
        cases, counts = read_suite(Path(path))
        total = sum(seconds for seconds, _ in cases)
        print(f"\nSuite {name}: {counts['tests']} tests, {counts['failed']} failed, {counts['errors']} errors, "
              f"{counts['skipped']} skipped; their times add up to {minutes(total).strip()}")
        print(f"  the {min(args.top, len(cases))} slowest (setup + call + teardown):")
        for seconds, test_id in sorted(cases, reverse=True)[: args.top]:
            print(f"  {seconds:7.1f} s  {test_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
