"""The launch form: one form field per RunConfig field, validated by RunConfig itself.

Fields are derived from the dataclass (type, help text, group), so the form can never drift from
what the worker runs. Every `ConfigError` names its field and is shown beside it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from functools import cached_property
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.db.models import Q

from trainer.config import GROUP_TITLES, RunConfig, literal_choices
from trainer.programs import program_error
from webapp.projects.models import Project
from webapp.projects.selectors import launchable_projects, projects_for_user
from webapp.runs.hooks import placements_offered
from webapp.runs.launch.catalog import unavailable_program_names
from webapp.runs.launch.check import (
    MAX_NAME_CHARS,
    MAX_NOTES_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    LaunchRefused,
    launch_check,
    role_check,
    tags_checked,
    value_errors,
)
from webapp.runs.launch.error_summary import (
    SummaryEntry,
    error_summary,
    mark_invalid,
    over_limits_fingerprint,
)
from webapp.runs.launch.limits import limits_over_for_staff
from webapp.runs.launch.model_offer import model_offer
from webapp.runs.launch.widgets import fields_out_of_reach, program_option_attrs, reward_registry, shown_when
from webapp.runs.models import Program
from webapp.runs.selectors import launchable_tasks, run_move_targets

# Filled from the task, or not user-facing (the worker exports the task's dataset to these files).
NOT_ON_FORM = {"program", "train_data", "dev_data", "corpus_data"}

# The groups' titles and order: trainer.config.GROUP_TITLES (the manual's run settings reference uses them too).
# What a first launch needs in view; the other groups start folded (a group holding an error opens).
OPEN_GROUPS = {"task", "strategy", "advantage", "batch", "model"}


class CommaListField(forms.CharField):
    """A list typed in as `a, b, c` (items converted by `item`)."""

    def __init__(self, *, item=str, **kwargs):
        self.item = item
        super().__init__(required=False, **kwargs)

    def prepare_value(self, value):
        return ", ".join(str(v) for v in value) if isinstance(value, list | tuple) else value

    def to_python(self, value):
        text = super().to_python(value)
        items = [part.strip() for part in text.split(",") if part.strip()]
        try:
            return [self.item(part) for part in items]
        except ValueError:
            raise forms.ValidationError(f"Enter comma-separated {self.item.__name__} values, e.g. 0.7, 0.1, 0.2.") from None


class CountsField(forms.CharField):
    """A name -> count mapping typed in as `name=2, other=1`."""

    def __init__(self, **kwargs):
        super().__init__(required=False, **kwargs)

    def prepare_value(self, value):
        return ", ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else value

    def to_python(self, value):
        counts = {}
        for part in filter(None, (p.strip() for p in super().to_python(value).split(","))):
            name, sep, count = part.partition("=")
            if not sep or not name.strip() or not count.strip().isdigit():
                raise forms.ValidationError(f"Write name=count pairs, e.g. teacher=2 (not {part!r}).")
            counts[name.strip()] = int(count)
        return counts


class RewardsField(forms.CharField):
    """The task's rewards as a JSON list of {name, weight, params, condition_on, threshold}."""

    widget = forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "code"})

    def prepare_value(self, value):
        if isinstance(value, list):
            return "[\n" + ",\n".join("  " + json.dumps(r) for r in value) + "\n]"
        return value

    def to_python(self, value):
        text = super().to_python(value)
        try:
            rewards = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}.") from None
        if not isinstance(rewards, list) or not all(isinstance(r, dict) for r in rewards):
            raise forms.ValidationError('Write a list of rewards, e.g. [{"name": "exact_match", "weight": 1.0}].')
        return rewards


