from django.contrib import admin

from webapp.projects.models import Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "title", "personal_of", "created_at"]
    search_fields = ["name", "title"]
    inlines = [MembershipInline]
