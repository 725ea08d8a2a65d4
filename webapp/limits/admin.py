from django.contrib import admin

from webapp.limits.models import AllowedModel, LimitOverride


@admin.register(LimitOverride)
class LimitOverrideAdmin(admin.ModelAdmin):
    list_display = ("__str__", "active_runs", "queued_runs", "tokens_per_run", "max_context_length")
    autocomplete_fields = ()
    raw_id_fields = ("user",)


@admin.register(AllowedModel)
class AllowedModelAdmin(admin.ModelAdmin):
    list_display = ("value", "kind", "note", "created")
    list_filter = ("kind",)
    search_fields = ("value", "note")
