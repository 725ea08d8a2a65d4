"""Write-side operations on alerts: evaluating rules, firing and resolving episodes, saving rules.

Three entry points evaluate rules, each called after the data it reads is committed:

- `evaluate_step_metrics(run, rows)`: from the ingest (webapp/runs/ingest/store.py), for `nonfinite` and
  `reward_collapse`, on the StepMetric rows just stored;
- `on_run_state(run)`: after every run transition (the `run_state_changed` signal), for
  `finished` (succeeded), `failed` and `cancelled`;
- `check_stalled()`: from the reaper's beat task (workers/tasks.py), for `stalled`.

Each fires at most one open alert per (rule, run) (the partial unique constraint on Alert) and
resolves it when its condition clears. Delivery (email, webhook) starts after commit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from webapp.alerts.delivery import alert_deliver
from webapp.alerts.models import Alert, AlertRule, Kind
from webapp.projects.models import Membership
from webapp.projects.services import personal_project_ensure
from webapp.runs.models import Run, StepMetric

log = logging.getLogger(__name__)

# Keys of a step's metrics whose value null means the trainer computed NaN or inf: the trainer puts
# them in a step's metrics only after an update, always as a float, and its event log writes a
# non-finite float as null (trainer.rollouts.trajectory.jsonable), as the ingest stores it (_clean_metrics).
NONFINITE_KEYS = ("loss", "grad_norm")
ZERO_VAR_KEY = "zero_var_share"
STEP_KINDS = (Kind.NONFINITE, Kind.REWARD_COLLAPSE)
STATE_KINDS = {Kind.FINISHED: Run.State.SUCCEEDED, Kind.FAILED: Run.State.FAILED, Kind.CANCELLED: Run.State.CANCELLED}
# The rules every user has until they change them on /alerts/rules/: in-app only.
DEFAULT_ENABLED = frozenset({Kind.NONFINITE, Kind.FAILED})
FINAL_STATES = frozenset({Run.State.SUCCEEDED, Run.State.FAILED, Run.State.CANCELLED})


# --- rules ------------------------------------------------------------------------------------


def rules_defaults_for(user) -> list[AlertRule]:
    """The user's default rules, one per kind, created on first use (nonfinite and failed enabled), in
    their personal project: they are the user's own settings, for the runs they launch in any project."""
    rules = list(AlertRule.objects.filter(owner=user, run__isnull=True))
    if len(rules) < len(Kind):
        have = {r.kind for r in rules}
        project = personal_project_ensure(user)
        # ignore_conflicts: two processes creating the defaults at once both succeed.
        AlertRule.objects.bulk_create(
            [AlertRule(owner=user, project=project, kind=kind, enabled=kind in DEFAULT_ENABLED)
             for kind in Kind if kind not in have],
            ignore_conflicts=True)
        rules = list(AlertRule.objects.filter(owner=user, run__isnull=True))
    order = list(Kind)
    return sorted(rules, key=lambda r: order.index(r.kind))


def rules_for_run(run: Run, kinds: Sequence[str] | None = None) -> list[AlertRule]:
    """The enabled rules that watch `run`: the owner's defaults, each replaced by the owner's rule of
    the same kind for this run, plus the rules other users set on it; each only while its owner still
    reads the run (a member of its project, or staff), so nobody is told about a run they cannot open."""
    rules_defaults_for(run.owner)
    rules = AlertRule.objects.filter(Q(run=run) | Q(run__isnull=True, owner_id=run.owner_id)).select_related("owner")
    if kinds is not None:
        rules = rules.filter(kind__in=list(kinds))
    rules = list(rules)
    overridden = {(r.owner_id, r.kind) for r in rules if r.run_id is not None}
    readers = set(Membership.objects.filter(project_id=run.project_id).values_list("user_id", flat=True))
    return [
        r for r in rules
        if r.enabled
        and (r.run_id is not None or (r.owner_id, r.kind) not in overridden)
        and (r.owner_id in readers or r.owner.is_staff)
    ]


