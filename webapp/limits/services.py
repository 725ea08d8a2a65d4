"""Launch limits: the effective limits of a user and the check run at launch and at claim time.

Defaults come from settings (COHORT_LIMIT_*); a `LimitOverride` row for the user wins over its
groups' rows, and among several groups the most generous value wins. Staff bypass every limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from trainer.config import RunConfig
from webapp.limits.model_allowlist import model_refusal
from webapp.limits.models import LIMIT_FIELDS, LimitOverride
from webapp.limits.user_paths import program_state_refusal


@dataclass(frozen=True)
class LimitError:
    """One refused limit: `field` is the RunConfig/form field to show it beside (None: the whole form)."""

    field: str | None
    message: str


def _defaults() -> dict[str, int]:
    return {"active_runs": settings.COHORT_LIMIT_ACTIVE_RUNS_PER_USER,
            "queued_runs": settings.COHORT_LIMIT_QUEUED_RUNS_PER_USER,
            "tokens_per_run": settings.COHORT_LIMIT_TOKENS_PER_RUN,
            "max_context_length": settings.COHORT_LIMIT_MAX_CONTEXT_LENGTH}


def limits_for_user(user) -> dict[str, int]:
    """The four effective limits of `user` (user override > most generous group override > default)."""
    limits = _defaults()
    own = LimitOverride.objects.filter(user=user).first()
    groups = list(LimitOverride.objects.filter(group__in=user.groups.all()))
    for name in LIMIT_FIELDS:
        if own is not None and getattr(own, name) is not None:
            limits[name] = getattr(own, name)
            continue
        values = [getattr(g, name) for g in groups if getattr(g, name) is not None]
        if values:
            limits[name] = max(values)
    return limits


def run_token_budget(config: RunConfig) -> int:
    """Most tokens a run can generate: steps x examples_per_step x rollouts_per_example x max_new_tokens."""
    return config.steps * config.examples_per_step * config.rollouts_per_example * config.max_new_tokens


def _per_run_errors(limits: dict[str, int], config: RunConfig) -> list[LimitError]:
    errors = []
    tokens = run_token_budget(config)
    if tokens > limits["tokens_per_run"]:
        message = (f"This run would generate up to {tokens:,} tokens (steps x examples x rollouts x "
                   f"max_new_tokens); your limit is {limits['tokens_per_run']:,}.")
        # The form shows it beside whichever factor is set (steps is the usual one to lower).
        errors.append(LimitError("steps", message))
    if config.max_context_length > limits["max_context_length"]:
        errors.append(LimitError("max_context_length",
                                 f"max_context_length {config.max_context_length:,} is over your limit of "
                                 f"{limits['max_context_length']:,}."))
    return errors


def _model_errors(user, config: RunConfig) -> list[LimitError]:
    """The model allow-list's verdict and the files the run reads (webapp/limits/user_paths.py); they
    apply to staff too (local paths have safety rules for all)."""
    errors = []
    refused = model_refusal(user, config.model)
    if refused:
        errors.append(LimitError("model", refused))
    refused = program_state_refusal(user, config.program_state) if config.program_state else None
    if refused:
        errors.append(LimitError("program_state", refused))
    return errors


def limits_check_launch(user, config: RunConfig) -> list[LimitError]:
    """Everything that stops `user` from queueing one more run of `config` (empty: allowed)."""
    model_errors = _model_errors(user, config)
    if user.is_staff:
        return model_errors
    from webapp.runs.models import Run  # the runs app imports this module at claim time

    limits = limits_for_user(user)
    errors = model_errors + _per_run_errors(limits, config)
    runs = Run.objects.filter(owner=user)
    active = runs.filter(state__in=Run.ACTIVE_STATES).count()
    if active >= limits["active_runs"]:
        errors.append(LimitError(None, f"You already have {active} active runs; your limit is "
                                       f"{limits['active_runs']} (cancel one or wait for it to finish)."))
    queued = runs.filter(state=Run.State.QUEUED).count()
    if queued >= limits["queued_runs"]:
        errors.append(LimitError(None, f"You already have {queued} queued runs; your limit is "
                                       f"{limits['queued_runs']} queued runs at once."))
    return errors


def limits_check_claim(user, config: RunConfig) -> list[LimitError]:
    """The per-run budget (tokens, context) re-checked when a worker claims the run: limits may have
    changed since launch, and so may the model allow-list. Run counts are not re-checked (the claimed
    run would count itself)."""
    model_errors = _model_errors(user, config)
    if user.is_staff:
        return model_errors
    return model_errors + _per_run_errors(limits_for_user(user), config)


def limits_fail_run_over_budget(run) -> bool:
    """At claim time: a queued run whose owner is now over a per-run limit goes queued -> failed with
    the reason in `error` (compare-and-set, so a concurrent cancel wins). True when it was refused."""
    from django.utils import timezone

    from webapp.runs.models import Run

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
