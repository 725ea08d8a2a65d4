"""docker-compose.yml is kept correct by parsing it (no Docker engine runs here): every service
has what it needs, and every command it names exists in this project."""

import importlib
import re
import shlex

import pytest
import yaml
from django.core.management import get_commands

from tests.conftest import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def command_words(service: dict) -> list[list[str]]:
    """Each shell command a service runs (its command and healthcheck), split into words."""
    found = []
    for entry in (service.get("command"), (service.get("healthcheck") or {}).get("test")):
        if not entry:
            continue
        if isinstance(entry, str):
            entry = ["sh", "-c", entry]
        if entry[0] in ("CMD-SHELL",):
            entry = ["sh", "-c", entry[1]]
        elif entry[0] == "CMD":
            entry = entry[1:]
        if entry[:2] == ["sh", "-c"]:
            found += [shlex.split(part) for part in re.split(r"&&|;", entry[2])]
        else:
            found.append(list(entry))
    return [[w for w in words if w != "exec"] for words in found]


def test_expected_services_and_volumes():
    assert set(SERVICES) == {"postgres", "redis", "web", "worker-gpu", "worker-cpu"}
    assert {"pgdata", "redisdata", "runs"} <= set(COMPOSE["volumes"])
    for name, service in SERVICES.items():
        assert "healthcheck" in service, f"{name} has no healthcheck"
    assert any(v.startswith("pgdata:") for v in SERVICES["postgres"]["volumes"])
    assert any(v.startswith("redisdata:") for v in SERVICES["redis"]["volumes"])


def test_app_services_wait_for_healthy_databases_and_share_config():
    for name in ("web", "worker-gpu", "worker-cpu"):
        service = SERVICES[name]
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        env = service["environment"]
        assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:5432/" in env["DATABASE_URL"]
        assert env["REDIS_URL"] == "redis://redis:6379/0"
        assert "SECRET_KEY" in env and "runs:/data/runs" in service["volumes"]


def test_gpu_worker_reserves_an_nvidia_gpu_and_runs_one_task_at_a_time():
    gpu = SERVICES["worker-gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    words = gpu["command"]
    assert words[words.index("-Q") + 1] == "gpu"
    assert words[words.index("--concurrency") + 1] == "1"
    cpu = SERVICES["worker-cpu"]["command"]
    assert cpu[cpu.index("-Q") + 1] == "default"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_project_command_exists(name):
    django_commands = get_commands()
    for words in command_words(SERVICES[name]):
        program = words[0]
        if program == "python" and words[1] == "manage.py":
            assert (ROOT / "manage.py").exists()
            assert words[2] in django_commands, f"{name}: manage.py {words[2]} does not exist"
        elif program == "celery":
            app_module = words[words.index("-A") + 1]
            assert hasattr(importlib.import_module(app_module), "celery_app")
            assert words[words.index("-A") + 2] in ("worker", "inspect", "beat")
        elif program == "daphne":
            module, attr = words[-1].split(":")
            assert hasattr(importlib.import_module(module), attr)
        elif program == "python" and words[1] == "-c":
            compile(words[2], "<healthcheck>", "exec")
        else:
            # Commands of the upstream images (postgres, redis), not of this project.
            assert name in ("postgres", "redis"), f"{name}: unknown command {words}"


def test_dockerfile_copies_what_the_commands_need():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for path in ("webapp", "trainer", "workers", "manage.py", "templates", "static"):
        assert f"COPY {path}" in dockerfile, path
        assert (ROOT / path).exists()
