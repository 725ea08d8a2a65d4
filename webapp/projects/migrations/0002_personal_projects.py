# Every existing user gets their personal project (with themselves as its admin), where the runs,
# experiments and alert rules they already have move next (runs 0013, experiments 0003, alerts 0003).
# The same naming as webapp.projects.services.personal_project_ensure, on the historical models.

import re

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import migrations

NAME_MAX = 150


def personal_name(username: str, pk: int) -> str:
    name = re.sub(r"[^A-Za-z0-9@.+_-]", "-", username).lstrip("@.+_-")[: NAME_MAX - 12]
    return name or f"user-{pk}"


def create_personal_projects(apps, schema_editor):
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    username_field = get_user_model().USERNAME_FIELD  # historical models do not carry it
    Project = apps.get_model("projects", "Project")
    Membership = apps.get_model("projects", "Membership")
    taken = {name.lower() for name in Project.objects.values_list("name", flat=True)}
    have = set(Project.objects.filter(personal_of__isnull=False).values_list("personal_of_id", flat=True))
    for user in User.objects.order_by("pk").iterator():
        if user.pk in have:
            continue
        base = personal_name(getattr(user, username_field), user.pk)
        candidates = [base, f"{base}-personal", *(f"{base}-personal-{i}" for i in range(2, 10_000))]
        name = next(c for c in candidates if c.lower() not in taken)
        taken.add(name.lower())
        project = Project.objects.create(name=name, title=f"{getattr(user, username_field)} (personal)",
                                         personal_of=user, created_by=user)
        Membership.objects.create(project=project, user=user, role="admin")


class Migration(migrations.Migration):

    dependencies = [
        ('projects', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(create_personal_projects, migrations.RunPython.noop),
    ]
