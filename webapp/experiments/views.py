"""The Experiment page: a task's Table 1 (MMGRPO paper), as its runs store their evaluations; and what
the experiments add to the run pages (registered in webapp/experiments/apps.py): the launch form's
"Launch experiment" button, and the links from a run's page and the compare page to its experiments."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from webapp.experiments.selectors import experiment_get_for_user, experiment_table, experiments_of
from webapp.experiments.services import ExperimentRefused, experiment_create, experiment_runs


@require_GET
def experiment_detail(request, experiment_id: int):
    experiment = experiment_get_for_user(request.user, experiment_id)
    seeds, rows = experiment_table(experiment)
    reward_names = sorted({name for row in rows for name in row.rewards})
    baseline = rows[0].mean if rows else None
    table = [{"row": row, "rewards": [row.rewards.get(name) for name in reward_names],
              "gain": row.mean - baseline if row.mean is not None and baseline is not None and i else None}
             for i, row in enumerate(rows)]
    runs = experiment_runs(experiment)
    # Its runs on the compare page: each kind's seeds as one mean curve with its band.
    compare = reverse("runs:compare") + f"?experiment={experiment.pk}&metrics=eval/reward/mean"
    return render(request, "experiments/detail.html", {
        "experiment": experiment, "seeds": seeds, "table": table, "reward_names": reward_names, "runs": runs, "compare_url": compare,
        "active": any(r.is_active for r in runs),
    })


def experiment_launch(request, form):
    """The launch form's second button (`runs:new`, a valid form): the task's Table 1, N seeds of the
    form's settings, queued as a whole; or refused as a whole, beside the button (None: the launch
    page shows the form again)."""
    try:
        seeds = int(request.POST.get("experiment_seeds", "2"))
    except ValueError:
        seeds = 0  # refused below with the allowed range
    try:
        experiment = experiment_create(form.cleaned_data["launch"], seeds=seeds, name=form.cleaned_data["name"])
    except ExperimentRefused as exc:
        form.add_error(None, f"The experiment was not launched: {exc}")
        return None
    messages.success(request, f"Experiment {experiment.pk} is queued: {2 * experiment.seeds} runs.")
    return redirect("experiments:detail", experiment_id=experiment.pk)


def runs_experiments_context(runs) -> dict:
    """What the run page (one run) and the compare page (the chosen runs) show of their experiments."""
    return {"experiments": experiments_of(runs)}
