"""Fixtures of the program tests: programs over the bundled HotpotQA corpus (index built once)."""

from __future__ import annotations

import pytest

from tests.trainer.programs.fakes import HOTPOT_CORPUS
from trainer.programs import get_program


@pytest.fixture(scope="session")
def search_program():
    return get_program("search", corpus_path=str(HOTPOT_CORPUS))


@pytest.fixture(scope="session")
def hover_program():
    return get_program("hover", corpus_path=str(HOTPOT_CORPUS), max_hops=3)
