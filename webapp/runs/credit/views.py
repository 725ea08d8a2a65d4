"""The run page's Credit section as an HTML fragment the page loads after it renders (the window's
aggregates cost more than the page should wait for): `?from=&to=` pick the two steps of the change."""

from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.runs.access import link_readable, run_read
from webapp.runs.credit import report as credit
from webapp.runs.params import BadParam, int_param


def change_steps(request) -> tuple[int | None, int | None]:
    """`from` and `to`: optional positive step numbers (BadParam otherwise)."""
    return int_param(request, "from", low=1), int_param(request, "to", low=1)


@require_GET
@link_readable
def run_credit_fragment(request, run_id: int):
    run = run_read(request, run_id)
    try:
        from_step, to_step = change_steps(request)
        found = credit.run_credit(run, from_step=from_step, to_step=to_step)
    except BadParam as exc:
        return render(request, "runs/_credit.html", {"run": run, "error": str(exc)}, status=400)
    return render(request, "runs/_credit.html", {"run": run, "report": found, "scope": "run"})
