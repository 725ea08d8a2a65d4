# Every run belongs to a project (issue 42). Added empty first; 0013 moves each run to its owner's
# personal project; 0014 makes the column required.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0011_run_origin_external_id'),
        ('projects', '0002_personal_projects'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.RESTRICT, related_name='runs', to='projects.project'),
        ),
    ]
