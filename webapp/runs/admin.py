from django.contrib import admin

from webapp.runs.models import Group, GroupMember, ModuleCall, Program, Rollout, Run, StepMetric, Task


@admin.register(Program)
class ProgramAdmin(admin.ModelAdmin):
    list_display = ["name", "title", "module_list", "is_active", "synced_at"]
    list_filter = ["is_active"]
    search_fields = ["name", "title"]
    readonly_fields = ["synced_at"]

    @admin.display(description="modules")
    def module_list(self, obj):
        return " → ".join(obj.modules)


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["name", "title", "program", "dataset", "created_at"]
    list_filter = ["program"]
    search_fields = ["name", "title"]
    autocomplete_fields = ["program"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "task", "state", "attempt", "current_step", "total_steps",
                    "best_reward", "created_at", "heartbeat_at"]
    list_filter = ["state", "task__program", "owner"]
    search_fields = ["name", "owner__username", "task__name"]
    list_select_related = ["owner", "task"]
    date_hierarchy = "created_at"
    # State changes go through Run.transition (the state machine), never a free-form edit.
    readonly_fields = ["state", "attempt", "current_step", "last_seq", "heartbeat_at", "worker",
                       "started_at", "finished_at", "created_at"]


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
    search_fields = ["module", "completion"]
    raw_id_fields = ["rollout"]


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
