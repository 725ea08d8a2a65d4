from django.urls import path

from webapp.alerts import views

app_name = "alerts"

urlpatterns = [
    path("", views.alert_list, name="list"),
    path("seen", views.alert_mark_seen, name="mark_seen"),
    path("rules/", views.rule_defaults, name="rules"),
    path("runs/<int:run_id>/rules", views.run_rule_add, name="run_rule_add"),
    path("rules/<int:rule_id>/delete", views.run_rule_delete, name="rule_delete"),
]
