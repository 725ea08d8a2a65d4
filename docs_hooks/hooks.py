"""MkDocs hooks (mkdocs.yml `hooks:`): a page's `<!-- cohort:generate NAME -->` line is replaced by
the Markdown that `docs_hooks/NAME_page.py`'s `render()` returns, built from the code (the RunConfig
dataclass, the OpenAPI schema, the command-line parsers, the COHORT_* settings)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GENERATE = re.compile(r"^<!-- cohort:generate (?P<name>[a-z_]+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def generated(match: re.Match) -> str:
        module = importlib.import_module(f"docs_hooks.{match['name']}_page")
        return module.render()

    markdown = GENERATE.sub(generated, markdown)
    from docs_hooks.math import render_math

    return render_math(markdown)
