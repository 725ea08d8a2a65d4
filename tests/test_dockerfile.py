"""The Dockerfile is kept able to start vLLM on a GPU by parsing it (no Docker engine runs here):
a C compiler for the Triton kernels vLLM compiles at start, and a model cache the image's own
user can write; and the image holds the manual it serves at /docs/."""

import os
import re
import shlex
from pathlib import Path

from django.conf import settings

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


def test_the_image_builds_the_manual_where_the_server_reads_it():
    """`make docs` in the image: with --strict (a broken link fails the image's build), after every file
    the build reads is in it, into the folder the settings' COHORT_DOCS_DIR names by default."""
    steps = instructions()
    (build_at,) = [i for i, (op, args) in enumerate(steps) if op == "RUN" and "mkdocs build" in args]
    (words,) = [w for w in run_commands() if "mkdocs" in w and "build" in w]
    assert "--strict" in words and "--quiet" not in words and "-q" not in words  # --quiet silences --strict
    assert not any(w.startswith(("-d", "--site-dir")) for w in words), "the site goes where mkdocs.yml says"
    copied = {source for op, args in steps[:build_at] if op == "COPY" for source in args.split()[:-1]}
    # What the build reads: the pages, the hooks, the code of the generated reference, and the files the
    # command line and server settings pages read (docs_hooks/cli_page.py, environment_page.py; not tests/:
    # the test suite's own settings are named on that page without their files).
    read = {"mkdocs.yml", "docs", "docs_hooks", "cohort", "trainer", "webapp", "workers", "README.md", "Makefile",
            "Dockerfile", "docker-compose.yml"}
    assert read <= copied, read - copied
    extras = [re.search(r'\.\[([^\]]*)\]', args) for op, args in steps[:build_at] if op == "RUN" and "pip install" in args]
    assert any(m and "docs" in m.group(1).split(",") for m in extras), "the docs extra (MkDocs) is installed"

    site_dir = re.search(r"^site_dir:\s*(\S+)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M).group(1)
    (workdir,) = [args for op, args in steps if op == "WORKDIR"]
    if "COHORT_DOCS_DIR" not in os.environ:  # the default: where make docs builds it
        assert Path(str(settings.COHORT_DOCS_DIR)) == ROOT / site_dir
    env = " ".join(args for op, args in steps if op == "ENV")
    assert "COHORT_DOCS_DIR" not in env, f"the image serves {workdir}/{site_dir}, the settings' default"
