# The runs' metrics column by column (webapp/runs/series_store.py). Runs stored before this are read from
# their rows until `manage.py series_blocks` writes their blocks (or the ingest does, as they go on).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0017_calltext_tokens'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='stepmetric',
            index=models.Index(fields=['run', 'step'], name='stepmetric_run_step'),
        ),
        migrations.CreateModel(
            name='SeriesBlock',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('block', models.PositiveIntegerField(help_text='Steps block * BLOCK_STEPS to (block + 1) * BLOCK_STEPS - 1.')),
                ('last_seq', models.PositiveBigIntegerField(help_text='The newest seq among the block\'s rows when it was written.')),
                ('rows', models.PositiveIntegerField(help_text='How many StepMetric rows the block was written from.')),
                ('steps', models.PositiveIntegerField(help_text='How many distinct steps it holds.')),
                ('keys', models.JSONField(default=list, help_text='The metric keys, in the order of the value columns.')),
                ('tokens', models.FloatField(help_text='The completion tokens of its steps (None: none reported).', null=True)),
                ('data', models.BinaryField(help_text='steps int64, stored-at float64, values float64 (keys x steps), presence bits.')),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='series_blocks', to='runs.run')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('run', 'block'), name='seriesblock_unique_block')],
            },
        ),
    ]
