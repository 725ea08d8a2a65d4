"""The manual builds with `mkdocs build --strict` (tests/docs/conftest.py), every page of its
navigation is there, and it needs no network: no font, script or style from another host."""

from __future__ import annotations

import re

import yaml

from tests.conftest import ROOT

EXTERNAL_ASSET = re.compile(r"""<(?:script|link|img)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""", re.IGNORECASE)


def nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages.extend(nav_pages(value) if isinstance(value, list) else [value])
    return pages


def built_page(site, page: str):
    stem = page.removesuffix(".md")
    if stem == "index" or stem.endswith("/index"):
        return site / stem.removesuffix("index") / "index.html"
    return site / stem / "index.html"


def test_every_page_of_the_navigation_is_built(docs_site):
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    pages = nav_pages(config["nav"])
    assert len(pages) > 30
    for page in pages:
        html = built_page(docs_site, page).read_text()
        assert "STUB" not in html, f"{page} is still a stub"


def test_the_manual_loads_nothing_from_another_host(docs_site):
    for html in docs_site.rglob("*.html"):
        assert not EXTERNAL_ASSET.search(html.read_text()), f"{html.relative_to(docs_site)} loads from the network"


def test_equations_are_mathml(docs_site):
    html = (docs_site / "explanation" / "algorithms" / "index.html").read_text()
    assert html.count("<math") >= 5 and "$$" not in html


def test_the_readmes_links_lead_to_files_of_the_project():
    """The README is read on a code host, not in the built manual, so --strict never sees its links."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert len(targets) > 20
    missing = [t for t in targets if not t.startswith(("http://", "https://")) and not (ROOT / t).exists()]
    assert not missing, missing
