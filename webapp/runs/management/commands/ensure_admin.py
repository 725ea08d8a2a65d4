"""Creates the local admin account once and says how to log in; later runs reuse it."""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from webapp.paths import VAR_DIR

PASSWORD_FILE = VAR_DIR / "admin-password.txt"


class Command(BaseCommand):
    help = "Create (or reuse) the local admin account and print how to log in."

    def add_arguments(self, parser):
        parser.add_argument("--username", default=os.environ.get("COHORT_ADMIN_USER", "admin"))

    def handle(self, *args, username, **options):
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None:
            password = os.environ.get("COHORT_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
            User.objects.create_superuser(username=username, email="", password=password)
            VAR_DIR.mkdir(parents=True, exist_ok=True)
            PASSWORD_FILE.write_text(password + "\n")
            PASSWORD_FILE.chmod(0o600)
            self.stdout.write(f"Created admin account. Log in as {username!r} with password {password!r}")
            self.stdout.write(f"(also saved in {PASSWORD_FILE})")
        elif PASSWORD_FILE.exists() and user.check_password(PASSWORD_FILE.read_text().strip()):
            self.stdout.write(
                f"Reusing admin account. Log in as {username!r} with password "
                f"{PASSWORD_FILE.read_text().strip()!r} (from {PASSWORD_FILE})"
            )
        else:
            self.stdout.write(f"Reusing admin account {username!r} (its password was changed: use yours).")
