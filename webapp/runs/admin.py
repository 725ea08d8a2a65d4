import json
import math

from django import forms
from django.contrib import admin, messages
from django.utils.functional import lazy
from django.utils.html import format_html, format_html_join

from trainer.catalog import unavailable_plugins
from trainer.config import ConfigError
from trainer.programs import PROGRAMS, program_error, program_info
from trainer.rewards import REWARDS, reward_defaults
from webapp.datasets.kinds import program_dataset_kind
from webapp.datasets.models import Dataset
from webapp.runs.ingest.retention import storage_label
from webapp.runs.ingest.texts import fill_call_texts
from webapp.runs.launch.catalog import task_rewards_check
from webapp.runs.models import Group, GroupMember, ModuleCall, Program, Rollout, Run, StepMetric, Task


@admin.register(Program)
class ProgramAdmin(admin.ModelAdmin):
    """Programs as the registry has them now: where each comes from, and why a plugin program is
    unavailable. The list page also names every refused or broken plugin entry (programs and
    rewards), including those that have no row (a name a built-in kept)."""

    list_display = ["name", "title", "module_list", "distribution", "availability", "is_active", "synced_at"]
    list_filter = ["is_active"]
    search_fields = ["name", "title"]
    readonly_fields = ["synced_at", "distribution", "availability"]

    @admin.display(description="modules")
    def module_list(self, obj):
        return " → ".join(obj.modules)

    @admin.display(description="distribution")
    def distribution(self, obj):
        return program_info(obj.name)["distribution"] if obj.name in PROGRAMS else "—"

    @admin.display(description="availability")
    def availability(self, obj):
        if obj.name in PROGRAMS:
            return "available"
        error = program_error(obj.name)
        return f"unavailable: {error}" if error else "not registered"

    def changelist_view(self, request, extra_context=None):
        if request.method == "GET":
            for entry in unavailable_plugins():
                messages.warning(request, f"Unavailable plugin {entry.kind} {entry.name!r}: {entry.error}")
        return super().changelist_view(request, extra_context)


class RewardsWidget(forms.Widget):
    """The task's rewards as a table, one row per reward: name, weight, parameters (JSON), and the
    reward it is conditioned on with its threshold (GDPO Eq. 8). Two blank rows add rewards; a row
    whose name is blank is dropped."""

    EXTRA_ROWS = 2

    def value_from_datadict(self, data, files, name):
        rows, index = [], 0
        while f"{name}-{index}-name" in data:
            row = {key: (data.get(f"{name}-{index}-{key}") or "").strip()
                   for key in ("name", "weight", "params", "condition_on", "threshold")}
            if row["name"]:
                rows.append(row)
            index += 1
        return rows

    def render(self, name, value, attrs=None, renderer=None):
        rows = value if isinstance(value, list) else _loads_list(value)
        rows = [r for r in rows if isinstance(r, dict)] + [{}] * self.EXTRA_ROWS
        names = list(REWARDS)  # sorted
        options = format_html_join("", '<option value="{}"></option>', ((n,) for n in names))

        def text(value):
            return "" if value is None else value if isinstance(value, str) else json.dumps(value)

        body = format_html_join("", (
            '<tr><td><input name="{0}-{1}-name" value="{2}" list="{0}-names" size="22" aria-label="reward"></td>'
            '<td><input name="{0}-{1}-weight" value="{3}" size="5" aria-label="weight"></td>'
            '<td><input name="{0}-{1}-params" value="{4}" size="34" aria-label="parameters (JSON)"></td>'
            '<td><input name="{0}-{1}-condition_on" value="{5}" list="{0}-names" size="18" aria-label="condition on"></td>'
            '<td><input name="{0}-{1}-threshold" value="{6}" size="5" aria-label="threshold"></td></tr>'),
            ((name, i, text(r.get("name")), text(r.get("weight", 1.0) if r else ""),
              text(r.get("params", {}) if r else ""), text(r.get("condition_on")),
              text(r.get("threshold", 1.0) if r.get("condition_on") else "")) for i, r in enumerate(rows)))
        return format_html(
            '<table id="{0}-table"><thead><tr><th>reward</th><th>weight</th><th>parameters (JSON object)</th>'
            '<th>counts only if reward…</th><th>≥ threshold</th></tr></thead><tbody>{1}</tbody></table>'
            '<datalist id="{0}-names">{2}</datalist>', name, body, options)


