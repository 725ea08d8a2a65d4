"""Working as a lab through the pages: the projects list, the members page, the runs table's project
switcher and `project:` search, launching into a project, moving a run, the queue's project filter,
and a viewer's clear 403."""

import pytest
from django.urls import reverse

from tests.webapp.runs.factories import make_run, make_task
from tests.webapp.runs.launch.test_launch import launch_data
from webapp.projects.models import Membership, Role
from webapp.projects.selectors import personal_project
from webapp.projects.services import member_add, project_create
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Run, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab(make_user):
    users = {name: make_user(name) for name in ("ada", "alice", "mo", "vi", "quinn")}
    p = project_create(creator=users["ada"], name="lab-p")
    for name, role in (("alice", Role.MEMBER), ("mo", Role.MEMBER), ("vi", Role.VIEWER)):
        member_add(p, user=users[name], role=role)
    q = project_create(creator=users["quinn"], name="lab-q")
    return {**users, "p": p, "q": q}


def signed_in(client, user):
    client.force_login(user)
    return client


def test_teammates_see_each_others_runs_and_nobody_sees_a_personal_run(client, lab):
    shared = make_run(lab["alice"], project=lab["p"], name="alice-shared")
    private = make_run(lab["alice"], name="alice-private")
    elsewhere = make_run(lab["quinn"], project=lab["q"], name="quinn-run")
    for who in ("mo", "vi", "ada"):
        body = signed_in(client, lab[who]).get(reverse("runs:list")).content.decode().replace("&#x27;", "'")
        assert "alice-shared" in body and "alice-private" not in body and "quinn-run" not in body, who
        assert client.get(reverse("runs:detail", args=[shared.pk])).status_code == 200
        assert client.get(reverse("runs:detail", args=[private.pk])).status_code == 404
        assert client.get(reverse("runs:detail", args=[elsewhere.pk])).status_code == 404
    body = signed_in(client, lab["alice"]).get(reverse("runs:list")).content.decode().replace("&#x27;", "'")
    assert "alice-shared" in body and "alice-private" in body


def test_the_project_switcher_and_the_project_search_term_narrow_the_table(client, lab):
    make_run(lab["alice"], project=lab["p"], name="in-p")
    make_run(lab["alice"], name="in-personal")
    signed_in(client, lab["alice"])
    body = client.get(reverse("runs:list"), {"project": "LAB-P"}).content.decode().replace("&#x27;", "'")
    assert "in-p" in body and "in-personal" not in body and 'id="project-switcher"' in body
    body = client.get(reverse("runs:list"), {"q": "project:alice"}).content.decode().replace("&#x27;", "'")
    assert "in-personal" in body and "in-p<" not in body
    refused = client.get(reverse("runs:list"), {"project": "lab-q"})  # not hers: as if it did not exist
    assert refused.status_code == 404 and "No project 'lab-q' of yours" in refused.content.decode().replace("&#x27;", "'")
    assert "'project:' needs a project name" in client.get(reverse("runs:list"), {"q": "project:"}).content.decode().replace("&#x27;", "'")


def test_the_members_page_adds_changes_and_removes_with_errors_beside_the_fields(client, lab, make_user):
    url = reverse("projects:members", args=["lab-p"])
    signed_in(client, lab["ada"])
    make_user("newcomer")
    assert client.post(url, {"username": "newcomer", "role": "viewer"}).status_code == 302
    assert Membership.objects.get(project=lab["p"], user__username="newcomer").role == Role.VIEWER
    unknown = client.post(url, {"username": "nobody-here", "role": "member"})
    assert unknown.status_code == 400 and 'id="error-username"' in unknown.content.decode().replace("&#x27;", "'")
    assert "No user named 'nobody-here'" in unknown.content.decode().replace("&#x27;", "'")
    bad_role = client.post(url, {"username": "newcomer", "role": "owner"})
    assert bad_role.status_code == 400 and 'id="error-role"' in bad_role.content.decode().replace("&#x27;", "'")
    mo = lab["mo"]
    client.post(reverse("projects:member_role", args=["lab-p", mo.pk]), {"role": "admin"})
    assert Membership.objects.get(project=lab["p"], user=mo).role == Role.ADMIN
    client.post(reverse("projects:member_remove", args=["lab-p", lab["vi"].pk]))
    assert not Membership.objects.filter(project=lab["p"], user=lab["vi"]).exists()


