"""Every code block of the README, the tutorials and the how-to guides runs (tests/docs/blocks.py says
how): the Python and shell snippets against a real Cohort server (daphne on the test database, with
the built-in programs and tasks `make run` creates, and a real API token), the TOML files through
`RunConfig`. A block CI cannot run says why, and a block that names `.ci/run` as where it runs is
checked to be there word for word."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.conftest import ROOT, service_env
from tests.docs.blocks import PAGES, Block, BlockError, page_blocks
from trainer.config import RunConfig, from_preset
from webapp.api.services import token_create
from webapp.sweeps.plan import SweepRefused
from webapp.sweeps.space import SpaceError, parse_space
from webapp.sweeps.spec_input import spec_from_mapping

NEUTRAL = ("the manual's snippets talk to the server through the SDK, the client, the API and manage.py "
           "commands, whose queries are tested on both backends by their own tests")
BLOCK_TIMEOUT_S = 300
# What a page's working folder links to, so a snippet reads as it would in a checkout.
LINKED = (".venv", "manage.py", "examples")


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _blocks_or_error(page: Path) -> list[Block] | BlockError:
    try:
        return page_blocks(page)
    except BlockError as error:
        return error


PAGES_TO_RUN = [page for page in PAGES
                if isinstance(blocks := _blocks_or_error(page), BlockError) or any(b.runs for b in blocks)]


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_block_runs_or_says_why_not(page):
    """No fence without a language CI can run, no not-run mark without its reason."""
    page_blocks(page)


def test_blocks_said_to_run_in_ci_are_what_ci_runs():
    """A block marked `not-run` because .ci/run runs it (the quick start's `make run` and `make test`):
    each of its commands is in .ci/run as written, so renaming one fails here."""
    ci = (ROOT / ".ci" / "run").read_text()
    marked = [b for page in PAGES for b in page_blocks(page) if b.not_run and ".ci/run" in b.not_run]
    assert marked, "the README's quick start is run by .ci/run and says so"
    for block in marked:
        for line in block.text.splitlines():
            command = line.split("#", 1)[0].strip()
            if command:
                assert command in ci, f"{block.where}: `{command}` is said to run in .ci/run, which lacks it"


@pytest.mark.parametrize("text, error", [
    ("steps = 0\n", "steps must be a whole number of at least 1"),
    ("stepz = 3\n", "unknown config keys: stepz"),
    ('preset = "mhgpo-rr"\nlearning_rate = -1.0\n', "learning_rate must be positive"),
    ("steps = 3\n[sweep]\nmethod = \"tpe\"\n[sweep.space]\nlearning_rate = {low = 1e-3, high = 1e-5}\n",
     "must be below its high"),
    ("steps = 3\n[sweep]\nmethods = \"tpe\"\n[sweep.space]\ngroup_size = [4, 8]\n", "Unknown sweep setting"),
])
def test_a_bad_toml_block_fails_naming_its_line(tmp_path, text, error):
    """What CI's runner does with a TOML block that RunConfig or launch_sweep would refuse."""
    page = tmp_path / "page.md"
    page.write_text(f"# A page\n\n```toml\n{text}```\n")
    [block] = page_blocks(page)
    (tmp_path / "work").mkdir()
    with pytest.raises(pytest.fail.Exception, match=error) as failed:
        _run(block, tmp_path / "work", {}, 0)
    assert "page.md:3" in str(failed.value)


@pytest.fixture
def server_env(asgi_server, make_user, model_cache_dir, tmp_path) -> dict[str, str]:
    """A fresh Cohort as `make run` leaves it (built-in programs and tasks) behind a real server, and
    the environment a reader's terminal would have: its URL and a write token of a user with a project."""
    call_command("sync_programs", verbosity=0)
    reader = make_user("reader")
    key = token_create(user=reader, name="docs")[1]
    return service_env(
        COHORT_URL=asgi_server, COHORT_TOKEN=key, COHORT_MODEL_CACHE=str(model_cache_dir),
        COHORT_RUNS_DIR=str(tmp_path / "runs"), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
    )


def _working_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name)
    return folder


def _check_config(block: Block, path: Path) -> None:
    """A run config as `RunConfig.from_toml` loads it; a sweep file (a `[sweep]` table beside the run
    settings) as `launch_sweep` reads it: its base settings, then the sweep's own and its space."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        sweep = data.pop("sweep", None)
        if sweep is None:
            RunConfig.from_toml(path)
            return
        preset = data.pop("preset", None)
        base = from_preset(preset, **data) if preset else RunConfig.from_dict(data)
        spec_from_mapping(sweep)
        parse_space(sweep.get("space"), base)
    except SweepRefused as refused:
        pytest.fail(f"{block.where}: this sweep file is refused: {refused.errors}")
    except SpaceError as error:
        pytest.fail(f"{block.where}: this sweep's space is refused: {error.errors}")
    except (ValueError, tomllib.TOMLDecodeError) as error:  # ConfigError is a ValueError
        pytest.fail(f"{block.where}: this TOML is not a valid run config: {error}")


def _run(block: Block, folder: Path, env: dict[str, str], index: int) -> None:
    if block.title:
        target = folder / block.title
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text, encoding="utf-8")
    if block.lang == "toml":
        path = folder / (block.title or f"block-{index}.toml")
        if not block.title:
            path.write_text(block.text, encoding="utf-8")
        _check_config(block, path)
        return
    if block.lang == "json":
        try:
            json.loads(block.text)
        except json.JSONDecodeError as error:
            pytest.fail(f"{block.where}: not valid JSON: {error}")
        return
    if block.title:
        return  # a file a later block uses
    if block.lang == "python":
        script = folder / f"block-{index}.py"
        script.write_text(block.text, encoding="utf-8")
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", block.text]
    started = time.monotonic()
    try:
        result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{block.where}: still running after {BLOCK_TIMEOUT_S} s:\n{block.text}\n{expired.stdout or ''}")
    print(f"{block.where} ({block.lang}): {time.monotonic() - started:.1f} s")
    if result.returncode != 0:
        pytest.fail(f"{block.where}: the {block.lang} block exited {result.returncode}:\n{block.text}\n"
                    f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}")


@pytest.mark.backend_neutral(reason=NEUTRAL)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", PAGES_TO_RUN, ids=_page_id)
def test_page_blocks_run(page, server_env, tmp_path):
    """The page's blocks in order, in one working folder, each as a reader would run it."""
    folder = _working_folder(tmp_path)
    for index, block in enumerate(page_blocks(page)):
        if block.runs:
            _run(block, folder, server_env, index)
