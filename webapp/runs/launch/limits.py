"""The launch limits that count or look up runs: checked at launch (the form, the API, `launch_run`,
each run of an experiment) and again when a worker claims the run.

The limits app holds the pure parts (a user's effective limits, the per-run budget, the model
allow-list, the paths a run may read: webapp/limits/); what needs the runs themselves (how many a user
has active or queued, whose run folder a program_state lies in, failing a queued run at claim) is
here, so the limits app never imports the runs app.
"""

from __future__ import annotations

from django.utils import timezone

from trainer.config import RunConfig
from webapp.limits.services import LimitError, limits_for_user, model_errors, per_run_errors
from webapp.runs.models import Run
from webapp.runs.selectors import run_list_for_user


def user_may_read_run(user, run_id: int) -> bool:
    """Whether `user` may read the folder of run `run_id`: one they may see (their own; staff any)."""
    return run_list_for_user(user).filter(pk=run_id).exists()


def limits_check_launch(user, config: RunConfig) -> list[LimitError]:
    """Everything that stops `user` from queueing one more run of `config` (empty: allowed)."""
    refused = model_errors(user, config, may_read_run=user_may_read_run)
    if user.is_staff:
        return refused
    limits = limits_for_user(user)
    errors = refused + per_run_errors(limits, config) + _active_runs_errors(user, limits)
    runs = Run.objects.filter(owner=user)
    queued = runs.filter(state=Run.State.QUEUED).count()
    if queued >= limits["queued_runs"]:
        errors.append(LimitError(None, f"You already have {queued} queued runs; your limit is "
                                       f"{limits['queued_runs']} queued runs at once."))
    return errors


def limits_over_for_staff(user, config: RunConfig) -> list[LimitError]:
    """The per-run limits (tokens, context length) that `config` is over for a staff user, whom no limit
    stops: what the launch page asks them to confirm, since `steps = 1000000000` is more often a typo
    than a plan. Empty for a non-staff user (limits_check_launch refuses them). The run counts are left
    out: they share the workers between users, and staff, who run the queue, are not nagged over them."""
    if not user.is_staff:
        return []
    return per_run_errors(limits_for_user(user), config)


def limits_check_external(user) -> list[LimitError]:
    """What stops `user` from starting one more run trained elsewhere (webapp/runs/ingest/external.py): only
    the active-run count applies, and runs trained elsewhere count in it as Cohort's do. Such a run
    is created running, so it never waits in the queue, and Cohort generates no token of it."""
    if user.is_staff:
        return []
    return _active_runs_errors(user, limits_for_user(user))


def _active_runs_errors(user, limits: dict[str, int]) -> list[LimitError]:
    active = Run.objects.filter(owner=user, state__in=Run.ACTIVE_STATES).count()
    if active < limits["active_runs"]:
        return []
    return [LimitError(None, f"You already have {active} active runs; your limit is "
                             f"{limits['active_runs']} (cancel one or wait for it to finish).")]


def limits_check_claim(user, config: RunConfig) -> list[LimitError]:
    """The per-run budget (tokens, context) re-checked when a worker claims the run: limits may have
    changed since launch, and so may the model allow-list. Run counts are not re-checked (the claimed
    run would count itself)."""
    refused = model_errors(user, config, may_read_run=user_may_read_run)
    if user.is_staff:
        return refused
    return refused + per_run_errors(limits_for_user(user), config)


def limits_fail_run_over_budget(run: Run) -> bool:
    """At claim time: a queued run whose owner is now over a per-run limit goes queued -> failed with
    the reason in `error` (compare-and-set, so a concurrent cancel wins). True when it was refused.
    A run trained elsewhere holds no RunConfig and is never queued: it is never refused here."""
    if run.is_external:
        return False
    try:
        config = RunConfig.from_dict(run.config)
    except ValueError:
        return False  # an unreadable config fails later in the trainer, with its own message
    errors = limits_check_claim(run.owner, config)
    if not errors:
        return False
    reason = "Refused at start (launch limits, the model allow-list or a file's permission changed): " + " ".join(e.message for e in errors)
    run.transition(Run.State.FAILED, error=reason, finished_at=timezone.now())
    return True
