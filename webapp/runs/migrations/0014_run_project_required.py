import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0013_runs_into_personal_projects'),
    ]

    operations = [
        migrations.AlterField(
            model_name='run',
            name='project',
            field=models.ForeignKey(help_text='Who sees the run: the project\'s members (docs/explanation/architecture.md "A lab\'s runs").', on_delete=django.db.models.deletion.RESTRICT, related_name='runs', to='projects.project'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['project', '-created_at', '-id'], name='run_project_created'),
        ),
    ]
