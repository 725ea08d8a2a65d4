from django.contrib import admin
from django.utils import timezone

from webapp.api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens for inspection and revocation only: a key exists in clear only on the page that made
    it, so the admin cannot create one, and shows the hash read-only."""

    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = ["user", "key_hash", "prefix", "created_at", "last_used_at", "revoked_at"]
    fields = ["name", "user", "prefix", "key_hash", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        n = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {n} token(s).")
