import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('alerts', '0002_alertrule_project'),
    ]

    operations = [
        migrations.AlterField(
            model_name='alertrule',
            name='project',
            field=models.ForeignKey(help_text="A run's rule: the run's project. A default rule: its owner's personal project (defaults are the owner's own settings, for the runs they launch in any project).", on_delete=django.db.models.deletion.CASCADE, related_name='alert_rules', to='projects.project'),
        ),
    ]
