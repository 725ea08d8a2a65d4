from django.urls import path

from webapp.api import pages, views

app_name = "api"

urlpatterns = [
    path("tokens/", pages.token_list, name="tokens"),
    path("tokens/<int:token_id>/revoke", pages.token_revoke_view, name="token_revoke"),
    path("runs/", views.run_list, name="runs"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("runs/<int:run_id>/metrics/", views.run_metrics, name="metrics"),
    path("runs/<int:run_id>/steps/<int:step>/rollouts/", views.step_rollouts, name="rollouts"),
    path("runs/<int:run_id>/steps/<int:step>/groups/", views.step_groups, name="groups"),
]
