"""Module-call texts stored once per (step, example) as one compressed row (issue 13, item 5).

A call's prompt repeats the question and the earlier completions of its rollout, and the rollouts of
one example share their first prompt. So the texts of all calls of one example at one step go into one
`CallText` row: each prompt as (length of the prefix it shares with a base prompt, the rest), the base
being the previous prompt of its own rollout, or for a rollout's first prompt the first prompt of the
previous rollout; completions and chat messages as they are; the whole list zlib-compressed (stored
as is: PostgreSQL's own compression would find nothing more). `benchmarks/storage.py` measures it.

A `ModuleCall` whose text lives here has `completion` (and `prompt`, `messages`) NULL; rows stored
before this scheme keep their text in their own columns and pass through untouched. Readers call
`fill_call_texts(calls)`: two queries for any number of calls.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from webapp.runs.models import CallText, ModuleCall, Rollout

Key = tuple[int, int, str]  # (attempt, step, example_id)


def encode_texts(calls: Sequence[tuple[int, str, Any, str]]) -> bytes:
    """(rollout index, prompt, messages, completion) of an example's calls, rollout by rollout and each
    rollout's calls in order, as one zlib stream; `decode_texts` inverts it exactly."""
    rows, previous, first_of_previous, current = [], "", "", None
    for rollout, prompt, messages, completion in calls:
        base = first_of_previous if rollout != current else previous
        if rollout != current:
            first_of_previous, current = prompt, rollout
        common = len(os.path.commonprefix([base, prompt]))
        rows.append([rollout, common, prompt[common:], completion, messages])
        previous = prompt
    return zlib.compress(json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode(), 9)


def decode_texts(data: bytes) -> dict[tuple[int, int], tuple[str, Any, str]]:
    """{(rollout index, position in the rollout): (prompt, messages, completion)}."""
    texts: dict[tuple[int, int], tuple[str, Any, str]] = {}
    previous, first_of_previous, current, position = "", "", None, 0
    for rollout, common, suffix, completion, messages in json.loads(zlib.decompress(bytes(data))):
        base = first_of_previous if rollout != current else previous
        prompt = base[:common] + suffix
        if rollout != current:
            first_of_previous, current, position = prompt, rollout, 0
        texts[(rollout, position)] = (prompt, messages, completion)
        position += 1
        previous = prompt
    return texts


def texts_by_key(run_id: int, keys: Iterable[Key]) -> dict[Key, dict[tuple[int, int], tuple[str, Any, str]]]:
    """The decoded texts of these (attempt, step, example) keys of a run: one query. It names the
    attempts too, so PostgreSQL reads the rows' unique index (run, attempt, step, example_id) instead
    of filtering every text row of the run."""
    keys = set(keys)
    if not keys:
        return {}
    rows = CallText.objects.filter(run_id=run_id, attempt__in={k[0] for k in keys}, step__in={k[1] for k in keys},
                                   example_id__in={k[2] for k in keys}).values_list("attempt", "step", "example_id", "data")
    return {(a, s, e): decode_texts(data) for a, s, e, data in rows if (a, s, e) in keys}


def fill_call_texts(calls: Sequence[ModuleCall]) -> None:
    """Sets prompt, messages and completion on calls whose text lives in a `CallText` row (two queries
    whatever their number; none when every call carries its own text). Works on deferred fields."""
    pending = [c for c in calls if c.__dict__.get("completion", "") is None]
    if not pending:
        return
    places = {pk: (run, attempt, step, example, index) for pk, run, attempt, step, example, index in
              Rollout.objects.filter(pk__in={c.rollout_id for c in pending})
              .values_list("pk", "run_id", "attempt", "step", "example_id", "index")}
    by_run: dict[int, set[Key]] = {}
    for run, attempt, step, example, _ in places.values():
        by_run.setdefault(run, set()).add((attempt, step, example))
    decoded = {}
    for run, keys in by_run.items():  # one run in every reader
        decoded.update({(run, *key): texts for key, texts in texts_by_key(run, keys).items()})
    for call in pending:
        run, attempt, step, example, index = places[call.rollout_id]
        prompt, messages, completion = decoded.get((run, attempt, step, example), {}).get(
            (index, call.position), ("", None, ""))
        call.prompt, call.messages, call.completion = prompt, messages, completion
