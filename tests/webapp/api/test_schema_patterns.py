"""The schema's text patterns say what the API accepts: a value the pattern allows is one the server
takes (the fuzz draws its schema-valid requests from them, so a loose pattern is a flaky fuzz)."""

import re

import pytest

from webapp.api.schema import CONFIG_FILTER, NO_NUL


@pytest.mark.parametrize("text", ["a=\x00", "a=b\n\x00", "a=\n\n\x00x", "a\x00=1"])
def test_no_config_filter_with_a_nul_matches(text):
    assert re.search(CONFIG_FILTER, text) is None


@pytest.mark.parametrize("text", ["a=1", "a.b=x", "rewards.0.name=f1", "a=line\nbreak", "k-1=\u00e9"])
def test_config_filters_the_server_takes_match(text):
    assert re.search(CONFIG_FILTER, text) is not None


@pytest.mark.parametrize("text", ["\x00", "a\n\x00", "ab\x00"])
def test_no_text_with_a_nul_matches(text):
    assert re.search(NO_NUL, text) is None