def rule_save(*, owner, kind: str, run: Run | None, params: dict[str, Any], email: bool, webhook_url: str,
              enabled: bool) -> AlertRule:
    """Creates or updates the owner's rule of `kind` (for `run`, or a default when None). Turning a
    rule off resolves its open alerts: a rule that is off has no episode going on."""
    with transaction.atomic():
        if run is None:
            rules_defaults_for(owner)
        project = run.project_id if run is not None else personal_project_ensure(owner).pk
        rule, _ = AlertRule.objects.select_for_update().get_or_create(owner=owner, run=run, kind=kind,
                                                                      defaults={"project_id": project})
        rule.params, rule.email, rule.webhook_url, rule.enabled = params, email, webhook_url, enabled
        rule.save()
        if not enabled:
            rule.alerts.filter(resolved_at__isnull=True).update(resolved_at=timezone.now())
    return rule


def alerts_mark_seen(user) -> int:
    """Marks every alert of the user's rules seen; returns how many were unseen."""
    return Alert.objects.filter(rule__owner=user, seen=False).update(seen=True)


# --- episodes ---------------------------------------------------------------------------------


def _fire(rule: AlertRule, run: Run, message: str, step: int | None = None) -> Alert | None:
    """Opens an alert unless one is open for (rule, run); delivery starts after commit."""
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                rule=rule, run=run, kind=rule.kind, message=message[:2000], step=step,
                webhook_status=Alert.Webhook.PENDING if rule.webhook_url else Alert.Webhook.NONE)
    except IntegrityError:  # the partial unique constraint: an episode is already open
        return None
    transaction.on_commit(lambda: alert_deliver(alert.pk), robust=True)
    return alert


def _resolve(rule: AlertRule, run: Run) -> int:
    return Alert.objects.filter(rule=rule, run=run, resolved_at__isnull=True).update(resolved_at=timezone.now())


def _is_open(rule: AlertRule, run: Run) -> bool:
    return Alert.objects.filter(rule=rule, run=run, resolved_at__isnull=True).exists()


def _apply(rule: AlertRule, run: Run, conditions: list[tuple[int, bool | None, str]]) -> list[Alert]:
    """Walks (step, condition, message) in step order: True opens an episode, False closes it,
    None (no information at that step) changes nothing. Returns the alerts fired."""
    fired = []
    is_open = _is_open(rule, run)
    for step, condition, message in conditions:
        if condition and not is_open:
            alert = _fire(rule, run, message, step)
            if alert is not None:
                fired.append(alert)
            is_open = True
        elif condition is False and is_open:
            _resolve(rule, run)
            is_open = False
    return fired


# --- step metrics -----------------------------------------------------------------------------


def _nonfinite(run: Run, row: StepMetric) -> tuple[bool | None, str]:
    present = [k for k in NONFINITE_KEYS if k in row.metrics]
    if not present:
        return None, ""  # no update at this step: nothing to judge
    bad = [k for k in present if row.metrics[k] is None]
    names = " and ".join(bad)
    verb = "is" if len(bad) == 1 else "are"
    return bool(bad), f"{run}: {names} {verb} not finite (NaN or inf) at step {row.step}."


def _collapse_conditions(rule: AlertRule, run: Run, history: list[StepMetric],
                         new: list[StepMetric]) -> list[tuple[int, bool | None, str]]:
    threshold, steps = float(rule.param("threshold")), max(1, int(rule.param("steps")))
    rows = history + new
    out = []
    for i in range(len(history), len(rows)):
        share = rows[i].metrics.get(ZERO_VAR_KEY)
        window = rows[max(0, i - steps + 1): i + 1]
        values = [r.metrics.get(ZERO_VAR_KEY) for r in window]
        if len(window) == steps and all(v is not None and v >= threshold for v in values):
            message = (f"{run}: {share:.0%} of groups had zero reward variance (threshold {threshold:.0%}) "
                       f"for {steps} steps in a row, up to step {rows[i].step}: they give no learning signal.")
            out.append((rows[i].step, True, message))
        elif share is not None and share < threshold:
            out.append((rows[i].step, False, ""))
        else:
            out.append((rows[i].step, None, ""))
    return out