def test_the_last_admin_cannot_leave_or_be_demoted_from_the_page(client, lab):
    signed_in(client, lab["ada"])
    response = client.post(reverse("projects:member_role", args=["lab-p", lab["ada"].pk]), {"role": "member"},
                           follow=True)
    assert "last admin of lab-p" in response.content.decode().replace("&#x27;", "'")
    response = client.post(reverse("projects:member_remove", args=["lab-p", lab["ada"].pk]), follow=True)
    assert "last admin of lab-p" in response.content.decode().replace("&#x27;", "'")
    assert Membership.objects.get(project=lab["p"], user=lab["ada"]).role == Role.ADMIN


def test_a_member_may_leave_but_not_manage(client, lab):
    signed_in(client, lab["mo"])
    url = reverse("projects:members", args=["lab-p"])
    assert client.post(url, {"username": "vi", "role": "admin"}).status_code == 403
    assert client.post(reverse("projects:member_role", args=["lab-p", lab["vi"].pk]), {"role": "admin"}).status_code == 403
    assert client.post(reverse("projects:member_remove", args=["lab-p", lab["mo"].pk])).status_code == 302
    assert client.get(url).status_code == 404  # gone: the project is as absent as a stranger's


def test_a_new_project_makes_its_creator_admin_and_a_bad_name_is_an_error_beside_it(client, lab):
    signed_in(client, lab["alice"])
    assert client.post(reverse("projects:list"), {"name": "vision-rl"}).status_code == 302
    assert Membership.objects.get(project__name="vision-rl", user=lab["alice"]).role == Role.ADMIN
    for name, error in (("has space", "Letters, digits"), ("LAB-P", "exists already")):
        response = client.post(reverse("projects:list"), {"name": name})
        assert response.status_code == 400 and error in response.content.decode().replace("&#x27;", "'")


def test_a_viewer_gets_a_clear_403_to_launch_edit_cancel_or_share(client, lab):
    run = make_run(lab["alice"], project=lab["p"], name="alice-run")
    signed_in(client, lab["vi"])
    launch = client.post(reverse("runs:new"), {"project": lab["p"].pk, "task": make_task().pk, "program": "toy"})
    assert launch.status_code == 403 and "viewer of project lab-p" in launch.content.decode().replace("&#x27;", "'")
    for url in (reverse("runs:edit", args=[run.pk]), reverse("runs:cancel", args=[run.pk]),
                f"{reverse('sharing:new')}?runs={run.pk}"):
        response = client.post(url, {"name": "x"}) if "share" not in url else client.get(url)
        assert response.status_code == 403, url
        assert 'id="forbidden-reason"' in response.content.decode().replace("&#x27;", "'")
    assert Run.objects.get(pk=run.pk).state == Run.State.QUEUED and Run.objects.get(pk=run.pk).name == "alice-run"


def test_a_member_changes_their_own_runs_and_an_admin_anyones(client, lab):
    mine = make_run(lab["mo"], project=lab["p"])
    theirs = make_run(lab["alice"], project=lab["p"])
    signed_in(client, lab["mo"])
    assert client.post(reverse("runs:cancel", args=[mine.pk])).status_code == 302
    refused = client.post(reverse("runs:cancel", args=[theirs.pk]))
    assert refused.status_code == 403 and "only its owner or an admin" in refused.content.decode().replace("&#x27;", "'")
    signed_in(client, lab["ada"])
    assert client.post(reverse("runs:cancel", args=[theirs.pk])).status_code == 302
    assert Run.objects.get(pk=theirs.pk).state == Run.State.CANCELLED


