from django.urls import path

from webapp.runs import views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("runs/new", views.run_new, name="new"),
    path("runs/<int:run_id>/", views.run_detail, name="detail"),
    path("runs/<int:run_id>/cancel", views.run_cancel_view, name="cancel"),
    path("runs/<int:run_id>/resume", views.run_resume_view, name="resume"),
    path("runs/<int:run_id>/metrics.json", views.run_metrics, name="metrics"),
]
