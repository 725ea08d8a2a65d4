"""The import contracts of pyproject.toml's [tool.importlinter] hold, and they catch what they are for:
a layer importing upwards, and a cycle, between packages or between the modules of one package.

The broken cases run `lint-imports` on a scratch copy of the project with one import line added."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_project_keeps_every_contract():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


@pytest.mark.parametrize(("module", "line", "expected"), [
    # an algorithm reaching up into the run: an upward import, and a cycle between trainer's packages
    ("trainer/algorithms/groups.py", "from trainer.run.loop import Trainer",
     ["trainer.algorithms is not allowed to import trainer.run", "No cycles are allowed in trainer."]),
    # two modules of one package importing each other (the samplers and the program interface)
    ("trainer/rollouts/program.py", "from trainer.rollouts.sampling import fork_on",
     ["No cycles are allowed in trainer.rollouts."]),
    # the registries importing back the loader's report (the cycle this layout broke)
    ("trainer/plugins.py", "from trainer.catalog import unavailable_plugins",
     ["trainer.plugins is not allowed to import trainer.catalog"]),
    ("trainer/rollouts/trajectory.py", "import django",
     ["The trainer never imports Django", "trainer.rollouts.trajectory -> django"]),
    ("webapp/limits/models.py", "from webapp.runs.models import Run",
     ["No cycles are allowed in webapp."]),
    # the runs app reaching up into an app built on it (it offers hooks and signals instead)
    ("webapp/runs/views.py", "from webapp.sweeps.models import Sweep",
     ["The apps built on runs (experiments, sweeps, alerts, the API) sit above it", "webapp.runs.views -> webapp.sweeps.models"]),
    ("cohort/client.py", "from webapp.runs.models import Run",
     ["cohort/ (the client, the DSPy optimizer) stands beside the web app"]),
])
def test_a_new_upward_import_or_cycle_fails_the_check(tmp_path, module, line, expected):
    for name in ("trainer", "webapp", "workers", "cohort"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / module).open("a") as source:
        source.write(f"\n{line}  # noqa\n")

    result = _lint_imports(tmp_path)

    assert result.returncode != 0
    output = " ".join(result.stdout.split())  # import-linter wraps long contract names
    for text in expected:
        assert text in output, result.stdout
