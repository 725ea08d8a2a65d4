from django.contrib.auth.decorators import login_required
from django.urls import path, re_path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView

from webapp.api import pages, views

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
    # Last: any other address under /api/ is the API's JSON 404 (401 anonymous), not an HTML page.
    re_path(r"^(?P<rest>[\s\S]*)$", views.unknown, name="unknown"),
]
