from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "webapp.projects"
    label = "projects"
    verbose_name = "Projects"

    def ready(self):
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_save

        from webapp.projects.services import on_user_saved

        # Every user has a personal project from the moment the account exists (admin, createsuperuser,
        # ensure_admin, tests), so a run always has a project to default to.
        post_save.connect(on_user_saved, sender=get_user_model(), dispatch_uid="projects.personal_project")