class TagsField(forms.CharField):
    """Tags typed as `baseline, gdpo` (commas or spaces), checked by the launch check's rule
    (`tags_checked`: lowercased, slugs of at most 40 characters, at most 20, repeats dropped)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("help_text", f"Up to {MAX_TAGS} short labels, e.g. baseline, gdpo-sweep.")
        super().__init__(required=False, max_length=MAX_TAGS * (MAX_TAG_CHARS + 2), **kwargs)

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value):
        try:
            return tags_checked(re.split(r"[,\s]+", super().to_python(value)))
        except LaunchRefused as refused:
            raise forms.ValidationError(refused.errors["tags"]) from None


def _form_field(f: dataclasses.Field) -> forms.Field:
    help_text = f.metadata.get("help", "")
    annotation = str(f.type)
    choices = literal_choices(f.type)
    if choices:
        return forms.ChoiceField(choices=[(c, c) for c in choices], help_text=help_text)
    if annotation == "bool":
        return forms.BooleanField(required=False, help_text=help_text)
    if annotation == "int":  # bounded by the launch check, as at every door
        return forms.IntegerField(help_text=help_text)
    if annotation == "float":
        return forms.FloatField(help_text=help_text)
    if annotation == "list[RewardSpec]":
        return RewardsField(help_text=help_text)
    if annotation == "list[float]":
        return CommaListField(item=float, help_text=help_text)
    if annotation == "list[str]":
        return CommaListField(item=str, help_text=help_text)
    if annotation == "dict[str, int]":
        return CountsField(help_text=help_text)
    if annotation == "int | None":  # optional: left empty means None
        return forms.IntegerField(required=False, help_text=help_text)
    if annotation == "float | None":  # optional: left empty means None
        return forms.FloatField(required=False, help_text=help_text)
    if annotation == "str | None":  # optional: left empty means None
        return forms.CharField(required=False, empty_value=None, help_text=help_text)
    return forms.CharField(help_text=help_text)


CONFIG_FIELDS = [f for f in dataclasses.fields(RunConfig) if f.name not in NOT_ON_FORM]


class ProgramSelect(forms.Select):
    """The program list: an unavailable plugin program is shown disabled, with its error beside its
    name, so the user sees why it cannot be chosen (`errors`: program name -> error)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.errors: dict[str, str] = {}

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        option["attrs"].update(program_option_attrs(str(value)))  # what the fields' conditions read
        error = self.errors.get(str(value))
        if error:
            option["label"] = f"{value} — unavailable: {error}"
            option["attrs"]["disabled"] = True
            option["attrs"]["title"] = error
        return option


