"""Launch limits: the effective limits of a user, the per-run budget and the model and path checks.

Defaults come from settings (COHORT_LIMIT_*); a `LimitOverride` row for the user wins over its
groups' rows, and among several groups the most generous value wins. Staff bypass every limit.
The checks run at launch and at claim time, which count and look up runs, live in the runs app
(webapp/runs/launch/limits.py: `limits_check_launch`, `limits_check_claim`,
`limits_fail_run_over_budget`); they call these pure parts.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from trainer.config import RunConfig
from webapp.limits.model_allowlist import model_refusal
from webapp.limits.models import LIMIT_FIELDS, LimitOverride
from webapp.limits.user_paths import RunReadable, program_state_refusal


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


def per_run_errors(limits: dict[str, int], config: RunConfig) -> list[LimitError]:
    """The per-run budget (tokens, context length) of `config` under `limits`."""
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


def model_errors(user, config: RunConfig, *, may_read_run: RunReadable) -> list[LimitError]:
    """The model allow-list's verdict and the files the run reads (webapp/limits/user_paths.py); they
    apply to staff too (local paths have safety rules for all). `may_read_run(user, run_id)` says
    whether a program_state in a run's folder is the user's to read."""
    errors = []
    refused = model_refusal(user, config.model)
    if refused:
        errors.append(LimitError("model", refused))
    refused = (program_state_refusal(user, config.program_state, may_read_run=may_read_run)
               if config.program_state else None)
    if refused:
        errors.append(LimitError("program_state", refused))
    return errors
