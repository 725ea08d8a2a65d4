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
    assert set(SERVICES) == {"postgres", "redis", "web", "worker-gpu0", "worker-gpu1", "worker-multi-gpu", "worker-cpu"}
    assert {"pgdata", "redisdata", "runs"} <= set(COMPOSE["volumes"])
    for name, service in SERVICES.items():
        assert "healthcheck" in service, f"{name} has no healthcheck"
    assert any(v.startswith("pgdata:") for v in SERVICES["postgres"]["volumes"])
    assert any(v.startswith("redisdata:") for v in SERVICES["redis"]["volumes"])


def test_app_services_wait_for_healthy_databases_and_share_config():
    for name in ("web", "worker-gpu0", "worker-gpu1", "worker-multi-gpu", "worker-cpu"):
        service = SERVICES[name]
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        env = service["environment"]
        assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:5432/" in env["DATABASE_URL"]
        assert env["REDIS_URL"] == "redis://redis:6379/0"
        assert "SECRET_KEY" in env and "runs:/data/runs" in service["volumes"]


GPU_WORKERS = sorted(name for name in SERVICES if name.startswith("worker-gpu"))


@pytest.mark.parametrize("name", GPU_WORKERS)
def test_each_gpu_worker_is_pinned_to_its_own_device_and_named_after_it(name):
    index = name.removeprefix("worker-gpu")
    worker = SERVICES[name]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "device_ids": [index], "capabilities": ["gpu"]}]
    env = worker["environment"]
    assert env["COHORT_WORKER_NAME"] == f"gpu{index}" and env["COHORT_WORKER_DEVICES"] == index
    assert env["DATABASE_URL"] == SERVICES["web"]["environment"]["DATABASE_URL"]  # the shared config is merged in
    (words,) = [w for w in command_words(worker) if w[0] == "celery" and "worker" in w]
    assert words[words.index("-Q") + 1] == "gpu"
    assert words[words.index("--concurrency") + 1] == "1"
    assert words[words.index("-n") + 1] == "$$COHORT_WORKER_NAME@%h"  # compose turns $$ into $; sh expands it
    ping = [w for w in command_words(worker) if "inspect" in w][0]
    assert ping[ping.index("-d") + 1] == "$$COHORT_WORKER_NAME@$$HOSTNAME"


def test_gpu_workers_have_distinct_devices_and_names_and_the_cpu_worker_takes_the_rest():
    assert len(GPU_WORKERS) >= 2
    envs = [SERVICES[name]["environment"] for name in GPU_WORKERS]
    assert len({e["COHORT_WORKER_NAME"] for e in envs}) == len({e["COHORT_WORKER_DEVICES"] for e in envs}) == len(envs)
    cpu = SERVICES["worker-cpu"]["command"]
    assert cpu[cpu.index("-Q") + 1] == "default"


def test_the_eight_gpu_worker_holds_eight_devices_in_a_profile_of_its_own(settings):
    from webapp.scheduling.services import local_gpu_count

    worker = SERVICES["worker-multi-gpu"]
    assert worker["profiles"] == ["multi-gpu"]  # never started beside the one-GPU workers on their devices
    (reservation,) = worker["deploy"]["resources"]["reservations"]["devices"]
    env = worker["environment"]
    assert reservation["device_ids"] == env["COHORT_WORKER_DEVICES"].split(",") == [str(i) for i in range(8)]
    settings.COHORT_WORKER_GPU_COUNT = None
    assert local_gpu_count(env["COHORT_WORKER_DEVICES"]) == 8  # what it reports: it takes runs of up to 8
    (words,) = [w for w in command_words(worker) if w[0] == "celery" and "worker" in w]
    assert words[words.index("-Q") + 1] == "gpu" and words[words.index("--concurrency") + 1] == "1"


def test_the_variables_the_workers_set_are_read_by_the_settings():
    from django.conf import settings

    assert hasattr(settings, "COHORT_WORKER_DEVICES") and hasattr(settings, "COHORT_WORKER_GPU_MEMORY_GB")


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


def test_the_web_service_serves_the_manual_the_image_built():
    """The image builds the manual into /app/build/docs-site (Dockerfile), the settings' default
    COHORT_DOCS_DIR: no service points the setting elsewhere or mounts a volume over it."""
    for name, service in SERVICES.items():
        if name in ("postgres", "redis"):
            continue
        assert "COHORT_DOCS_DIR" not in (service.get("environment") or {}), name
        targets = [volume.split(":")[1] for volume in service.get("volumes", []) if ":" in volume]
        assert not [t for t in targets if t == "/" or t.startswith("/app")], name
