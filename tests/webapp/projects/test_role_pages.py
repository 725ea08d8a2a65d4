"""What each role is shown (issue: buttons that answer 403): the runs table offers edit, archive and
delete only for runs the reader may change; the members page says whom to ask; staff see whose personal
project each is. The page asks the views' own question (webapp/runs/access.py `can_change`)."""

import re

import pytest
from django.urls import reverse

from tests.webapp.runs.factories import make_run
from webapp.projects.models import Role
from webapp.projects.selectors import personal_project
from webapp.projects.services import member_add, project_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab(make_user):
    users = {name: make_user(name) for name in ("ada", "alice", "mo", "vi")}
    users["root"] = make_user("root", staff=True)
    p = project_create(creator=users["ada"], name="lab-p")
    for name, role in (("alice", Role.MEMBER), ("mo", Role.MEMBER), ("vi", Role.VIEWER)):
        member_add(p, user=users[name], role=role)
    return {**users, "p": p}


def body(client, url, **params) -> str:
    response = client.get(url, params)
    assert response.status_code == 200
    return response.content.decode().replace("&#x27;", "'")


def edit_links(page: str) -> set[int]:
    return {int(run) for run in re.findall(r'href="/runs/(\d+)/edit\?', page)}


def test_the_runs_table_offers_edit_archive_and_delete_only_where_the_reader_may(client, lab):
    alices = make_run(lab["alice"], project=lab["p"], name="alices")
    mos = make_run(lab["mo"], project=lab["p"], name="mos")
    url = reverse("runs:list")
    expected = {"vi": set(), "mo": {mos.pk}, "ada": {alices.pk, mos.pk}, "root": {alices.pk, mos.pk}}
    for who, editable in expected.items():
        client.force_login(lab[who])
        page = body(client, url, project="lab-p")
        assert edit_links(page) == editable, who
        assert ('value="archive"' in page) == bool(editable), who
        assert ('value="delete"' in page) == bool(editable), who
        assert f'data-run="{alices.pk}" data-changeable="{1 if alices.pk in editable else 0}"' in page, who
    client.force_login(lab["vi"])
    page = body(client, url, project="lab-p")
    assert "Tick runs to compare them." in page and 'href="/runs/new"' in page  # not into lab-p, where vi may not


def test_the_members_page_says_whom_to_ask(client, lab):
    url = reverse("projects:members", args=["lab-p"])
    client.force_login(lab["vi"])
    page = body(client, url)
    assert 'id="admins-note"' in page and "ask an admin of lab-p: ada." in page and 'id="member-add"' not in page
    client.force_login(lab["ada"])
    page = body(client, url)
    assert "Site staff create accounts: ask root." in page and 'id="create-user-link"' not in page
    client.force_login(lab["root"])
    page = body(client, url)
    assert 'href="/users/?project=lab-p" id="create-user-link"' in page


def test_staff_see_whose_personal_project_each_is(client, lab):
    client.force_login(lab["root"])
    page = body(client, reverse("projects:list"))
    alices = personal_project(lab["alice"]).name
    row = re.search(rf'<tr class="project-row" data-project="{alices}">(.*?)</tr>', page, re.S).group(1)
    assert "only alice" in row and "alice's personal" in row and "only you" not in row
    own = re.search(r'<tr class="project-row" data-project="root">(.*?)</tr>', page, re.S).group(1)
    assert "only you" in own
    assert "(alice's personal)" in body(client, reverse("runs:list"))  # the runs table's project switcher
    client.force_login(lab["alice"])
    page = body(client, reverse("projects:list"))
    assert "only you" in page and "'s personal" not in page
