"""Alert pages: the list, "mark all seen", the user's default rules, and rules set on one run."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.alerts.forms import DefaultRuleForm, RuleForm
from webapp.alerts.models import Kind
from webapp.alerts.selectors import LIST_LIMIT, alerts_for_user, rule_get_for_user
from webapp.alerts.services import alerts_mark_seen, rule_save, rules_defaults_for
from webapp.runs.selectors import run_get_for_user


@require_GET
def alert_list(request):
    alerts = alerts_for_user(request.user)[:LIST_LIMIT]
    return render(request, "alerts/list.html", {"alerts": alerts, "limit": LIST_LIMIT})


@require_POST
def alert_mark_seen(request):
    count = alerts_mark_seen(request.user)
    messages.success(request, f"{count} alert{'' if count == 1 else 's'} marked seen.")
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        target = reverse("alerts:list")
    return redirect(target)


@require_http_methods(["GET", "POST"])
def rule_defaults(request):
    """One row per kind: the rules that watch every run of the user unless a run has its own."""
    rules = rules_defaults_for(request.user)
    data = request.POST if request.method == "POST" else None
    forms = [DefaultRuleForm(data, user=request.user, kind=rule.kind, initial=RuleForm.initial_for(rule))
             for rule in rules]
    if data is not None:
        valid = all(form.is_valid() for form in forms)
        for form in forms:
            if valid and form.cleaned_data["kind"] != form.prefix:
                form.add_error(None, "This row's kind was changed; reload the page.")
                valid = False
        if valid:
            for form in forms:
                _save(request.user, form, run=None)
            messages.success(request, "Default alert rules saved.")
            return redirect("alerts:rules")
        status = 400
    else:
        status = 200
    return render(request, "alerts/rules.html", {"rows": list(zip(rules, forms, strict=True))}, status=status)


@require_http_methods(["GET", "POST"])
def run_rule_add(request, run_id: int):
    """Adds (or replaces) the user's rule of one kind on a run; errors come back next to the fields."""
    run = run_get_for_user(request.user, run_id)
    if request.method == "POST":
        form = RuleForm(request.POST, user=request.user)
        if form.is_valid():
            rule = _save(request.user, form, run=run)
            messages.success(request, f"Alert rule saved: {rule.get_kind_display().lower()} on this run.")
            return redirect(reverse("runs:detail", args=[run.pk]) + "#alerts")
        status = 400
    else:
        form, status = RuleForm(user=request.user, initial={"kind": request.GET.get("kind", Kind.NONFINITE)}), 200
    return render(request, "alerts/run_rule_form.html", {"run": run, "form": form}, status=status)


@require_POST
def run_rule_delete(request, rule_id: int):
    """Removes one of the user's run rules: the run falls back to the defaults for that kind."""
    rule = rule_get_for_user(request.user, rule_id)
    if rule is None or rule.run is None:
        raise Http404("No such rule on a run.")
    run_id = rule.run_id
    rule.delete()
    messages.success(request, "Alert rule removed; the run follows your defaults for that kind again.")
    return redirect(reverse("runs:detail", args=[run_id]) + "#alerts")


def _save(user, form: RuleForm, *, run):
    data = form.cleaned_data
    return rule_save(owner=user, kind=data["kind"], run=run, params=data["params"], email=data["email"],
                     webhook_url=data["webhook_url"], enabled=data["enabled"])