def evaluate_step_metrics(run: Run, rows: Sequence[StepMetric]) -> list[Alert]:
    """Evaluates the step-based rules on the rows just stored (seq order); returns the alerts fired."""
    rows = sorted(rows, key=lambda r: r.seq)
    if not rows:
        return []
    rules = rules_for_run(run, STEP_KINDS)
    fired = []
    for rule in rules:
        if rule.kind == Kind.NONFINITE:
            conditions = [(row.step, *_nonfinite(run, row)) for row in rows]
        else:
            look_back = max(0, int(rule.param("steps")) - 1)
            history = list(StepMetric.objects.filter(run=run, seq__lt=rows[0].seq).order_by("-seq")[:look_back])[::-1]
            conditions = _collapse_conditions(rule, run, history, rows)
        with transaction.atomic():
            fired += _apply(rule, run, conditions)
    return fired


# --- run states -------------------------------------------------------------------------------


def on_run_state(run: Run) -> list[Alert]:
    """Fires the state rules matching the run's state and resolves those it left (a resumed run is no
    longer failed)."""
    run.refresh_from_db()
    fired = []
    for rule in rules_for_run(run, list(STATE_KINDS)):
        if run.state == STATE_KINDS[rule.kind]:
            message = f"{run} {'finished' if rule.kind == Kind.FINISHED else run.state} at step {run.current_step}."
            if run.error:
                message += f" {run.error.strip()[:500]}"
            alert = _fire(rule, run, message, run.current_step)
            if alert is not None:
                fired.append(alert)
        else:
            _resolve(rule, run)
    return fired


def on_steps_stored(sender, run: Run, rows: Sequence[StepMetric], **kwargs) -> None:
    """Receiver of webapp.runs.models.steps_stored (sent after the ingest's commit)."""
    evaluate_step_metrics(run, rows)


def on_run_state_changed(sender, run: Run, **kwargs) -> None:
    """Receiver of webapp.runs.models.run_state_changed: an alert problem never breaks a transition."""
    try:
        on_run_state(run)
    except Exception:
        log.exception("evaluating the state alerts of run %s failed", run.pk)


# --- heartbeats -------------------------------------------------------------------------------


def stalled_seconds(rule: AlertRule) -> float:
    """The rule's limit, or half the reaper's timeout, so the alert comes before the reaper acts."""
    return float(rule.param("seconds")) or settings.COHORT_HEARTBEAT_TIMEOUT_S / 2


def check_stalled(now=None) -> list[Alert]:
    """Fires `stalled` for running runs whose heartbeat is older than the rule's limit; resolves it
    on a fresh heartbeat or a final state. An interrupted run (the reaper's verdict) stays stalled
    until it runs again."""
    now = now or timezone.now()
    live = [Run.State.RUNNING, Run.State.CANCELLING]
    runs = (Run.objects.filter(Q(state__in=live) | Q(alerts__kind=Kind.STALLED, alerts__resolved_at__isnull=True))
            .select_related("owner").distinct())
    fired = []
    for run in runs:
        for rule in rules_for_run(run, [Kind.STALLED]):
            limit = stalled_seconds(rule)
            if run.state in live:
                age = (now - run.heartbeat_at).total_seconds() if run.heartbeat_at else None
                if age is None or age > limit:
                    heard = f"for {age:.0f} s" if age is not None else "ever"
                    message = f"{run}: no heartbeat from its worker {heard} (limit {limit:.0f} s) at step {run.current_step}."
                    alert = _fire(rule, run, message, run.current_step)
                    if alert is not None:
                        fired.append(alert)
                else:
                    _resolve(rule, run)
            elif run.state in FINAL_STATES:
                _resolve(rule, run)
    return fired
