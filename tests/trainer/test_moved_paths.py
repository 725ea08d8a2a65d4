"""The import paths of before the trainer became packages keep working, each with a DeprecationWarning,
and give the very objects of their new homes (trainer/_moved.py).

`data/public-names-5af5e3a.json` lists, for every module that moved, the public names it defined at
the last landed commit before the move (5af5e3a): a plugin, a notebook or a benchmark written then
imports these."""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from pathlib import Path

import pytest

from trainer import _moved

OLD_NAMES: dict[str, list[str]] = json.loads(
    (Path(__file__).parent / "data" / "public-names-5af5e3a.json").read_text())


def _fresh_import(name: str):
    sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(name)
    return module, [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_every_public_name_of_an_old_module_is_still_importable_from_it(old):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(old)
        missing = [name for name in OLD_NAMES[old] if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("old", sorted(_moved.MOVED_MODULES))
def test_an_old_path_warns_and_serves_the_new_homes_objects(old):
    module, deprecations = _fresh_import(old)
    homes = _moved.MOVED_MODULES[old]
    assert len(deprecations) == 1
    assert f"{old} moved to" in str(deprecations[0].message) and homes[0] in str(deprecations[0].message)
    for name in OLD_NAMES.get(old, []):
        value = getattr(module, name)
        assert any(getattr(importlib.import_module(home), name, None) is value for home in homes), name


def test_the_new_paths_import_without_a_warning():
    for name in ("trainer.run.loop", "trainer.rollouts.sampling", "trainer.algorithms.grouping",
                 "trainer.policy.updater", "trainer.catalog", "trainer.rewards", "trainer.programs"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            importlib.import_module(name)


def test_a_name_that_left_a_module_still_there_warns_and_resolves():
    from trainer import catalog, plugins

    with pytest.warns(DeprecationWarning, match="trainer.plugins.unavailable_plugins moved to trainer.catalog"):
        moved = plugins.unavailable_plugins
    assert moved is catalog.unavailable_plugins
    with pytest.raises(AttributeError):
        plugins.no_such_name  # noqa: B018 - the attribute access is the test


def test_typical_old_imports_of_a_plugin_and_a_script():
    for old in ("trainer.sampling", "trainer.loop"):
        sys.modules.pop(old, None)  # a module warns when it is first imported
    with pytest.warns(DeprecationWarning):
        from trainer.sampling import AgentProgram, StepResult, fork_on_first, propagate_rewards  # noqa: F401
    with pytest.warns(DeprecationWarning):
        from trainer.loop import Trainer
    from trainer.rollouts.program import AgentProgram as new_program
    from trainer.run.loop import Trainer as new_trainer

    assert AgentProgram is new_program and Trainer is new_trainer
    # The policy's names stay at `trainer.policy` (now a package) without a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from trainer.policy import PolicyUpdater, UpdateConfig, load_policy_model  # noqa: F401
