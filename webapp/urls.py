from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from webapp.health import healthz
from webapp.scheduling.slurm import views as slurm_views
from webapp.sweeps.views import studies

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("alerts/", include("webapp.alerts.urls")),
    path("experiments/", include("webapp.experiments.urls")),
    path("sweeps/", include("webapp.sweeps.urls")),
    path("studies/", studies, name="studies"),
    # A Slurm job posts its trainer's events with its run's job token (webapp/scheduling/slurm/views.py);
    # before the API's own addresses, whose last answers every other /api/ address with a 404.
    path("api/runs/<int:run_id>/events/", slurm_views.job_events, name="slurm_job_events"),
    path("api/", include("webapp.api.urls")),
    path("queue/", include("webapp.scheduling.urls")),
    path("projects/", include("webapp.projects.urls")),
    path("users/", include("webapp.people.urls")),  # staff create accounts (webapp/people)
    path("share/", include("webapp.sharing.urls")),
    path("docs/", include("webapp.manual.urls")),  # the manual, public (webapp/manual/views.py)
    path("", include("webapp.prefs.urls")),
    path("", include("webapp.runs.urls")),
]
