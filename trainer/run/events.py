"""The step-event contract: what a trainer reports about a run, and the bounds every reader holds it to.

The trainer's reporter writes these events (`trainer/run/reporting.py`, one JSON object a line of
`events.jsonl`); the web app's ingest stores them, the logging API checks what a trainer elsewhere posts
against the same bounds, and the SDK checks its values before it sends them. Each bound is declared here
once. This module imports nothing of the project and nothing outside the standard library, so the
trainer, `webapp/` and `cohort/` (whose SDK is standard library only) all import it.
"""

from __future__ import annotations

# The largest value of a PostgreSQL integer column: a step, a run's whole-number settings (its steps
# above all), a group's index, a sweep's sampler seed all end in one.
INT32_MAX = 2**31 - 1
MAX_STEP = INT32_MAX

# A post of the logging API carries at most this many steps.
MAX_STEPS_PER_POST = 100

# A run's labels, wherever it starts (the launch form, the API, the SDK's `cohort.init`).
MAX_NAME_CHARS, MAX_NOTES_CHARS = 200, 20_000
MAX_TAGS, MAX_TAG_CHARS = 20, 40
