from django.contrib import admin

from webapp.prefs.models import UserPreference


@admin.register(UserPreference)
class UserPreferenceAdmin(admin.ModelAdmin):
    list_display = ("user", "key", "updated_at")
    search_fields = ("user__username", "key")