def _loads_list(value):
    try:
        value = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return []
    return value if isinstance(value, list) else []


class RewardsField(forms.Field):
    """Turns the widget's rows into RunConfig's reward dicts; each error names the row's reward."""

    widget = RewardsWidget

    def to_python(self, value):
        if isinstance(value, str):
            value = _loads_list(value)
        rewards = []
        for row in value or []:
            if not isinstance(row, dict) or not row.get("name"):
                continue
            label = f"reward {row['name']!r}"
            reward = {"name": row["name"]}
            try:
                weight = float(row.get("weight") if row.get("weight") not in (None, "") else 1.0)
            except (TypeError, ValueError):
                raise forms.ValidationError(f"{label}: weight must be a number, e.g. 1.0.") from None
            if not math.isfinite(weight):
                raise forms.ValidationError(f"{label}: weight must be a finite number.")
            reward["weight"] = weight
            params = row.get("params") or {}
            if isinstance(params, str):
                try:
                    params = json.loads(params) if params.strip() else {}
                except ValueError as exc:
                    raise forms.ValidationError(f"{label}: parameters are not valid JSON ({exc}).") from None
            if not isinstance(params, dict):
                raise forms.ValidationError(f'{label}: parameters must be a JSON object like {{"limit": 400}}.')
            reward["params"] = params
            if row.get("condition_on"):
                reward["condition_on"] = row["condition_on"]
                try:
                    reward["threshold"] = float(row.get("threshold") if row.get("threshold") not in (None, "") else 1.0)
                except (TypeError, ValueError):
                    raise forms.ValidationError(f"{label}: threshold must be a number, e.g. 1.0.") from None
            rewards.append(reward)
        return rewards

    def prepare_value(self, value):
        return value


def _reward_params(name: str) -> str:
    """A reward's parameters with their defaults, as help text (a non-JSON default shows as its repr)."""
    return json.dumps({k: v for k, v in reward_defaults(name).items()}, default=lambda v: "…")


def _rewards_help() -> str:
    return "Registered rewards and their parameters: " + "; ".join(
        f"{name} {_reward_params(name)}" for name in REWARDS)


class TaskAdminForm(forms.ModelForm):
    # Lazy: reward plugins load when the form is shown, not when Django imports the admin.
    rewards = RewardsField(help_text=lazy(_rewards_help, str)())

    class Meta:
        model = Task
        fields = ["name", "title", "description", "program", "dataset", "corpus", "rewards"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "dataset" in self.fields:
            self.fields["dataset"].queryset = Dataset.objects.exclude(kind=Dataset.Kind.CORPUS)
            self.fields["corpus"].queryset = Dataset.objects.filter(kind=Dataset.Kind.CORPUS)

    def clean(self):
        data = super().clean()
        program, dataset, corpus = data.get("program"), data.get("dataset"), data.get("corpus")
        if program is None:
            return data
        if program.name not in PROGRAMS:
            error = program_error(program.name)
            self.add_error("program", f"program {program.name!r} is unavailable: {error}" if error else
                           f"program {program.name!r} is no longer registered in trainer.programs.")
            return data
        info = program_info(program.name)
        kind = program_dataset_kind(info)
        if dataset is None and kind is not None:
            self.add_error("dataset", f"program {program.name!r} reads a {kind} dataset; choose one.")
        elif dataset is not None and kind is None:
            self.add_error("dataset", f"program {program.name!r} generates its own examples; leave the dataset empty.")
        elif dataset is not None and dataset.kind != kind:
            self.add_error("dataset", f"program {program.name!r} reads a {kind} dataset, and {dataset.name!r} is "
                                      f"{dataset.kind}.")
        if info["needs_corpus"] and corpus is None:
            self.add_error("corpus", f"program {program.name!r} retrieves passages: choose a retrieval corpus.")
        elif corpus is not None and not info["needs_corpus"]:
            self.add_error("corpus", f"program {program.name!r} does not retrieve; leave the corpus empty.")
        if "rewards" in data:
            try:
                task_rewards_check(program.name, data["rewards"])
            except ConfigError as exc:
                self.add_error("rewards" if exc.field == "rewards" else None, str(exc))
            except ValueError as exc:
                self.add_error("rewards", str(exc))
        return data


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    """A task = dataset (+ retrieval corpus) + program + rewards, validated like a run's config."""

    form = TaskAdminForm
    list_display = ["name", "title", "program", "dataset", "corpus", "reward_list", "created_at"]
    list_filter = ["program"]
    search_fields = ["name", "title"]
    autocomplete_fields = ["program"]
    list_select_related = ["program", "dataset", "corpus"]

    @admin.display(description="rewards")
    def reward_list(self, obj):
        parts = []
        for reward in obj.rewards or []:
            text = f"{reward.get('weight', 1.0):g}×{reward.get('name')}"
            if reward.get("condition_on"):
                text += f" if {reward['condition_on']} ≥ {reward.get('threshold', 1.0):g}"
            parts.append(text)
        return " + ".join(parts)

    def save_model(self, request, obj, form, change):
        if not change and obj.created_by_id is None:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "task", "state", "attempt", "current_step", "total_steps",
                    "best_reward", "storage", "created_at", "heartbeat_at"]
    list_filter = ["state", "origin", "task__program", "owner"]

    @admin.display(description="storage", ordering="storage_bytes")
    def storage(self, obj):
        return storage_label(obj.storage_bytes)

    search_fields = ["name", "owner__username", "task__name"]
    list_select_related = ["owner", "task"]
    date_hierarchy = "created_at"
    # State changes go through Run.transition (the state machine), never a free-form edit.
    # Who trains a run decides what Cohort may do with it (webapp/runs/ingest/external.py): never edited either.
    readonly_fields = ["state", "attempt", "current_step", "last_seq", "heartbeat_at", "worker", "storage_bytes",
                       "started_at", "finished_at", "created_at", "origin", "external_id"]


