"""The Dockerfile is kept able to start vLLM on a GPU by parsing it (no Docker engine runs here):
a C compiler for the Triton kernels vLLM compiles at start, and a model cache the image's own
user can write."""

import re
import shlex

from tests.conftest import ROOT
from tests.test_docker_compose import COMPOSE, SERVICES


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def run_commands() -> list[list[str]]:
    """Every shell command of every RUN, as words."""
    return [shlex.split(part) for op, args in instructions() if op == "RUN" for part in re.split(r"&&|;", args)]


def test_a_c_compiler_is_installed_before_the_python_packages():
    steps = instructions()
    compiler = next(i for i, (op, args) in enumerate(steps)
                    if op == "RUN" and re.search(r"apt-get install\b.*\b(gcc|build-essential)\b", args))
    first_pip = next(i for i, (op, args) in enumerate(steps) if op == "RUN" and "pip install" in args)
    assert compiler < first_pip


def test_the_model_cache_is_created_and_owned_by_the_images_user():
    steps = instructions()
    users = [args for op, args in steps if op == "USER"]
    assert users[-1] == "cohort", "the image must not run as root"
    created = {word for words in run_commands() if words[:2] == ["mkdir", "-p"] for word in words[2:]}
    chowned = {word for words in run_commands() if words[:1] == ["chown"] for word in words[2:]}
    owners = {words[1] for words in run_commands() if words[:1] == ["chown"]}
    assert {"/data/runs", "/data/hf"} <= created & chowned and owners == {"cohort:cohort"}
    env = " ".join(args for op, args in steps if op == "ENV")
    assert "COHORT_MODEL_CACHE=/data/hf" in env and "HF_HOME=/data/hf" in env
    volumes = " ".join(args for op, args in steps if op == "VOLUME")
    assert "/data/hf" in volumes and "/data/runs" in volumes
    # the user is created, and owns the folders, before it is switched to
    user_at = max(i for i, (op, _) in enumerate(steps) if op == "USER")
    chown_at = max(i for i, (op, args) in enumerate(steps) if op == "RUN" and "chown" in args)
    assert chown_at < user_at


def test_every_app_service_mounts_that_cache_as_a_named_volume():
    assert "hf-cache" in COMPOSE["volumes"]
    for name, service in SERVICES.items():
        if name in ("postgres", "redis"):
            continue
        assert "hf-cache:/data/hf" in service["volumes"], name
        assert service["environment"]["COHORT_MODEL_CACHE"] == "/data/hf", name
