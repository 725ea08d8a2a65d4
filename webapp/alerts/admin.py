from django.contrib import admin

from webapp.alerts.models import Alert, AlertRule


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ("owner", "kind", "run", "enabled", "email", "webhook_url")
    list_filter = ("kind", "enabled", "email")
    raw_id_fields = ("owner", "run")


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("fired_at", "kind", "run", "step", "resolved_at", "seen", "webhook_status", "webhook_attempts")
    list_filter = ("kind", "seen", "webhook_status")
    raw_id_fields = ("rule", "run")
    date_hierarchy = "fired_at"
