"""Every URL, for every role, found by walking Django's URL resolver, so a new URL is covered without
anyone remembering it (issue 25, item 3).

Each parameter is filled from objects owned by user A (a run with a stored step, its rollouts, calls
and groups, an alert rule, an API token, a queued run). Every GET is made as A, as a stranger B, as
an anonymous client and as staff: A and staff get the page, B a 404 (never the object, never a 500),
the anonymous client the login redirect (pages) or a 401 (the API and the JSON preference endpoint).
A view that only takes POST answers a GET with 405 to A and B alike. Every state-changing POST is
then made with and without the CSRF token (the logging API's as JSON, the token in its header):
without it, 403 for everyone signed in (and the API's 401 anonymous); with it, B gets 404, the
anonymous client the login redirect or 401, A (and staff) an answer that is neither. A URL the walker
cannot fill fails the test until it gets a filler below or is listed, with its reason, as public or
per-user. The admin (its own staff check) is walked too: nobody but staff gets a page there.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.alerts.models import AlertRule, Kind
from webapp.api.services import token_create
from webapp.experiments.models import Experiment, ExperimentRun
from webapp.runs.models import Group, ModuleCall, Rollout, Run
from webapp.runs.services import run_directory

pytestmark = pytest.mark.django_db

# URLs with no object to own, and why.
PUBLIC = {
    "healthz": "the load balancer's health check: database and Redis status, nothing else",
    "login": "the login form",
    "logout": "ends the session of whoever is logged in (POST)",
}
PER_USER = {  # each user sees their own (lists, settings, forms); no other user's object is named
    "alerts:list", "alerts:mark_seen", "alerts:rules", "api:tokens", "api:runs", "scheduling:queue", "runs:list",
    "runs:list_under_runs", "runs:new", "prefs:preference", "api:schema", "api:docs",
    "api:external_runs",  # starts a run of the caller's (the logging API)
}
# Any other address under /api/: the API's JSON 404 for everyone signed in (401 anonymous).
UNKNOWN = {"api:unknown": "no-such-endpoint/"}
# Views that name A's objects in the query string (a page of one example, the runs to act on).
QUERY = {"runs:example_history_query": "?example={example_id}", "runs:trajectories": "?example={example_id}",
         "runs:actions": "?action=archive&runs={run_id}", "runs:compare": "?runs={run_id}"}
# Refusals that name nothing of A's: a selection of runs that are not the user's is not a selection.
STRANGER_QUERY_STATUS = {"runs:compare": {400, 404}}
# JSON endpoints for scripts: 401 instead of the login redirect pages give
JSON_FOR_ANONYMOUS = {"api:runs", "api:run", "api:metrics", "api:rollouts", "api:groups", "prefs:preference",
                      "api:schema", "api:unknown", "api:adapter", "api:external_runs", "api:steps", "api:finish"}
# The API's state-changing endpoints (the logging API) take JSON: a browser session posts it with the CSRF
# token in the X-CSRFToken header. Without a session there is no CSRF to check: anonymous is the API's 401.
JSON_POST = {"api:external_runs", "api:steps", "api:finish"}
# URLs of A's run in another state than the walker's running run: the queue's (a queued run) and the
# adapter download (a succeeded run that trained one).
RUN_FOR = {"scheduling:": "queued", "api:adapter": "finished"}


def walk(patterns=None, prefix="", namespace=""):
    """(route, name) of every URL pattern, nested includes flattened."""
    for pattern in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(pattern, URLResolver):
            ns = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from walk(pattern.url_patterns, prefix + str(pattern.pattern), ns)
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), f"{namespace}{pattern.name}" if pattern.name else None


ROUTES = sorted(set(walk()), key=lambda r: r[0])
SITE = [(route, name) for route, name in ROUTES if not route.startswith("admin/")]
ADMIN_PUBLIC = ("admin:login", "admin:logout")  # the admin's own sign-in and sign-out: for everyone
ADMIN = [(route, name) for route, name in ROUTES if route.startswith("admin/") and name not in ADMIN_PUBLIC]
PARAMETER = re.compile(r"<(?:(\w+):)?(\w+)>")


@pytest.fixture
def world(make_user, settings, tmp_path):
    """A's objects, a stranger B, staff, and the values each URL parameter takes."""
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    a, b, staff = make_user("alice"), make_user("bob"), make_user("root", staff=True)
    run = make_run(a, state=Run.State.RUNNING, name="alice-run", config={"strategy": "mmgrpo"})
    ingest(run, [hover_step_event(1)])
    queued = make_run(a, state=Run.State.QUEUED, name="alice-queued")
    call = ModuleCall.objects.filter(rollout__run=run).first()
    rollout = Rollout.objects.filter(run=run).first()
    rule = AlertRule.objects.create(owner=a, kind=Kind.FAILED, run=run)
    token, _ = token_create(user=a, name="alice's")
    finished = make_run(a, state=Run.State.SUCCEEDED, name="alice-finished")
    adapter = run_directory(finished.pk) / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    experiment = Experiment.objects.create(owner=a, task=run.task, seeds=1, config={})
    ExperimentRun.objects.create(experiment=experiment, run=run, kind=ExperimentRun.Kind.WEIGHTS, seed=0)
    values = {"experiment_id": experiment.pk, "run_id": run.pk, "step": 1, "group_id": Group.objects.filter(run=run).first().pk,
              "call_id": call.pk, "example_id": rollout.example_id, "rule_id": rule.pk, "token_id": token.pk,
              "key": "run-charts"}
    return {"a": a, "b": b, "staff": staff, "values": values, "queued": queued, "finished": finished}


