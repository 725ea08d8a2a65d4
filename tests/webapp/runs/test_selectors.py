import pytest
from django.contrib.auth.models import AnonymousUser
from django.http import Http404

from tests.webapp.runs.factories import make_run
from webapp.runs.selectors import run_get_for_user, run_list_for_user

pytestmark = pytest.mark.django_db


def test_owner_gets_own_run(owner):
    run = make_run(owner)
    assert run_get_for_user(owner, run.pk) == run


def test_other_user_gets_404(owner, stranger):
    run = make_run(owner)
    with pytest.raises(Http404):
        run_get_for_user(stranger, run.pk)


def test_staff_sees_every_run(owner, staff):
    run = make_run(owner)
    assert run_get_for_user(staff, run.pk) == run
    assert list(run_list_for_user(staff)) == [run]


def test_anonymous_gets_404_and_an_empty_list(owner):
    run = make_run(owner)
    with pytest.raises(Http404):
        run_get_for_user(AnonymousUser(), run.pk)
    assert list(run_list_for_user(AnonymousUser())) == []


@pytest.mark.parametrize("bad_id", ["abc", None, "1.5", ""])
def test_malformed_id_is_404_not_500(owner, bad_id):
    with pytest.raises(Http404):
        run_get_for_user(owner, bad_id)


def test_list_shows_only_own_runs(owner, stranger):
    mine, theirs = make_run(owner), make_run(stranger)
    assert list(run_list_for_user(owner)) == [mine]
    assert list(run_list_for_user(stranger)) == [theirs]
