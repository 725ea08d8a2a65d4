"""The launch form's Sweep button (registered in webapp/sweeps/apps.py through webapp/runs/hooks.py):
the form's settings are the sweep's base, its `sweep__<field>` entries the search space, and the
sweep's settings fieldset the rest. Refused as a whole, each reason beside its input."""

from django.contrib import messages
from django.shortcuts import redirect

from webapp.sweeps.forms import SweepSettingsForm, add_refusal_errors, posted_space
from webapp.sweeps.plan import SweepRefused
from webapp.sweeps.services import sweep_create
from webapp.sweeps.spec_input import space_input_errors


def sweep_offered(task) -> bool:
    """Any task can be swept: the space is made of RunConfig settings, which every task's runs have."""
    return True


def sweep_launch(request, form):
    """`runs:new` with the Sweep button and a valid form: the sweep's page, or None after adding the
    errors (the launch page shows the form again, 400). The settings form rides on the launch form
    (`form.sweep_settings`) so the page shows its values and errors."""
    settings = SweepSettingsForm(request.POST)
    form.sweep_settings = settings
    space = posted_space(request.POST)
    if not settings.is_valid():
        return None
    unstorable = space_input_errors(space)  # a NUL, a number past its column
    if unstorable:
        add_refusal_errors(form, settings, unstorable)
        return None
    cleaned = form.cleaned_data
    try:
        sweep = sweep_create(cleaned["launch"], spec=settings.spec(space), name=cleaned["name"], tags=cleaned["tags"],
                             notes=cleaned["notes"])
    except SweepRefused as refused:
        add_refusal_errors(form, settings, refused.errors)
        return None
    trials = sweep.trials.count()
    messages.success(request, f"Sweep {sweep.pk} is running: {trials} configuration{'s' if trials != 1 else ''} "
                              f"of {sweep.n_trials} queued, {sweep.seeds} run{'s' if sweep.seeds != 1 else ''} each.",
                     extra_tags="sweep-queued")
    return redirect("sweeps:detail", sweep_id=sweep.pk)
