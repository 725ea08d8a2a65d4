# An alert rule belongs to a project (issue 42): a run's rule to the run's project (runs 0013 moved the
# run there), a default rule to its owner's personal project.

import django.db.models.deletion
from django.db import migrations, models


def rules_into_projects(apps, schema_editor):
    AlertRule = apps.get_model("alerts", "AlertRule")
    Project = apps.get_model("projects", "Project")
    personal = dict(Project.objects.filter(personal_of__isnull=False).values_list("personal_of_id", "pk"))
    for rule in AlertRule.objects.filter(project__isnull=True).select_related("run").iterator():
        rule.project_id = rule.run.project_id if rule.run_id else personal[rule.owner_id]
        rule.save(update_fields=["project"])


class Migration(migrations.Migration):

    dependencies = [
        ('alerts', '0001_initial'),
        ('projects', '0002_personal_projects'),
        ('runs', '0014_run_project_required'),
    ]

    operations = [
        migrations.AddField(
            model_name='alertrule',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.CASCADE, related_name='alert_rules', to='projects.project'),
        ),
        migrations.RunPython(rules_into_projects, migrations.RunPython.noop),
    ]
