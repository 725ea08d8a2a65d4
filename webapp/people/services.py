"""Write-side operations of the Users page: a new account, and a person's place in a project."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from webapp.projects.models import Membership, Project
from webapp.projects.services import ProjectError, member_add

# No look-alike characters (0 O, 1 l I): the password is read off the screen once and typed elsewhere.
PASSWORD_ALPHABET = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
PASSWORD_LENGTH = 16  # 16 of 56 characters: about 93 bits


class PersonError(ValueError):
    """An account that cannot be made; the message says why and `field` where (shown beside it)."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


def generated_password() -> str:
    return "".join(secrets.choice(PASSWORD_ALPHABET) for _ in range(PASSWORD_LENGTH))


def person_create(*, username: str, email: str, password: str, project: Project | None = None,
                  role: str | None = None):
    """A new active account (not staff) with this password, and its place in `project` when given. The
    account gets its personal project as every account does (webapp/projects/apps.py)."""
    try:
        with transaction.atomic():
            user = get_user_model().objects.create_user(username=username, email=email, password=password)
            if project is not None:
                member_add(project, user=user, role=role)
    except IntegrityError:  # another request made the same user name between the form's check and here
        raise PersonError(f"A user named {username!r} exists already: choose another name.",
                          field="username") from None
    except ProjectError as exc:  # nothing is made: the account waits until it can join the project
        raise PersonError(f"Not created: {exc}", field="project") from None
    return user


def person_place(user, *, project: Project, role: str) -> tuple[Membership, str | None]:
    """Puts `user` in `project` with `role` (a member already there gets the role instead); the
    membership and the role they held before (None: they were not in it)."""
    before = Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()
    return member_add(project, user=user, role=role), before
