"""The summary of a refused form shown at its top (templates/runs/_error_summary.html): one entry per
refused field, in the order the page shows the fields, each linking to the input to fix, and the
form's errors as a whole first. A long form (the launch form is about 2,800 px) otherwise comes back
with its one error out of sight; static/js/launch-form.js focuses the first entry's input.

A staff launch over the launch limits (webapp/runs/launch/limits.py `limits_over_for_staff`) is refused
the same way until confirmed: `over_limits_fingerprint` names exactly what was confirmed, so a
confirmation never carries over to other values that are over a limit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from django import forms

from webapp.limits.services import LimitError


@dataclass(frozen=True)
class SummaryEntry:
    """One refused field: `label` as the page labels it ("" for the form as a whole), its `messages`,
    and `target`, the id of the input to focus (None: the form as a whole, nothing to link to)."""

    label: str
    messages: list[str]
    target: str | None


def error_summary(form: forms.Form, fields: Iterable[forms.BoundField], *, label=lambda bound: bound.name,
                  whole: str = "") -> list[SummaryEntry]:
    """`form`'s errors: its non-field errors first (labelled `whole`), then each of `fields` (its bound
    fields, in page order) that has an error. `label(bound)` is the text of the field's <label>."""
    entries = [SummaryEntry(whole, list(form.non_field_errors()), None)] if form.non_field_errors() else []
    for bound in fields:
        if bound.errors:
            entries.append(SummaryEntry(label(bound), list(bound.errors), bound.id_for_label or None))
    return entries


def mark_invalid(form: forms.Form) -> None:
    """Ties each refused input to its error for assistive technology (the template writes the error
    as `<ul id="error-NAME">`, and the help text as Django names it, `<p id="id_NAME_helptext">`)."""
    for name in form.errors:
        if name in form.fields:
            bound = form[name]
            described = [f"error-{name}"] + ([f"{bound.auto_id}_helptext"] if bound.help_text and bound.auto_id else [])
            form.fields[name].widget.attrs.update({"aria-invalid": "true", "aria-describedby": " ".join(described)})


def over_limits_fingerprint(over: list[LimitError]) -> str:
    """What a "Launch anyway" confirms: the limits exceeded and by how much (each message names the
    figure and the limit), so changed values that are over a limit are asked about again."""
    text = "\n".join(f"{e.field}: {e.message}" for e in over)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
