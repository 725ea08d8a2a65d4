import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0002_experiment_project'),
    ]

    operations = [
        migrations.AlterField(
            model_name='experiment',
            name='project',
            field=models.ForeignKey(help_text='Where its runs are launched; its members see it.', on_delete=django.db.models.deletion.RESTRICT, related_name='experiments', to='projects.project'),
        ),
    ]