def test_the_launch_form_offers_the_projects_one_may_launch_into_and_launches_there(client, lab):
    make_task()
    signed_in(client, lab["vi"])
    page = client.get(reverse("runs:new")).content.decode().replace("&#x27;", "'")
    assert ">lab-p<" not in page and f'value="{personal_project(lab["vi"]).pk}"' in page
    signed_in(client, lab["alice"])
    page = client.get(reverse("runs:new"), {"project": "lab-p"}).content.decode().replace("&#x27;", "'")
    assert f'<option value="{lab["p"].pk}" selected>' in page
    catalog_sync()
    toy = Task.objects.get(name="toy")
    response = client.post(reverse("runs:new"), launch_data(toy, project=lab["p"].pk, steps=2))
    assert response.status_code == 302 and Run.objects.get().project == lab["p"]
    mo_sees = signed_in(client, lab["mo"]).get(response["Location"])
    assert mo_sees.status_code == 200


def test_a_run_moves_where_its_owner_and_the_mover_are_members(client, lab):
    run = make_run(lab["alice"], name="to-share")
    signed_in(client, lab["alice"])
    page = client.get(reverse("runs:edit", args=[run.pk])).content.decode().replace("&#x27;", "'")
    assert ">lab-p<" in page and ">lab-q<" not in page
    response = client.post(reverse("runs:edit", args=[run.pk]), {"name": "to-share", "project": lab["p"].pk})
    assert response.status_code == 302 and Run.objects.get(pk=run.pk).project == lab["p"]
    refused = client.post(reverse("runs:edit", args=[run.pk]), {"name": "to-share", "project": lab["q"].pk})
    assert refused.status_code == 400 and 'id="error-project"' in refused.content.decode().replace("&#x27;", "'")
    assert Run.objects.get(pk=run.pk).project == lab["p"]


def test_the_queue_narrows_to_a_project_and_names_only_runs_one_reads(client, lab):
    make_run(lab["alice"], project=lab["p"], name="p-queued")
    make_run(lab["quinn"], project=lab["q"], name="q-queued")
    signed_in(client, lab["vi"])
    body = client.get(reverse("scheduling:queue")).content.decode().replace("&#x27;", "'")
    assert "p-queued" in body and "q-queued" not in body  # its row shows "run <id>", not its name
    narrowed = client.get(reverse("scheduling:queue"), {"project": "lab-p"}).content.decode().replace("&#x27;", "'")
    assert "p-queued" in narrowed and narrowed.count('class="queued-run"') == 1
    assert client.get(reverse("scheduling:queue"), {"project": "lab-q"}).status_code == 404


def test_launch_run_takes_a_project(lab):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from webapp.runs.launch.catalog import catalog_sync

    catalog_sync()
    call_command("launch_run", task="toy", owner="alice", project="lab-p", set=["steps=2"])
    assert Run.objects.get().project == lab["p"]
    with pytest.raises(CommandError, match="viewer of project lab-p"):
        call_command("launch_run", task="toy", owner="vi", project="lab-p")
    with pytest.raises(CommandError, match="no project named 'lab-q'"):
        call_command("launch_run", task="toy", owner="alice", project="lab-q")


def test_compare_puts_runs_of_several_projects_side_by_side_only_for_who_reads_them_all(client, lab):
    in_p = make_run(lab["alice"], project=lab["p"], name="run-in-p")
    in_q = make_run(lab["quinn"], project=lab["q"], name="run-in-q")
    member_add(lab["q"], user=lab["alice"], role=Role.VIEWER)
    url = f"{reverse('runs:compare')}?runs={in_p.pk}&runs={in_q.pk}"
    page = signed_in(client, lab["alice"]).get(url)
    assert page.status_code == 200 and "run-in-p" in page.content.decode() and "run-in-q" in page.content.decode()
    refused = signed_in(client, lab["mo"]).get(url)  # mo reads lab-p only
    assert refused.status_code == 404 and "run-in-q" not in refused.content.decode()
