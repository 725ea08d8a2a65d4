"""Settings fail loudly on bad configuration, and production passes Django's deploy checks."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

GOOD_KEY = "k" * 20 + "-Zq8vRt3Lm9Wx2Yp5Nb7Hc4Jd6Fg1Ks0"


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    import os

    ignored = ("DJANGO_ENV", "SECRET_KEY", "ALLOWED_HOSTS", "DJANGO_ALLOW_ASYNC_UNSAFE")
    full_env = {k: v for k, v in os.environ.items() if k not in ignored}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=120)


LOAD = "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE','webapp.settings'); django.setup()"


def test_production_without_secret_key_fails_with_a_clear_message():
    result = run_python(LOAD, DJANGO_ENV="production", ALLOWED_HOSTS="cohort.example.org")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "SECRET_KEY is required when DJANGO_ENV=production" in result.stderr


def test_production_without_allowed_hosts_fails():
    result = run_python(LOAD, DJANGO_ENV="production", SECRET_KEY=GOOD_KEY)
    assert result.returncode != 0 and "ALLOWED_HOSTS is required" in result.stderr


def test_unknown_environment_name_fails():
    result = run_python(LOAD, DJANGO_ENV="staging")
    assert result.returncode != 0 and "DJANGO_ENV must be 'development' or 'production'" in result.stderr


def test_bad_redis_url_fails():
    result = run_python(LOAD, REDIS_URL="http://localhost:6379")
    assert result.returncode != 0 and "REDIS_URL must be a redis://" in result.stderr


def test_bad_database_url_fails():
    result = run_python(LOAD, DATABASE_URL="nosuchdb://x/y")
    assert result.returncode != 0 and "ImproperlyConfigured" in result.stderr


def test_development_defaults_load():
    result = run_python(LOAD + "; from django.conf import settings; print(settings.DEBUG, settings.DJANGO_ENV)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "development"]


@pytest.mark.slow
def test_production_passes_check_deploy():
    result = run_python(
        "import sys; from django.core.management import execute_from_command_line as run; "
        "run(['manage.py', 'check', '--deploy', '--fail-level', 'WARNING'])",
        DJANGO_ENV="production", SECRET_KEY=GOOD_KEY, ALLOWED_HOSTS="cohort.example.org",
        DJANGO_SETTINGS_MODULE="webapp.settings",
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "no issues" in result.stdout


def test_migrations_are_in_sync_with_models():
    result = run_python(
        "from django.core.management import execute_from_command_line as run; "
        "run(['manage.py', 'makemigrations', '--check', '--dry-run'])",
        DJANGO_SETTINGS_MODULE="webapp.settings",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_web_app_and_the_worker_load_without_the_training_stack():
    """Every Django process (daphne, the Celery worker, each manage.py command) starts in seconds: none of
    the web app's modules imports torch, transformers, PEFT, DSPy or vLLM. A trainer package whose
    __init__ loads its heavy modules (trainer/models/ did, through the model cache's light module)
    would put them into every one of those starts."""
    heavy = ("torch", "transformers", "peft", "dspy", "vllm")
    result = run_python(LOAD + "; import sys, importlib; from django.urls import get_resolver; "
                        "get_resolver().url_patterns; "
                        "[importlib.import_module(m) for m in ('webapp.asgi', 'webapp.runs.launch.forms', "
                        "'webapp.runs.launch.model_offer', 'webapp.runs.admin', 'webapp.datasets.admin', 'workers.tasks', "
                        "'workers.supervisor')]; "
                        f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
