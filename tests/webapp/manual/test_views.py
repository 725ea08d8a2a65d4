"""The manual at /docs/ (webapp/manual): the built site served from COHORT_DOCS_DIR without a login, a folder
as its index.html, each file with its type, nothing outside the folder, a clear page when it is not
built; and the dashboard's links into it (the top bar, the launch form's groups, the empty runs table)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from django.urls import reverse

from trainer.config import GROUP_TITLES
from webapp.manual import views
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Task

SECRET = "the-server-s-own-file-not-the-manual"


@pytest.fixture
def site(settings, tmp_path):
    """A small built manual, as MkDocs lays one out, with a file beside it that must never be served."""
    root = tmp_path / "docs-site"
    files = {
        "index.html": "<!doctype html><title>Cohort manual</title><h1>Cohort's manual</h1>",
        "reference/settings/index.html": '<!doctype html><h2 id="group-optim">Optimization</h2>',
        "tutorials/first-run/index.html": "<!doctype html><h1>The first run</h1>",
        "assets/javascripts/bundle.a5f9d56c.min.js": "console.log('bundle')",
        "assets/javascripts/lunr/min/lunr.de.min.js": "/* lunr */",
        "assets/stylesheets/main.57a0d79d.min.css": "body { color: black }",
        "search/search_index.json": '{"docs": []}',
        "assets/images/logo.svg": "<svg xmlns='http://www.w3.org/2000/svg'/>",
        "assets/images/favicon.png": "\x89PNG",
        "assets/fonts/text.woff2": "wOF2",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (tmp_path / "secret.txt").write_text(SECRET)
    settings.COHORT_DOCS_DIR = root
    return root


def body(response) -> str:
    return (b"".join(response.streaming_content) if response.streaming else response.content).decode(errors="replace")


@pytest.mark.django_db
def test_the_manual_is_served_without_a_login_a_folder_as_its_index(client, site):
    home = client.get("/docs/")
    assert home.status_code == 200 and "Cohort's manual" in body(home)
    assert home["Content-Type"] == "text/html; charset=utf-8"
    assert home["Cache-Control"] == "no-cache" and "Last-Modified" in home  # asked again, answered 304 if unchanged
    page = client.get("/docs/reference/settings/")
    assert page.status_code == 200 and 'id="group-optim"' in body(page)
    assert client.get("/docs/reference/settings/index.html").status_code == 200
    # Without the slash the page's relative links would resolve one folder up: redirected to it.
    assert client.get("/docs/reference/settings").headers["Location"] == "/docs/reference/settings/"
    assert client.get("/docs").headers["Location"] == "/docs/"
    unchanged = client.get("/docs/", headers={"If-Modified-Since": home["Last-Modified"]})
    assert unchanged.status_code == 304
    assert client.head("/docs/").status_code == 200
    assert client.post("/docs/").status_code == 405


@pytest.mark.parametrize(("path", "content_type", "cache"), [
    ("assets/javascripts/bundle.a5f9d56c.min.js", "text/javascript; charset=utf-8", "immutable"),
    ("assets/stylesheets/main.57a0d79d.min.css", "text/css; charset=utf-8", "immutable"),
    ("assets/javascripts/lunr/min/lunr.de.min.js", "text/javascript; charset=utf-8", "no-cache"),  # no hash in its name
    ("search/search_index.json", "application/json", "no-cache"),
    ("assets/images/logo.svg", "image/svg+xml", "no-cache"),
    ("assets/images/favicon.png", "image/png", "no-cache"),
    ("assets/fonts/text.woff2", "font/woff2", "no-cache"),
])
@pytest.mark.django_db
def test_each_file_has_its_type_and_a_hashed_bundle_is_kept(client, site, path, content_type, cache):
    response = client.get(f"/docs/{path}")
    assert response.status_code == 200 and response["Content-Type"] == content_type
    assert cache in response["Cache-Control"]
    if cache == "immutable":
        assert "max-age=31536000" in response["Cache-Control"]


@pytest.mark.django_db
def test_a_missing_page_is_a_404_that_points_home(client, site):
    response = client.get("/docs/no/such/page/")
    assert response.status_code == 404
    assert "No such page in the manual" in body(response) and 'href="/docs/"' in body(response)
    assert client.get("/docs/assets/").status_code == 404  # a folder without an index lists nothing


@pytest.mark.parametrize("path", [
    "/docs/../secret.txt", "/docs/%2e%2e/secret.txt", "/docs/%2E%2E%2Fsecret.txt", "/docs/assets/../../secret.txt",
    "/docs/..%5csecret.txt", f"/docs/{'%2e%2e/' * 8}etc/passwd", "/docs//etc/passwd", "/docs/%2fetc/passwd",
])
@pytest.mark.django_db
def test_no_path_leaves_the_manuals_folder(client, site, path):
    response = client.get(path)
    assert response.status_code == 404, path
    assert SECRET not in body(response) and "root:" not in body(response)


@pytest.mark.django_db
def test_a_manual_not_built_says_how_to_build_it(client, settings, tmp_path, staff):
    settings.COHORT_DOCS_DIR = tmp_path / "never-built"
    for path in ("/docs/", "/docs/reference/settings/", "/docs/assets/javascripts/bundle.js"):
        response = client.get(path)
        assert response.status_code == 404, path
        text = body(response)
        assert "The manual is not built" in text and "<code>make docs</code>" in text
        assert str(tmp_path) not in text  # a stranger is not shown the server's folders
        assert "no-cache" in response["Cache-Control"]  # built later, it shows at once
    client.force_login(staff)
    assert str(tmp_path / "never-built") in body(client.get("/docs/"))
    # A folder that holds no index.html is not a built manual either.
    (tmp_path / "never-built").mkdir()
    assert "The manual is not built" in body(client.get("/docs/"))


@pytest.mark.django_db
def test_the_top_bar_links_to_the_manual_signed_in_or_not(client, owner):
    link = re.compile(r'<a href="/docs/" id="docs-link"[^>]*>Docs</a>')
    assert link.search(client.get(reverse("login")).content.decode())
    client.force_login(owner)
    assert link.search(client.get(reverse("runs:list")).content.decode())


@pytest.mark.django_db
def test_each_group_of_the_launch_form_links_to_its_reference_section(client, owner):
    catalog_sync()
    client.force_login(owner)
    page = client.get(reverse("runs:new"), {"task": Task.objects.get(name="toy").pk}).content.decode()
    summaries = re.findall(r'<details class="card group"[^>]*>\s*<summary>([^<]*?) <a class="group-help" '
                           r'href="/docs/reference/settings/#group-(\w+)"', page)
    assert [key for _, key in summaries] == list(GROUP_TITLES)  # every group, in the form's order
    assert [title for title, _ in summaries] == list(GROUP_TITLES.values())
    assert ("Optimization", "optim") in summaries


@pytest.mark.django_db
def test_the_empty_runs_table_links_to_the_first_tutorial(client, owner):
    client.force_login(owner)
    empty = client.get(reverse("runs:list")).content.decode()
    assert 'href="/docs/tutorials/first-run/"' in empty and "No runs yet." in empty
    filtered = client.get(reverse("runs:list"), {"q": "nothing"}).content.decode()
    assert "/docs/tutorials/first-run/" not in filtered  # "no run matches" is no first visit


def test_the_form_groups_link_to_anchors_the_built_manual_has(docs_site):
    """The real manual (built once per session, --strict): the settings reference has a section for every
    group the launch form links to."""
    html = (docs_site / "reference" / "settings" / "index.html").read_text()
    missing = [key for key in GROUP_TITLES if f'id="group-{key}"' not in html]
    assert not missing, f"the settings reference has no section for the groups {missing}"
    assert (docs_site / "tutorials" / "first-run" / "index.html").is_file()


@pytest.mark.django_db
def test_a_manual_being_built_says_so_and_reloads_until_it_is_there(client, settings, tmp_path, monkeypatch):
    """While `make run` builds the manual beside the server (webapp/manual/building.py), every address of it
    answers 503 with Retry-After and a page that reloads itself; once the builder is gone, "not built"."""
    from webapp.manual import building

    settings.COHORT_DOCS_DIR = tmp_path / "being-built"
    monkeypatch.setattr(building, "MANUAL_BUILD_FILE", tmp_path / "var" / "manual-build.pid")
    building.mark_building(os.getpid())  # a live process: this test's own
    for path in ("/docs/", "/docs/reference/settings/", "/docs/search/search_index.json"):
        response = client.get(path)
        assert response.status_code == 503, path
        assert response["Retry-After"] == str(views.BUILDING_RETRY_S)
        assert "no-cache" in response["Cache-Control"]
        text = body(response)
        assert "The manual is being built" in text and "The manual is not built" not in text
        assert f'<meta http-equiv="refresh" content="{views.BUILDING_RETRY_S}">' in text
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    building.mark_building(int(ended.stdout))  # a builder that is gone (a stack killed mid-build)
    assert client.get("/docs/").status_code == 404 and "The manual is not built" in body(client.get("/docs/"))
    building.clear_building()
    assert not building.manual_being_built()
    # Built while the file still names a live builder: the manual itself is served.
    building.mark_building(os.getpid())
    (tmp_path / "being-built").mkdir()
    (tmp_path / "being-built" / "index.html").write_text("<h1>Cohort's manual</h1>")
    assert client.get("/docs/").status_code == 200
