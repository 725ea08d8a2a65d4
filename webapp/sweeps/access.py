"""Who may change a sweep (cancel it): as for a run (webapp/runs/access.py), staff, an admin of its
project, or its owner while at least a member there. Every member of the project reads it
(webapp/sweeps/selectors.py); a reader who may not change it gets a 403 that says why."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied

from webapp.projects.models import Role
from webapp.projects.selectors import may_change_owned, role_of
from webapp.sweeps.models import Sweep


def sweep_can_change(user, sweep: Sweep, role: str | None = None) -> bool:
    return may_change_owned(user, sweep.project_id, sweep.owner_id, role)


def sweep_change_check(user, sweep: Sweep) -> None:
    """PermissionDenied (a 403 with the reason) unless `user` may change the sweep."""
    role = role_of(user, sweep.project_id)
    if sweep_can_change(user, sweep, role):
        return
    if role == Role.VIEWER:
        raise PermissionDenied(f"You are a viewer of project {sweep.project.name}: viewers read its sweeps and change "
                               "nothing. Ask one of its admins to make you a member.")
    raise PermissionDenied(f"Sweep {sweep.pk} is {sweep.owner.get_username()}'s: only its owner or an admin of "
                           f"project {sweep.project.name} may stop it.")