class RunLaunchForm(forms.Form):
    """Task, program, name, and every RunConfig field; `cleaned_data["config"]` is the RunConfig."""

    task = forms.ModelChoiceField(queryset=launchable_tasks().select_related("program", "dataset"), empty_label=None,
                                  help_text="What to train on: a dataset (or generated examples) and its rewards.")
    program = forms.ModelChoiceField(queryset=Program.objects.filter(is_active=True), to_field_name="name",
                                     empty_label=None, widget=ProgramSelect,
                                     help_text="The LM program whose modules are trained.")
    project = forms.ModelChoiceField(
        required=False, queryset=Project.objects.none(), empty_label=None,
        help_text="Who sees the run: the project's members. Your personal project is yours alone.")
    name = forms.CharField(required=False, max_length=MAX_NAME_CHARS, help_text="Optional label shown in the runs list.")
    tags = TagsField()
    notes = forms.CharField(required=False, max_length=MAX_NOTES_CHARS, widget=forms.Textarea(attrs={"rows": 2}),
                            help_text="Optional: what this run tries (editable later).")
    # The staff's "Launch anyway" over the launch limits: the fingerprint of what they confirmed
    # (webapp/runs/launch/error_summary.py); written by the template's confirmation, never a form row (any other
    # value is no confirmation).
    confirm_over_limits = forms.CharField(required=False, widget=forms.HiddenInput)
    # Where it trains: this server's workers, or a Slurm partition (webapp/runs/hooks.py's placement), with
    # the job's time limit. A text field under its list, so a partition no longer offered is refused by the
    # launch check in its own words beside the field, not as "not one of the choices".
    partition = forms.CharField(required=False, label="Where", help_text=(
        "This server's workers, or a Slurm partition: its GPUs, free nodes and time limit as sinfo reports them."))
    time_limit = forms.IntegerField(required=False, label="Time limit (minutes)", help_text=(
        "The Slurm job's time limit; empty: the server's default. Before it ends the run checkpoints, "
        "and it continues as its next attempt."))

    def __init__(self, *args, user=None, ask_over_limits: bool = False, **kwargs):
        """`ask_over_limits`: a staff user over the launch limits a non-staff user is refused must confirm
        (the launch page asks; the API, `launch_run` and a sweep's or experiment's runs do not)."""
        super().__init__(*args, **kwargs)
        self.user = user  # whose launch limits apply (webapp.limits); None: no limit check
        self.ask_over_limits = ask_over_limits and user is not None
        self.over_limits: list = []  # the LimitErrors awaiting the staff's confirmation (clean)
        if user is not None:
            # Posted: every project the user reads, so a viewer's choice is answered 403 with the reason (not
            # "not one of the choices"). Shown: only those they may launch into.
            self.fields["project"].queryset = projects_for_user(user) if self.is_bound else launchable_projects(user)
        # Unavailable plugin programs are listed (disabled, with their error), never launched.
        unavailable = {name: program_error(name) for name in unavailable_program_names()}
        program = self.fields["program"]
        program.queryset = Program.objects.filter(Q(is_active=True) | Q(name__in=unavailable))
        program.widget.errors = unavailable
        for f in CONFIG_FIELDS:
            self.fields[f.name] = _form_field(f)
        # Free text (any allowed hub id or folder), with the models this server knows offered as choices.
        self.fields["model"].widget.attrs["list"] = "model-choices"
        self.places = placements_offered()
        self.fields["partition"].widget = forms.Select(choices=[("", "This server's workers"), *self.places])

    # Only a rendered form reads these (a POST that launches, or the API, never does): computed then, once.
    @cached_property
    def model_groups(self):
        """The model picker's groups (webapp.runs.launch.model_offer), for the template."""
        return model_offer(self.user)

    @cached_property
    def model_choices(self) -> list[tuple[str, str]]:
        """(model, what it is) for the model box's datalist: the picker's built-in models and exact
        allow-list ids (prefixes and folders are starts, not models)."""
        return [(e.value, e.note) for g in self.model_groups if g.key in ("builtin", "allowed")
                for e in g.entries if not e.prefix]

    @cached_property
    def _out_of_reach(self) -> set[str]:
        return fields_out_of_reach()

    def hidden_for_machine(self) -> list[forms.BoundField]:
        """The settings no worker has the GPUs for (`sampler_gpus` without a 2-GPU worker), posted hidden
        with their values; one showing an error stays in view (grouped_fields)."""
        return [self[name] for name in sorted(self._out_of_reach) if not self[name].errors]

    def reward_registry(self) -> dict[str, Any]:
        """The rewards the reward editor offers (webapp.runs.launch.widgets), for `json_script`."""
        return reward_registry()

    def grouped_fields(self) -> list[tuple[str, str, list[forms.BoundField], bool]]:
        """(key, title, bound fields, open) in form order, for the template's foldable fieldsets: the groups
        of OPEN_GROUPS are open, the advanced ones folded unless one of their fields has an error. The key
        names the group's section of the manual's settings reference (#group-<key>)."""
        groups: dict[str, list[forms.BoundField]] = {
            "task": [self["project"], self["task"], self["program"], self["name"], self["tags"], self["notes"]]}
        if self.places or self["partition"].errors or self["time_limit"].errors:  # Slurm offered: the Where choice
            groups["task"] += [self["partition"], self["time_limit"]]
        hidden = {bound.name for bound in self.hidden_for_machine()}
        for f in CONFIG_FIELDS:
            if f.name in hidden:
                continue
            bound = self[f.name]
            bound.shown_when = shown_when(f.name)  # the wrapper's data-shown-when (launch-form.js)
            groups.setdefault(f.metadata.get("group", "model"), []).append(bound)
        order = list(GROUP_TITLES)
        if self.is_bound:
            mark_invalid(self)
        return [(g, GROUP_TITLES.get(g, g), fields, g in OPEN_GROUPS or any(f.errors for f in fields))
                for g, fields in sorted(groups.items(), key=lambda i: order.index(i[0]))]

    def error_summary(self) -> list[SummaryEntry]:
        """Every refused field in page order, for the summary at the top of the form (the form's own
        errors first), then the Sweep button's settings (webapp/sweeps rides them on `sweep_settings`)."""
        fields = [bound for _, _, bounds, _ in self.grouped_fields() for bound in bounds]
        if self.over_limits:  # the limits' own words: the field's error adds how to confirm, said above
            refused = {e.field: e.message for e in self.over_limits}
            return [SummaryEntry(bound.name, [refused[bound.name]], bound.id_for_label) for bound in fields
                    if bound.name in refused]
        entries = error_summary(self, [*fields, self["confirm_over_limits"]])  # it too may be refused (a NUL)
        settings = getattr(self, "sweep_settings", None)
        if settings is not None and settings.is_bound:
            entries += error_summary(settings, [settings[name] for name in settings.fields],
                                     label=lambda bound: f"sweep {bound.label}", whole="Sweep settings")
        return entries

    @property
    def over_limits_confirmation(self) -> str:
        """The value of the "Launch anyway" confirmation of `over_limits`."""
        return over_limits_fingerprint(self.over_limits)

    def clean_project(self):
        """The project to launch into (empty: the user's personal project). A viewer may not launch: the
        request is refused with a 403 that says so, before anything else is checked."""
        project = self.cleaned_data.get("project")
        if self.user is not None:
            try:
                role_check(self.user, project)
            except LaunchRefused as refused:
                raise PermissionDenied(" ".join(refused.errors["project"])) from None
        return project

    def clean(self):
        """Every rule is the launch check's (webapp/runs/launch/check.py), as at every other door; the form
        only parses its text into values, and asks a staff user to confirm a launch over the limits."""
        cleaned = super().clean()
        if self.errors:  # a field did not even parse: the others' bounds are still said beside them
            parsed = {f.name: cleaned[f.name] for f in CONFIG_FIELDS if f.name in cleaned}
            for field, messages in value_errors(parsed).items():
                for message in messages:
                    self.add_error(field, message)
            return cleaned
        values: dict[str, Any] = {f.name: cleaned[f.name] for f in CONFIG_FIELDS}
        try:
            launch = launch_check(self.user, task=cleaned["task"], program=cleaned["program"], values=values,
                                  project=cleaned.get("project"), partition=cleaned.get("partition") or "",
                                  time_limit=cleaned.get("time_limit"))
        except LaunchRefused as refused:
            for field, messages in refused.errors.items():
                for message in messages:
                    self.add_error(field if field in self.fields else None, message)
            return cleaned
        if self.ask_over_limits:
            self._ask_over_limits(launch.config)
            if self.errors:
                return cleaned
        cleaned["launch"] = launch
        cleaned["config"] = launch.config
        return cleaned

    def _ask_over_limits(self, config: RunConfig) -> None:
        """A staff launch over the per-run limits is refused until its "Launch anyway" confirms exactly
        these limits (a confirmation of other values asks again)."""
        over = limits_over_for_staff(self.user, config)
        if not over or self.cleaned_data.get("confirm_over_limits") == over_limits_fingerprint(over):
            return
        self.over_limits = over
        for error in over:
            self.add_error(error.field, forms.ValidationError(
                f"{error.message} A user who is not staff would be refused: confirm at the top of the form to "
                "launch anyway, or lower it.", code="over_limit"))


class RunDetailsForm(forms.Form):
    """What a user may change on a run at any time: its name, tags and notes, and its project (a run
    moves where its owner is a member, and so is whoever moves it). Without `project` in the data (the
    runs table's row editor) the run stays where it is."""

    name = forms.CharField(required=False, max_length=MAX_NAME_CHARS)
    tags = TagsField()
    notes = forms.CharField(required=False, max_length=MAX_NOTES_CHARS, widget=forms.Textarea(attrs={"rows": 3}))
    project = forms.ModelChoiceField(required=False, queryset=Project.objects.none(), empty_label=None,
                                     help_text="Move the run: to a project where its owner and you are members.")

    def __init__(self, *args, user=None, run=None, **kwargs):
        super().__init__(*args, **kwargs)
        if user is not None and run is not None:
            self.fields["project"].queryset = run_move_targets(user, run)
