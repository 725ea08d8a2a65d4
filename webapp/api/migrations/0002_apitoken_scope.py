# A token's scope (issue 42): a project (empty: all the user's projects) and read or write. Tokens made
# before could write (the logging API): they keep that, for every project their user reads.

import django.db.models.deletion
from django.db import migrations, models


def existing_tokens_write(apps, schema_editor):
    apps.get_model("api", "ApiToken").objects.update(can_write=True)


class Migration(migrations.Migration):

    dependencies = [
        ('api', '0001_initial'),
        ('projects', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='apitoken',
            name='project',
            field=models.ForeignKey(blank=True, help_text='Empty: every project its user reads.', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to='projects.project'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='can_write',
            field=models.BooleanField(default=False, help_text='Launches and logs runs; otherwise it only reads.'),
        ),
        migrations.RunPython(existing_tokens_write, migrations.RunPython.noop),
    ]
