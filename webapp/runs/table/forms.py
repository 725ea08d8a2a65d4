"""The runs table's filter form and its search box (GET): an unknown value is a 400 with the reason,
not an empty page."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from typing import Any

from django import forms

from trainer.config import RunConfig
from webapp.runs.models import Program, Run, Task
from webapp.runs.selectors import DEFAULT_SORT, RUN_SORTS, RunSearch

CONFIG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)*")
CONFIG_KEY_ALIASES = {"lr": "learning_rate"}  # what W&B users type


def parse_search(text: str) -> RunSearch:
    """The runs table's search box, terms separated by spaces (quote a term holding spaces):

    - `tag:baseline`: a tag equals it;
    - `project:vision`: the run is in that project (its name, any case);
    - `estimator=gdpo`, `learning_rate=1e-5`, `rewards.0.name=f1`: the config value at that key
      path equals it (numbers, true/false and null compare as JSON values, anything else as text);
    - anything else: the name contains it, or a tag does.
    """
    try:
        terms = shlex.split(text)
    except ValueError:
        raise forms.ValidationError("A quote is not closed: write \"two words\" or 'two words'.") from None
    texts, tags, config, projects = [], [], [], []
    known = {f.name for f in dataclasses.fields(RunConfig)}
    for term in terms:
        if term.lower().startswith("project:"):
            name = term[len("project:"):]
            if not name:
                raise forms.ValidationError("'project:' needs a project name after it, e.g. project:vision.")
            projects.append(name)
        elif term.lower().startswith("tag:"):
            tag = term[4:].lower()
            if not tag:
                raise forms.ValidationError("'tag:' needs a tag after it, e.g. tag:baseline.")
            tags.append(tag)
        elif "=" in term:
            key, _, raw = term.partition("=")
            if not CONFIG_KEY.fullmatch(key) or "__" in key:
                raise forms.ValidationError(f"{key!r} is not a config key: write key=value, e.g. estimator=gdpo.")
            path = key.split(".")
            path[0] = CONFIG_KEY_ALIASES.get(path[0], path[0])
            if path[0] not in known:
                raise forms.ValidationError(
                    f"Unknown config key {key!r}: use a launch form field name, e.g. strategy, estimator, "
                    f"learning_rate, group_size, model.")
            config.append((tuple(path), _json_value(raw)))
        else:
            texts.append(term)
    return RunSearch(text=tuple(texts), tags=tuple(tags), config=tuple(config), projects=tuple(projects))


def _json_value(raw: str) -> Any:
    """A number, true, false or null as its JSON value; any other text as a string."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    if value is None or isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return raw


class RunFilterForm(forms.Form):
    """The runs table's filters, search, sort and page (GET). An unknown value is a 400 with the
    reason, not an empty page."""

    state = forms.ChoiceField(required=False, choices=[("", "any state"), *Run.State.choices])
    task = forms.ModelChoiceField(required=False, queryset=Task.objects.all(), to_field_name="name",
                                  empty_label="any task")
    program = forms.ModelChoiceField(required=False, queryset=Program.objects.all(), to_field_name="name",
                                     empty_label="any program")
    owner = forms.CharField(required=False, max_length=150)
    project = forms.CharField(required=False, max_length=150)  # the switcher: a project's name
    q = forms.CharField(required=False, max_length=500, label="Search")
    archived = forms.BooleanField(required=False, label="Show archived")
    sort = forms.CharField(required=False, max_length=40)
    page = forms.IntegerField(required=False, min_value=1)

    def clean_q(self):
        return self.cleaned_data["q"].strip()

    def clean_sort(self):
        sort = self.cleaned_data["sort"] or DEFAULT_SORT
        if sort.removeprefix("-") not in RUN_SORTS:
            raise forms.ValidationError(f"Cannot sort by {sort!r}: choose one of {', '.join(RUN_SORTS)} "
                                        f"(prefix - for descending).")
        return sort

    def clean(self):
        cleaned = super().clean()
        if "q" in cleaned:
            try:
                cleaned["search"] = parse_search(cleaned["q"])
            except forms.ValidationError as exc:
                self.add_error("q", exc)
        return cleaned

    def selector_kwargs(self) -> dict[str, Any]:
        """The arguments of `run_list_filtered` (after is_valid())."""
        names = ("state", "task", "program", "owner", "project", "search", "archived", "sort")
        return {name: self.cleaned_data[name] for name in names}
