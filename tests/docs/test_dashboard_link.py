"""Every page of the manual leads back to the dashboard (docs_overrides/main.html): a "Dashboard" link
that, from wherever the page is under /docs/, opens Cohort's runs at /."""

from __future__ import annotations

import re
from urllib.parse import urljoin

LINK = re.compile(r'<a class="cohort-dashboard-link" id="cohort-dashboard-link" href="([^"]*)"[^>]*>← Dashboard</a>')


def test_every_page_links_back_to_the_dashboard(docs_site):
    pages = sorted(docs_site.rglob("*.html"))
    assert len(pages) > 30
    for html in pages:
        found = LINK.findall(html.read_text(encoding="utf-8"))
        assert len(found) == 1, f"{html.relative_to(docs_site)}: {len(found)} dashboard links"
        served_at = "http://cohort.example/docs/" + html.relative_to(docs_site).as_posix().removesuffix("index.html")
        assert urljoin(served_at, found[0]) == "http://cohort.example/", (html, found[0])
