from django.urls import path

from webapp.projects import views

app_name = "projects"

urlpatterns = [
    path("", views.project_list, name="list"),
    path("<str:name>/members", views.project_members_page, name="members"),
    path("<str:name>/members/<int:user_id>/role", views.project_member_role, name="member_role"),
    path("<str:name>/members/<int:user_id>/remove", views.project_member_remove, name="member_remove"),
]
