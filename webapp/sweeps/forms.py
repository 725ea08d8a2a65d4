"""The sweep's inputs on the launch form (templates/runs/new.html, its Sweep button): one optional text
entry per sweepable setting, posted as `sweep__<field>` (`4, 8` or `1e-5..1e-3 log`), and the sweep's
settings (`SweepSettingsForm`).

The base settings are the launch form's own (webapp/runs/launch/forms.py RunLaunchForm, validated exactly as
for a run); this form only reads what a sweep adds. It checks types; what the values mean (bounds, a
grid's size, the launch limits) is `sweep_plan`'s to judge, so the form, the API and `launch_run --sweep`
refuse the same sweeps with the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms

from trainer.config import literal_choices
from trainer.run.events import INT32_MAX
from webapp.sweeps.models import Sweep
from webapp.sweeps.objective import EVAL_KEY, TRAIN_KEY
from webapp.sweeps.plan import MAX_PARALLEL, MAX_SEEDS, MAX_TRIALS, SweepSpec
from webapp.sweeps.space import FIELDS, NOT_SWEPT, field_kind, parse_text
from webapp.sweeps.study import DEFAULT_OPTIONS

ENTRY_PREFIX = "sweep__"
# The options the form offers (the API and the TOML file take every one of study.DEFAULT_OPTIONS).
FORM_OPTIONS = ("startup_trials", "warmup_steps")


def sweepable(name: str) -> bool:
    """Whether the launch form offers a sweep entry for field `name`: a number, a choice, a switch or a
    text setting (a list or mapping, the seed and what the task fills cannot vary)."""
    return name in FIELDS and name not in NOT_SWEPT and field_kind(name) != "other"


def entry_placeholder(name: str) -> str:
    """The entry's placeholder: the syntax, with values that field takes."""
    kind = field_kind(name)
    if kind == "float":
        return "e.g. 1e-5..1e-3 log, or 0.1, 0.2"
    if kind == "int":
        return "e.g. 4, 8, 16 or 4..32"
    if kind == "bool":
        return "true, false"
    if kind == "choice":
        return "e.g. " + ", ".join(map(str, (literal_choices(FIELDS[name].type) or ())[:2]))
    return "e.g. a, b (values, comma-separated)"


def posted_space(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The space the form posted: each non-empty `sweep__<field>` entry as `space.parse_text` reads it
    (checked later, by `sweep_plan`, beside its field). An unknown field is kept: it is refused by name."""
    space = {}
    for key in data:
        if not key.startswith(ENTRY_PREFIX):
            continue
        text = str(data.get(key) or "").strip()
        if text:
            name = key[len(ENTRY_PREFIX):]
            space[name] = parse_text(name, text)
    return space


def _number_input(low: int, high: int | None = None, **attrs) -> forms.NumberInput:
    return forms.NumberInput(attrs={"min": low, **({"max": high} if high is not None else {}), **attrs})


class SweepSettingsForm(forms.Form):
    """The sweep's settings, named as `SweepRefused` names their errors (`sweep_<setting>`); an error of
    the options (`sweep_options`) is this form's non-field error, shown beside the option inputs."""

    sweep_method = forms.ChoiceField(label="method", choices=Sweep.Method.choices, initial=Sweep.Method.TPE,
                                     help_text=f"Grid tries every combination (a range: {DEFAULT_OPTIONS['grid_points']} "
                                               "points across it); random and TPE sample `trials` of them.")
    sweep_seeds = forms.IntegerField(label="seeds", initial=1, widget=_number_input(1, MAX_SEEDS),
                                     help_text="Runs per configuration, seeds from the form's seed up.")
    sweep_n_trials = forms.IntegerField(label="trials", required=False, widget=_number_input(1, MAX_TRIALS),
                                        help_text="Configurations to try. Blank: a grid's size, else 10.")
    sweep_parallel = forms.IntegerField(label="at once", initial=1, widget=_number_input(1, MAX_PARALLEL),
                                        help_text="Configurations training at the same time (each x seeds runs).")
    sweep_objective = forms.CharField(
        label="objective", required=False, max_length=200,
        widget=forms.TextInput(attrs={"placeholder": f"default: {EVAL_KEY} if the runs evaluate, else {TRAIN_KEY}"}),
        help_text="The step metric the sweep optimizes.")
    sweep_mode = forms.ChoiceField(label="mode", choices=Sweep.Mode.choices, initial=Sweep.Mode.LAST)
    sweep_direction = forms.ChoiceField(label="direction", choices=Sweep.Direction.choices,
                                        initial=Sweep.Direction.MAXIMIZE)
    sweep_pruner = forms.ChoiceField(label="pruner", choices=Sweep.Pruner.choices, initial=Sweep.Pruner.NONE)
    sweep_sampler_seed = forms.IntegerField(label="sampler seed", initial=0, min_value=0, max_value=INT32_MAX,
                                            help_text="Makes the proposed configurations reproducible.")
    # Negative values are left to sweep_plan, which refuses every option's the same way.
    sweep_startup_trials = forms.IntegerField(label="startup trials", required=False, widget=_number_input(0),
                                              max_value=INT32_MAX,
                                              help_text="TPE: random trials first; pruners: trials before pruning.")
    sweep_warmup_steps = forms.IntegerField(label="warmup steps", required=False, widget=_number_input(0),
                                            max_value=INT32_MAX,
                                            help_text="Median pruner: steps of a trial before it may be pruned.")

    OPTION_FIELDS = {f"sweep_{name}": name for name in FORM_OPTIONS}

    def settings_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name not in self.OPTION_FIELDS]

    def option_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.OPTION_FIELDS]

    def spec(self, space: dict[str, Any]) -> SweepSpec:
        """The SweepSpec of a valid form over `space`."""
        data = self.cleaned_data
        options = {option: data[name] for name, option in self.OPTION_FIELDS.items() if data.get(name) is not None}
        return SweepSpec(space=space, method=data["sweep_method"], seeds=data["sweep_seeds"],
                         n_trials=data["sweep_n_trials"], parallel=data["sweep_parallel"],
                         objective=data["sweep_objective"].strip(), mode=data["sweep_mode"],
                         direction=data["sweep_direction"], pruner=data["sweep_pruner"],
                         sampler_seed=data["sweep_sampler_seed"], options=options)

    def add_refusal(self, field: str, message: str) -> None:
        """One of SweepRefused's errors about the settings, beside its input."""
        self.add_error(field if field in self.fields else None, message)


def add_refusal_errors(form: forms.Form, settings: SweepSettingsForm, errors: Mapping[str | None, str]) -> None:
    """SweepRefused's errors on the launch page: a swept setting's beside that field of the launch form,
    a sweep setting's beside its input, the rest (the sweep as a whole, an unknown field) at the top."""
    for field, message in errors.items():
        if field in settings.fields or field == "sweep_options":
            settings.add_refusal(field, message)
        elif field is not None and field in form.fields:
            form.add_error(field, message)
        else:
            form.add_error(None, f"{field}: {message}" if field else message)
