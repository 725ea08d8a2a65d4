"""The Experiment page: a task's Table 1 (MMGRPO paper), as its runs store their evaluations."""

from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from webapp.experiments.selectors import experiment_get_for_user, experiment_table
from webapp.experiments.services import experiment_runs


@require_GET
def experiment_detail(request, experiment_id: int):
    experiment = experiment_get_for_user(request.user, experiment_id)
    seeds, rows = experiment_table(experiment)
    runs = experiment_runs(experiment)
    compare = reverse("runs:compare") + "?" + "&".join(f"runs={r.pk}" for r in runs) + "&metrics=eval/reward/mean"
    return render(request, "experiments/detail.html", {
        "experiment": experiment, "seeds": seeds, "rows": rows, "runs": runs, "compare_url": compare,
        "active": any(r.is_active for r in runs),
    })
