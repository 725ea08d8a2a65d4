# Runs trained elsewhere (webapp/runs/external.py): who trains a run, and the logging client's id for it.

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0010_run_prompt_optimization'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='origin',
            field=models.CharField(default='cohort', help_text="Who trains it: 'cohort' (Cohort's own worker) or the trainer that logs it through the API ('trl', 'sdk').", max_length=40),
        ),
        migrations.AddField(
            model_name='run',
            name='external_id',
            field=models.CharField(blank=True, help_text="The logging client's id for the run, so a retried create makes one run; unique per owner when set.", max_length=64),
        ),
        migrations.AlterField(
            model_name='run',
            name='config',
            field=models.JSONField(help_text="The validated trainer.config.RunConfig, as JSON; for a run trained elsewhere, its trainer's own settings as the client sent them."),
        ),
        migrations.AddConstraint(
            model_name='run',
            constraint=models.UniqueConstraint(condition=models.Q(('external_id', ''), _negated=True), fields=('owner', 'external_id'), name='run_unique_external_id'),
        ),
    ]
