"""The manual, built once per test session the way `make docs` builds it, with --strict: a broken
link, a missing page or a bad reference fails every test that uses it, with MkDocs' own words.

The fixture `docs_site` and `build_manual` live in tests/conftest.py: the browser test of the manual
(tests/browser/test_manual.py) and the shared test server serve the same build."""

from tests.conftest import build_manual  # noqa: F401 (for this folder's tests)
