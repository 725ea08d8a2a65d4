from django.contrib.auth.decorators import login_required
from django.urls import path, re_path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView

from webapp.api import examples_views, logging_views, pages, sweep_views, views

app_name = "api"

urlpatterns = [
    path("schema/", SpectacularJSONAPIView.as_view(), name="schema"),
    path("docs/", login_required(SpectacularSwaggerView.as_view(url_name="api:schema")), name="docs"),
    path("tokens/", pages.token_list, name="tokens"),
    path("tokens/<int:token_id>/revoke", pages.token_revoke_view, name="token_revoke"),
    path("runs/", views.run_list, name="runs"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("runs/<int:run_id>/metrics/", views.run_metrics, name="metrics"),
    path("runs/<int:run_id>/adapter/", views.run_adapter, name="adapter"),
    path("runs/<int:run_id>/steps/<int:step>/rollouts/", views.step_rollouts, name="rollouts"),
    path("runs/<int:run_id>/steps/<int:step>/groups/", views.step_groups, name="groups"),
    # Sweeps (webapp/api/sweep_views.py): launched as the launch form's Sweep button launches them.
    path("sweeps/", sweep_views.sweep_list, name="sweeps"),
    path("sweeps/<int:sweep_id>/", sweep_views.sweep_detail, name="sweep"),
    # The logging API: runs trained elsewhere (webapp/api/logging_views.py).
    path("external/runs/", logging_views.external_run_create, name="external_runs"),
    path("runs/<int:run_id>/steps/", logging_views.run_steps_log, name="steps"),
    path("runs/<int:run_id>/finish/", logging_views.run_finish, name="finish"),
    # Where two runs part (webapp/api/examples_views.py): the part-ways table.
    path("examples/diff/", examples_views.examples_diff, name="examples_diff"),
    # Last: any other address under /api/ is the API's JSON 404 (401 anonymous), not an HTML page.
    re_path(r"^(?P<rest>[\s\S]*)$", views.unknown, name="unknown"),
]