@admin.register(StepMetric)
class StepMetricAdmin(admin.ModelAdmin):
    list_display = ["run", "attempt", "step", "seq", "created_at"]
    list_filter = ["attempt"]
    search_fields = ["run__name"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]


class ModuleCallInline(admin.TabularInline):
    model = ModuleCall
    extra = 0
    fields = ["position", "module", "invocation_index", "parsed_ok", "specific_reward", "propagated_reward",
              "advantage"]
    readonly_fields = fields
    show_change_link = True


@admin.register(Rollout)
class RolloutAdmin(admin.ModelAdmin):
    list_display = ["id", "run", "step", "index", "example_id", "teacher", "fork_point", "total_reward", "failed"]
    list_filter = ["failed", "attempt"]
    search_fields = ["example_id", "run__name"]
    list_select_related = ["run"]
    raw_id_fields = ["run", "parent"]
    inlines = [ModuleCallInline]


@admin.register(ModuleCall)
class ModuleCallAdmin(admin.ModelAdmin):
    list_display = ["id", "rollout", "position", "module", "invocation_index", "parsed_ok", "specific_reward",
                    "propagated_reward", "advantage"]
    list_filter = ["module", "parsed_ok"]
    search_fields = ["module"]  # texts are compressed per example (webapp/runs/ingest/texts.py): not searchable in SQL
    raw_id_fields = ["rollout"]
    exclude = ["prompt", "messages", "completion"]
    readonly_fields = ["prompt_text", "completion_text"]

    def get_object(self, request, object_id, from_field=None):
        call = super().get_object(request, object_id, from_field)
        if call is not None:
            fill_call_texts([call])
        return call

    @admin.display(description="prompt")
    def prompt_text(self, obj):
        return obj.prompt

    @admin.display(description="completion")
    def completion_text(self, obj):
        return obj.completion


class GroupMemberInline(admin.TabularInline):
    model = GroupMember
    extra = 0
    raw_id_fields = ["call"]


@admin.register(Group)
class GroupAdmin(admin.ModelAdmin):
    list_display = ["id", "run", "step", "module", "invocation_index", "kind", "size", "reward_mean",
                    "reward_var", "similarity"]
    list_filter = ["kind", "module"]
    search_fields = ["module", "example_id"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]
    inlines = [GroupMemberInline]


@admin.register(GroupMember)
class GroupMemberAdmin(admin.ModelAdmin):
    list_display = ["id", "group", "position", "call", "padded", "duplicated", "reward", "advantage"]
    list_filter = ["padded", "duplicated"]
    raw_id_fields = ["group", "call"]
