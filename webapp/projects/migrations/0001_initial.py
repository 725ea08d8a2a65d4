# Projects and their members (issue 42): the unit of sharing.

import django.core.validators
import django.db.models.deletion
import django.db.models.functions.text
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Project',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(help_text='Unique (case does not count); what `project:NAME`, `?project=` and `cohort.init(project=...)` take.', max_length=150, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9][A-Za-z0-9@.+_-]*$', 'A project name is letters, digits and @ . + - _, starting with a letter or digit.')])),
                ('title', models.CharField(blank=True, max_length=200)),
                ('description', models.TextField(blank=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('personal_of', models.OneToOneField(blank=True, help_text='Set for a user\'s personal project: only that user sees it, and it takes no other members.', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='personal_project', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['name'],
                'constraints': [models.UniqueConstraint(django.db.models.functions.text.Lower('name'), name='project_unique_name_any_case')],
            },
        ),
        migrations.CreateModel(
            name='Membership',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('role', models.CharField(choices=[('viewer', 'Viewer: reads the project\'s runs'), ('member', 'Member: also launches runs and changes their own'), ('admin', 'Admin: also manages members and any run')], default='member', max_length=10)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='projects.project')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['project', 'user'],
                'constraints': [models.UniqueConstraint(fields=('user', 'project'), name='membership_one_per_user')],
            },
        ),
    ]