def fill(route: str, values: dict, *, run: int | None = None) -> str:
    """The route with each parameter replaced by A's object; KeyError names a parameter with no filler."""
    def replace(match):
        name = match.group(2)
        if name == "run_id" and run is not None:
            return str(run)
        return str(values[name])

    return "/" + PARAMETER.sub(replace, route).lstrip("^").rstrip("$")


def path_for(route: str, name: str, world) -> str:
    if name in UNKNOWN:
        return "/api/" + UNKNOWN[name]
    other = next((world[state] for prefix, state in RUN_FOR.items() if name and name.startswith(prefix)), None)
    return fill(route, world["values"], run=other.pk if other else None) + QUERY.get(name, "").format(**world["values"])


def client_for(user, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    if user is not None:
        client.force_login(user)
    return client


def anonymous_expected(name: str) -> set[int]:
    return {401} if name in JSON_FOR_ANONYMOUS else {302}


def test_every_url_is_filled_or_listed_with_a_reason():
    unfilled = []
    for route, name in SITE:
        params = {m.group(2) for m in PARAMETER.finditer(route)}
        if name in PUBLIC or name in PER_USER or name in QUERY or name in UNKNOWN:
            continue
        if not params or params - {"run_id", "step", "group_id", "call_id", "example_id", "rule_id", "token_id",
                                   "experiment_id"}:
            unfilled.append((route, name))
    assert not unfilled, f"URLs the walker cannot fill: give each a filler or list it with its reason: {unfilled}"
    assert len(SITE) >= 40


@pytest.mark.parametrize(("route", "name"), [r for r in SITE if r[1] not in PUBLIC], ids=lambda v: str(v))
def test_get_for_every_role(world, route, name):
    path = path_for(route, name, world)
    as_a = client_for(world["a"]).get(path)
    post_only = as_a.status_code == 405
    expected = {404} if name in UNKNOWN else {405} if post_only else {200}
    assert as_a.status_code in expected, f"{path} as its owner: {as_a.status_code}"
    as_b = client_for(world["b"]).get(path)
    if name in PER_USER or name in UNKNOWN:
        assert as_b.status_code == as_a.status_code, f"{path} as another user: {as_b.status_code}"
    elif name in STRANGER_QUERY_STATUS:
        assert as_b.status_code in STRANGER_QUERY_STATUS[name], f"{path} as a stranger: {as_b.status_code}"
        assert "alice-run" not in as_b.content.decode()
    else:
        assert as_b.status_code in ({405} if post_only else {404}), f"{path} as a stranger: {as_b.status_code}"
    as_staff = client_for(world["staff"]).get(path)
    assert as_staff.status_code == as_a.status_code, f"{path} as staff: {as_staff.status_code}"
    anonymous = Client().get(path)
    assert anonymous.status_code in anonymous_expected(name), f"{path} anonymous: {anonymous.status_code}"
    if anonymous.status_code == 302:
        assert anonymous["Location"].startswith("/login/"), anonymous["Location"]


def _post_only(world) -> list[tuple[str, str]]:
    """The walked URLs that change state: their views answer a GET with 405."""
    return [(route, name) for route, name in SITE
            if name not in PUBLIC and client_for(world["a"]).get(path_for(route, name, world)).status_code == 405]


def csrf_token(client: Client) -> str:
    """A CSRF cookie and the matching form token, as a page with a form would give the browser."""
    from django.conf import settings

    secret = "cohortcsrfsecretfortheurlwalker0"  # 32 letters and digits: Django's secret format
    client.cookies[settings.CSRF_COOKIE_NAME] = secret
    return secret


def post(client: Client, path: str, name: str, token: str | None = None):
    """A POST as the page's form sends it, or for the JSON API as a script in a signed-in browser would."""
    if name in JSON_POST:
        return client.post(path, "{}", content_type="application/json", **({"HTTP_X_CSRFTOKEN": token} if token else {}))
    return client.post(path, {"csrfmiddlewaretoken": token} if token else {})


def test_every_state_changing_post_with_and_without_csrf(world):
    actions = _post_only(world)
    names = {name for _, name in actions}
    # the actions the issue names are among those found
    assert {"runs:cancel", "runs:resume", "runs:archive", "runs:unarchive", "alerts:rule_delete", "api:token_revoke",
            "scheduling:cancel", "scheduling:front"} | JSON_POST <= names, names
    for route, name in actions:
        path = path_for(route, name, world)
        for user in (world["a"], world["b"], None):
            refused = post(client_for(user, csrf=True), path, name)
            expected = 401 if user is None and name in JSON_POST else 403
            assert refused.status_code == expected, f"POST {path} without CSRF as {user}: {refused.status_code}"
        anonymous = client_for(None, csrf=True)
        response = post(anonymous, path, name, csrf_token(anonymous))
        assert response.status_code in anonymous_expected(name), f"POST {path} anonymous: {response.status_code}"
        stranger = client_for(world["b"], csrf=True)
        response = post(stranger, path, name, csrf_token(stranger))
        allowed = {404} if name not in PER_USER else {200, 204, 302, 400}
        if name == "scheduling:front":  # staff only, refused before any run is looked up
            allowed = {403}
        assert response.status_code in allowed, f"POST {path} as a stranger: {response.status_code}"
        owner = client_for(world["staff"] if name == "scheduling:front" else world["a"], csrf=True)
        response = post(owner, path, name, csrf_token(owner))
        assert response.status_code not in (403, 404, 405) and response.status_code < 500, (
            f"POST {path} as the one allowed: {response.status_code}")


@pytest.fixture
def people(make_user):
    return {"a": make_user("alice"), "b": make_user("bob"), "staff": make_user("root", staff=True)}


def test_the_admins_own_login_is_for_everyone_and_its_logout_takes_no_get(people):
    assert {name for _, name in ROUTES if name in ADMIN_PUBLIC} == set(ADMIN_PUBLIC)  # still routed
    assert client_for(None).get(reverse("admin:login")).status_code == 200
    # Signing out is a POST (Django 5); a GET is sent to sign in or refused, never served.
    for user in (people["a"], None):
        assert client_for(user).get(reverse("admin:logout")).status_code in (302, 405)


@pytest.mark.parametrize(("route", "name"), ADMIN, ids=lambda v: str(v))
def test_the_admin_is_staff_only(people, route, name):
    path = "/" + PARAMETER.sub("1", route).lstrip("^").rstrip("$")
    for user in (people["a"], people["b"], None):
        response = client_for(user).get(path)
        assert response.status_code in (302, 404, 405), f"{path} for a non-staff user: {response.status_code}"
        if response.status_code == 302:
            assert "/login/" in response["Location"], response["Location"]
    assert client_for(people["staff"]).get(path).status_code < 500


@pytest.mark.django_db(transaction=True)
def test_every_websocket_route_for_every_role(world):
    from asgiref.sync import async_to_sync
    from channels.testing import WebsocketCommunicator
    from django.conf import settings

    from webapp.asgi import application
    from webapp.runs.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
    from webapp.runs.routing import websocket_urlpatterns

    def cookie(user) -> list:
        if user is None:
            return []
        client = client_for(user)
        return [(b"cookie", f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode())]

    cookies = {name: cookie(world[name]) for name in ("a", "b", "staff")} | {None: []}

    async def connect(path, user):
        comm = WebsocketCommunicator(application, path, headers=[(b"host", b"localhost"), (b"origin", b"http://localhost"),
                                                                 *cookies[user]])
        connected, code = await comm.connect(timeout=5)
        await comm.disconnect()
        return connected, code

    routes = [str(p.pattern) for p in websocket_urlpatterns]
    assert routes, "no websocket routes walked"
    for route in routes:
        path = fill(route, world["values"])
        assert async_to_sync(connect)(path, "a")[0], f"{path}: the owner is refused"
        assert async_to_sync(connect)(path, "staff")[0], f"{path}: staff is refused"
        assert async_to_sync(connect)(path, "b") == (False, CLOSE_NOT_FOUND)
        assert async_to_sync(connect)(path, None) == (False, CLOSE_UNAUTHENTICATED)
