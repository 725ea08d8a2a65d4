# Share links (issue 42).

import django.db.models.deletion
import django.utils.timezone
import webapp.sharing.models
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('runs', '0014_run_project_required'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ShareLink',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('view', models.CharField(choices=[('run', 'One run'), ('compare', 'A compare view')], default='run', max_length=10)),
                ('metrics', models.JSONField(blank=True, default=list, help_text="A compare view's chosen metrics.")),
                ('label', models.CharField(blank=True, help_text="What it is for, e.g. 'NeurIPS reviewers'.", max_length=200)),
                ('secret', models.CharField(default=webapp.sharing.models.new_secret, editable=False, max_length=64)),
                ('anonymous', models.BooleanField(default=False, help_text='Shows no owner, user name, host name, worker name or file path anywhere, the exports included.')),
                ('allow_adapter', models.BooleanField(default=False, help_text="Also downloads each run's trained LoRA adapter.")),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ('expires_at', models.DateTimeField()),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
                ('uses', models.PositiveIntegerField(default=0, help_text='How many times the link was opened.')),
                ('last_used_at', models.DateTimeField(blank=True, null=True)),
                ('created_by', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='share_links', to=settings.AUTH_USER_MODEL)),
                ('runs', models.ManyToManyField(help_text='The runs it opens (one, or those compared).', related_name='share_links', to='runs.run')),
            ],
            options={
                'ordering': ['-created_at', '-id'],
                'indexes': [models.Index(fields=['created_by', '-created_at'], name='sharelink_creator_created')],
            },
        ),
    ]
