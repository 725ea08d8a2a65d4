from django.urls import path

from webapp.runs import import_views, views
from webapp.runs.charts import views as compare_views
from webapp.runs.credit import views as credit_views
from webapp.runs.examples import across_views, partways_views
from webapp.runs.export import views as export_views
from webapp.runs.inspector import history_views
from webapp.runs.replay import views as replay_views
from webapp.runs.table import views as table_views

app_name = "runs"

urlpatterns = [
    path("", table_views.run_list, name="list"),
    path("runs/", table_views.run_list, name="list_under_runs"),  # every run lives under /runs/<id>/
    path("runs/new", views.run_new, name="new"),
    path("runs/import", import_views.runs_import, name="import"),
    path("runs/<int:run_id>/", views.run_detail, name="detail"),
    path("runs/<int:run_id>/cancel", views.run_cancel_view, name="cancel"),
    path("runs/<int:run_id>/resume", views.run_resume_view, name="resume"),
    path("runs/<int:run_id>/metrics.json", views.run_metrics, name="metrics"),
    path("runs/<int:run_id>/heatmap.json", views.run_heatmap, name="heatmap"),
    path("runs/<int:run_id>/timeline.json", views.run_timeline_data, name="timeline"),
    path("runs/<int:run_id>/steps/<int:step>/", views.run_step, name="step"),
    path("runs/<int:run_id>/credit", credit_views.run_credit_fragment, name="credit"),
    path("runs/<int:run_id>/steps/<int:step>/trajectories", views.run_trajectories, name="trajectories"),
    path("runs/<int:run_id>/groups/<int:group_id>/", views.run_group, name="group"),
    path("runs/<int:run_id>/examples/", history_views.example_history, name="example_history_query"),
    path("runs/<int:run_id>/examples/<path:example_id>/", history_views.example_history, name="example_history"),
    path("runs/<int:run_id>/calls/<int:call_id>/prompt", views.run_call_prompt, name="call_prompt"),
    path("runs/<int:run_id>/calls/<int:call_id>/replay", replay_views.replay_start, name="replay_start"),
    path("runs/<int:run_id>/calls/<int:call_id>/replays/", replay_views.call_replays, name="call_replays"),
    path("runs/<int:run_id>/export/metrics.csv", export_views.run_export_metrics, name="export_metrics"),
    path("runs/<int:run_id>/export/rollouts.jsonl", export_views.run_export_rollouts, name="export_rollouts"),
    path("runs/<int:run_id>/adapter.zip", export_views.run_adapter_download, name="adapter"),
    path("runs/compare", compare_views.run_compare, name="compare"),
    path("runs/examples/across", across_views.examples_across, name="examples_across"),
    path("runs/examples/partways", partways_views.examples_partways, name="examples_partways"),
    path("runs/actions", table_views.runs_action, name="actions"),
    path("runs/<int:run_id>/edit", table_views.run_edit, name="edit"),
    path("runs/<int:run_id>/archive", table_views.run_archive_view, name="archive"),
    path("runs/<int:run_id>/unarchive", table_views.run_unarchive_view, name="unarchive"),
]
