"""`{% run_alerts run %}`: the alerts panel of a run page (templates/alerts/run_alerts.html)."""

from django import template

from webapp.alerts.forms import RuleForm
from webapp.alerts.selectors import alerts_for_run, rules_of_user_for_run

register = template.Library()


@register.inclusion_tag("alerts/run_panel.html", takes_context=True)
def run_alerts(context, run):
    """The run's alerts, the viewer's rules on it, and the form to add one."""
    user = context["request"].user
    return {
        "run": run, "alerts": alerts_for_run(run), "rules": rules_of_user_for_run(user, run),
        "form": RuleForm(user=user, initial={"kind": "nonfinite", "enabled": True}, auto_id="alert_%s"),
        "csrf_token": context.get("csrf_token"),
    }
