from django.contrib import admin

from webapp.limits.models import LimitOverride


@admin.register(LimitOverride)
class LimitOverrideAdmin(admin.ModelAdmin):
    list_display = ("__str__", "active_runs", "queued_runs", "tokens_per_run", "max_context_length")
    autocomplete_fields = ()
    raw_id_fields = ("user",)
