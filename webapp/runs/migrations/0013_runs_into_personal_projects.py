# Each existing run moves to its owner's personal project (made for every user in projects 0002, and
# here for a user made between the two migrations), so its owner keeps seeing exactly what they saw.
# One UPDATE per owner: a lab's server holds many runs and few users.

from django.db import migrations


def runs_into_personal_projects(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    Project = apps.get_model("projects", "Project")
    personal = dict(Project.objects.filter(personal_of__isnull=False).values_list("personal_of_id", "pk"))
    for owner_id in Run.objects.filter(project__isnull=True).values_list("owner_id", flat=True).distinct():
        project_id = personal.get(owner_id)
        if project_id is None:
            raise RuntimeError(f"user {owner_id} has runs but no personal project: run projects 0002 first")
        Run.objects.filter(owner_id=owner_id, project__isnull=True).update(project_id=project_id)


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0012_run_project'),
    ]

    operations = [
        migrations.RunPython(runs_into_personal_projects, migrations.RunPython.noop),
    ]
