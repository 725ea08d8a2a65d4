# An experiment belongs to a project (issue 42): existing ones to their owner's personal project, where
# their runs moved (runs 0013).

import django.db.models.deletion
from django.db import migrations, models


def into_personal_projects(apps, schema_editor):
    Experiment = apps.get_model("experiments", "Experiment")
    Project = apps.get_model("projects", "Project")
    personal = dict(Project.objects.filter(personal_of__isnull=False).values_list("personal_of_id", "pk"))
    for owner_id in Experiment.objects.filter(project__isnull=True).values_list("owner_id", flat=True).distinct():
        Experiment.objects.filter(owner_id=owner_id, project__isnull=True).update(project_id=personal[owner_id])


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0001_initial'),
        ('projects', '0002_personal_projects'),
    ]

    operations = [
        migrations.AddField(
            model_name='experiment',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.RESTRICT, related_name='experiments', to='projects.project'),
        ),
        migrations.RunPython(into_personal_projects, migrations.RunPython.noop),
    ]
