"""Every URL, for every role, found by walking Django's URL resolver, so a new URL is covered without
anyone remembering it (issues 25 and 42).

The lab (tests/webapp/role_world.py) has two projects. Each URL parameter is filled twice: with alice's
objects in lab-p, and with lab-q's (hostile ids). Every GET, and every state-changing POST with its
CSRF token, is made by each caller:

- alice (the runs' owner, a member of lab-p), mo (a member), vi (a viewer), ada (lab-p's admin), quinn
  (lab-q only), staff;
- an anonymous browser; a browser holding a valid share link to alice's running run; one whose link was
  revoked after it opened it; one whose link expired;
- alice's read-only and write API tokens (scoped to lab-p), on the API's addresses.

Each answer must be the status the caller's role allows (a table below, by kind of URL), and no body
but quinn's and staff's may hold lab-q's run name, config value or completion text. The counts of
requests and leaks are printed. A URL the walker cannot place fails the test until it is given a kind.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.test.client import ClientHandler
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.webapp.role_world import SECRET, build_lab, end_links, link_holder

pytestmark = pytest.mark.django_db

# --- what each URL is ----------------------------------------------------------------------------------
PUBLIC = {"healthz", "login", "logout", "manual:index", "manual:page"}  # the manual: tests/webapp/manual
# Each signed-in user has their own (lists, settings, forms); no other user's object is named.
PER_USER = {"alerts:list", "alerts:mark_seen", "alerts:rules", "api:tokens", "api:runs", "scheduling:queue",
            "runs:list", "runs:list_under_runs", "runs:new", "runs:import", "prefs:preference", "api:schema", "api:docs",
            "api:external_runs", "projects:list", "sharing:list", "studies", "api:sweeps"}
# A run's pages that a share link opens (webapp/runs/access.py `link_readable`).
RUN_READ = {"runs:detail", "runs:credit", "runs:metrics", "runs:heatmap", "runs:timeline", "runs:step", "runs:trajectories", "runs:group",
            "runs:example_history", "runs:example_history_query", "runs:call_prompt", "runs:export_metrics",
            "runs:export_rollouts", "runs:compare", "runs:adapter", "runs:examples_across",
            "runs:examples_partways",
            "runs:call_replays"}
API_READ = {"api:run", "api:metrics", "api:rollouts", "api:groups", "api:adapter", "api:sweep", "api:examples_diff"}
# Any member of the project (watching is reading); a share link opens runs only, never a sweep.
READ = {"experiments:detail", "alerts:run_rule_add", "sweeps:detail", "sweeps:data"}
# Changing a run: its owner while a member, an admin of its project, staff.
RUN_CHANGE = {"runs:edit", "runs:cancel", "runs:resume", "runs:archive", "runs:unarchive", "runs:actions",
              "scheduling:cancel", "sharing:new", "sweeps:cancel"}  # a sweep: its owner, admins, staff
# Starting work on a run (a replay of one module): any member or admin of its project, staff; not a viewer
# (403), not a share link (it opens reading only).
MEMBER_WORK = {"runs:replay_start"}
API_LOG = {"api:steps", "api:finish"}  # only the run's owner, while a member; as JSON
OWN = {"alerts:rule_delete": False, "api:token_revoke": False, "sharing:revoke": True}  # alice's alone (staff?)
PROJECT_READ = {"projects:members"}
PROJECT_ADMIN = {"projects:member_role", "projects:member_remove"}
STAFF_ONLY = {"scheduling:front", "people:list", "people:detail"}  # people: the Users page, accounts
LINK_OPEN = {"sharing:open"}
UNKNOWN = {"api:unknown": "no-such-endpoint/"}
# A Slurm job's posts (webapp/scheduling/slurm/views.py): its run's job token alone, which no caller here
# holds; a session, a user's token or a share link is refused (401), a GET is no post (405).
JOB_TOKEN = {"slurm_job_events"}
KINDS = [PUBLIC, PER_USER, RUN_READ, API_READ, READ, RUN_CHANGE, MEMBER_WORK, API_LOG, set(OWN), PROJECT_READ, PROJECT_ADMIN,
         STAFF_ONLY, LINK_OPEN, set(UNKNOWN), JOB_TOKEN]

# Views that name objects in the query string.
QUERY = {"runs:example_history_query": "?example={example_id}", "runs:trajectories": "?example={example_id}",
         "runs:actions": "?action=archive&runs={run_id}", "runs:compare": "?runs={run_id}",
         "sharing:new": "?runs={run_id}",
         # The across-runs page: a run against itself in a window (a share link opens its own run only).
         "runs:examples_across": "?runs={run_id}:0-1,{run_id}&example={example_id}",
         # Where two runs part: a run against itself (a table where nothing parts, said in a note).
         "runs:examples_partways": "?a={run_id}&b={run_id}", "api:examples_diff": "?a={run_id}&b={run_id}"}
# Which of alice's runs a URL names, when not her running run.
RUN_FOR = {"scheduling:cancel": "queued", "scheduling:front": "queued", "api:adapter": "finished",
           "runs:adapter": "finished", "api:steps": "external", "api:finish": "external"}
JSON_FOR_ANONYMOUS = {"prefs:preference"} | {name for kind in KINDS for name in kind if name.startswith("api:")} - {
    "api:tokens", "api:token_revoke", "api:docs"}
JSON_POST = {"api:external_runs", "api:steps", "api:finish", "api:runs", "api:sweeps"}
MEMBERS_OF_P = ("owner", "member", "viewer", "admin")
BROWSERS = ("anonymous", "link", "revoked", "expired")  # no account
TOKENS = ("read", "write")
CALLERS = (*MEMBERS_OF_P, "other", "staff", *BROWSERS)
OK = {200, 201, 204, 302, 400, 409}  # done, or refused for the request's own content (never for who asks)


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
WALKED = [(route, name) for route, name in SITE if name not in PUBLIC]


# --- the expected answers ---------------------------------------------------------------------------
def signed_out(name: str) -> set[int]:
    """An account-less browser outside a link: the login page, or the API's 401."""
    return {401} if name in JSON_FOR_ANONYMOUS else {302}


def expected(name: str, caller: str, method: str, *, hostile: bool, post_only: bool) -> set[int]:
    """The statuses `caller` may get for `name` filled with alice's objects (or lab-q's: `hostile`)."""
    reads_p = caller in MEMBERS_OF_P or caller == "staff"
    if name in JOB_TOKEN:
        return {405} if method == "GET" else {401}
    if caller in TOKENS:  # alice's lab-p tokens, on the API only
        if name in UNKNOWN:
            return {404}
        if method == "POST":
            return {403} if caller == "read" else ({400} if name in JSON_POST - API_LOG else
                                                   {404} if hostile else {400, 409})
        return {405} if post_only else {404} if hostile and name not in PER_USER else {200}
    if caller in BROWSERS:
        if name in LINK_OPEN:
            return {404} if hostile else {302}
        opens = caller == "link" and not hostile and name in RUN_READ and RUN_FOR.get(name) is None
        if opens and method == "GET":
            return {200}
        return signed_out(name) | ({405} if method == "POST" and name in PER_USER else set())
    if name in LINK_OPEN:
        return {404} if hostile else {302}
    if name in UNKNOWN:
        return {404}
    if post_only and method == "GET":
        return {405}
    if name in PER_USER:
        return {200} if method == "GET" else OK | {405}  # some only show (GET)
    if name in STAFF_ONLY:
        return {403} if caller != "staff" else OK | {404}
    if hostile:  # lab-q's objects: quinn's own, and staff read them (an adapter may be missing); nobody else
        if caller not in ("staff", "other"):
            return {404}
        return {200, 404} if method == "GET" else OK | {403, 404}
    if name in OWN:
        return (OK if method == "POST" else {200}) if caller == "owner" or (caller == "staff" and OWN[name]) else {404}
    if not reads_p:
        return {404}
    if name in PROJECT_READ and method == "POST":  # adding a member
        return OK if caller in ("admin", "staff") else {403}
    if name in RUN_READ | API_READ | READ | PROJECT_READ:
        return {200} if method == "GET" else OK
    if name in RUN_CHANGE:
        allowed = caller in ("owner", "admin", "staff")
        return (({200} if method == "GET" else OK) if allowed else {403})
    if name in MEMBER_WORK:
        allowed = caller in ("owner", "member", "admin", "staff")
        return (({200} if method == "GET" else OK) if allowed else {403})
    if name in API_LOG:
        return OK if caller == "owner" else {403}
    if name in PROJECT_ADMIN:
        return OK if caller in ("admin", "staff") else {403}
    raise AssertionError(f"{name} has no expected answers")


# --- the walk ---------------------------------------------------------------------------------------
def fill(route: str, values: dict) -> str:
    """The route with each parameter replaced by the world's object; KeyError names one with no filler."""
    return "/" + PARAMETER.sub(lambda m: str(values[m.group(2)]), route).lstrip("^").rstrip("$")


def path_for(route: str, name: str, lab, *, hostile: bool) -> str:
    if name in UNKNOWN:
        return "/api/" + UNKNOWN[name]
    values = dict(lab.hostile if hostile else lab.values)
    other = RUN_FOR.get(name)
    if other is not None and not hostile:
        values["run_id"] = getattr(lab, other).pk
    return fill(route, values) + QUERY.get(name, "").format(**values)


CSRF_SECRET = "cohortcsrfsecretfortheurlwalker0"  # 32 letters and digits: Django's secret format


HANDLER = ClientHandler(enforce_csrf_checks=True)  # one middleware chain for every client (loading it costs 0.1 s)


def clients(lab) -> dict[str, Client]:
    made = {}
    for caller in (*MEMBERS_OF_P, "other", "staff"):
        made[caller] = Client(enforce_csrf_checks=True)
        made[caller].force_login(lab.users[caller])
    made["anonymous"] = Client(enforce_csrf_checks=True)
    for kind, caller in (("valid", "link"), ("revoked", "revoked"), ("expired", "expired")):
        made[caller] = link_holder(lab, kind, HANDLER)
    end_links(lab)
    for kind in TOKENS:
        made[kind] = Client(headers={"Authorization": f"Bearer {lab.tokens[kind]}"})
    for client in made.values():
        client.handler = HANDLER  # stateless between requests; the API's views are CSRF-exempt for tokens
        client.cookies["csrftoken"] = CSRF_SECRET
    return made


def request(client: Client, method: str, path: str, name: str):
    """A GET; or a POST as the page's form sends it (the query's values in the body too: what a
    confirmation page posts), or for the JSON API as a script in a signed-in browser would."""
    if method == "GET":
        return client.get(path)
    if name in JSON_POST:
        return client.post(path, "{}", content_type="application/json", HTTP_X_CSRFTOKEN=CSRF_SECRET)
    form = {"csrfmiddlewaretoken": CSRF_SECRET, "role": "viewer", **parse_qs(urlsplit(path).query)}
    return client.post(path, form)


class Tally:
    def __init__(self):
        self.requests = self.leaks = 0
        self.wrong: list[str] = []

    def check(self, response, *, caller: str, method: str, path: str, allowed: set[int]) -> None:
        self.requests += 1
        if response.status_code not in allowed:
            self.wrong.append(f"{method} {path} as {caller}: {response.status_code}, expected {sorted(allowed)}")
        body = b"".join(response.streaming_content) if response.streaming else response.content
        if caller not in ("other", "staff") and SECRET.encode() in body:
            self.leaks += 1
            self.wrong.append(f"{method} {path} as {caller}: lab-q's text in the body")


TOTALS = {"urls": 0, "requests": 0, "leaks": 0}


@pytest.fixture(scope="module", autouse=True)
def matrix_totals():
    """Prints (and keeps in test-artifacts/) how many requests the matrix made and how many leaked."""
    yield
    if TOTALS["urls"]:
        line = f"role matrix: {TOTALS['urls']} URLs, {TOTALS['requests']} requests, {TOTALS['leaks']} leaks"
        print("\n" + line)
        artifacts = Path(__file__).resolve().parents[2] / "test-artifacts"
        artifacts.mkdir(exist_ok=True)
        (artifacts / "role-matrix.txt").write_text(line + "\n")


@pytest.fixture
def lab(make_user, settings, tmp_path):
    settings.COHORT_RUNS_DIR = tmp_path / "runs"
    return build_lab(make_user, settings.COHORT_RUNS_DIR)


def test_every_url_is_placed_in_one_kind():
    names = {name for _, name in SITE}
    unplaced = sorted(name for name in names if not any(name in kind for kind in KINDS))
    assert not unplaced, f"URLs the walker cannot place: give each a kind: {unplaced}"
    twice = sorted(name for name in names if sum(name in kind for kind in KINDS) > 1)
    assert not twice, twice
    assert len(SITE) >= 50


def test_every_api_operation_of_the_schema_is_walked(client, lab):
    client.force_login(lab.users["owner"])
    schema = client.get(reverse("api:schema")).json()
    walked = {re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", "/" + route) for route, _ in SITE}
    operations = [(method.upper(), path) for path, item in schema["paths"].items() for method in item]
    assert len(operations) >= 10
    assert not [op for op in operations if op[1] not in walked], "schema operations the walker does not reach"


@pytest.mark.parametrize(("route", "name"), WALKED, ids=lambda v: str(v))
def test_every_role_gets_what_its_role_allows_and_nothing_of_another_project(lab, route, name):
    made = clients(lab)
    tally = Tally()
    post_only = made["owner"].get(path_for(route, name, lab, hostile=False)).status_code == 405
    # Refusals first, then the callers allowed to change state, so an allowed POST (a cancel, a removed
    # member) happens after every refusal was checked against the world as built.
    order = ("other", "viewer", "member", "anonymous", "link", "revoked", "expired", "read", "write", "owner",
             "admin", "staff")
    api = name.startswith("api:") and name not in ("api:tokens", "api:token_revoke", "api:docs")
    for hostile in (True, False):
        path = path_for(route, name, lab, hostile=hostile)
        for method in ("GET", "POST") if post_only or name in RUN_CHANGE | MEMBER_WORK | PROJECT_READ | PER_USER - {
                "api:schema", "api:docs"} else ("GET",):
            for caller in order:
                if caller in TOKENS and not api:
                    continue
                allowed = expected(name, caller, method, hostile=hostile, post_only=post_only)
                tally.check(request(made[caller], method, path, name), caller=caller, method=method, path=path,
                            allowed=allowed)
    for key, value in (("urls", 1), ("requests", tally.requests), ("leaks", tally.leaks)):
        TOTALS[key] += value
    print(f"{name}: {tally.requests} requests, {tally.leaks} leaks")
    assert not tally.wrong, "\n".join(tally.wrong)


def test_the_admins_own_login_is_for_everyone_and_its_logout_takes_no_get(make_user):
    user = make_user("alice")
    assert {name for _, name in ROUTES if name in ADMIN_PUBLIC} == set(ADMIN_PUBLIC)  # still routed
    assert Client().get(reverse("admin:login")).status_code == 200
    # Signing out is a POST (Django 5); a GET is sent to sign in or refused, never served.
    for who in (user, None):
        client = Client()
        if who is not None:
            client.force_login(who)
        assert client.get(reverse("admin:logout")).status_code in (302, 405)


@pytest.fixture
def people(make_user):
    """A project admin who is not site staff, a plain user, staff: the admin site is staff's alone."""
    from webapp.projects.services import project_create

    admin = make_user("ada")
    project_create(creator=admin, name="lab-p")
    return {"admin": admin, "user": make_user("bob"), "staff": make_user("root", staff=True), "anonymous": None}


@pytest.mark.parametrize(("route", "name"), ADMIN, ids=lambda v: str(v))
def test_the_admin_is_staff_only(people, route, name):
    path = "/" + PARAMETER.sub("1", route).lstrip("^").rstrip("$")
    for caller in ("admin", "user", "anonymous"):
        client = Client()
        if people[caller] is not None:
            client.force_login(people[caller])
        response = client.get(path)
        assert response.status_code in (302, 404, 405), f"{path} for {caller}: {response.status_code}"
        if response.status_code == 302:
            assert "/login/" in response["Location"], response["Location"]
    staff = Client()
    staff.force_login(people["staff"])
    assert staff.get(path).status_code < 500


@pytest.mark.django_db(transaction=True)
def test_every_websocket_route_for_every_role(lab):
    from asgiref.sync import async_to_sync
    from channels.testing import WebsocketCommunicator
    from django.conf import settings

    from webapp.asgi import application
    from webapp.runs.live.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
    from webapp.runs.live.routing import websocket_urlpatterns

    made = clients(lab)

    def cookie(caller) -> list:
        jar = made[caller].cookies
        session = jar.get(settings.SESSION_COOKIE_NAME)
        return [(b"cookie", f"{settings.SESSION_COOKIE_NAME}={session.value}".encode())] if session else []

    async def connect(path, caller):
        comm = WebsocketCommunicator(application, path, headers=[
            (b"host", b"localhost"), (b"origin", b"http://localhost"), *cookie(caller)])
        connected, code = await comm.connect(timeout=5)
        await comm.disconnect()
        return connected, code

    routes = [str(p.pattern) for p in websocket_urlpatterns]
    assert routes, "no websocket routes walked"
    for route in routes:
        mine, theirs = fill(route, lab.values), fill(route, lab.hostile)
        for caller in ("owner", "member", "viewer", "admin", "staff", "link"):
            assert async_to_sync(connect)(mine, caller)[0], f"{mine}: {caller} is refused"
        assert async_to_sync(connect)(mine, "other") == (False, CLOSE_NOT_FOUND)
        for caller in ("anonymous", "revoked", "expired"):
            assert async_to_sync(connect)(mine, caller) == (False, CLOSE_UNAUTHENTICATED), caller
        for caller in ("owner", "viewer"):
            assert async_to_sync(connect)(theirs, caller) == (False, CLOSE_NOT_FOUND)
        # The link opens its one run only.
        assert async_to_sync(connect)(theirs, "link") == (False, CLOSE_UNAUTHENTICATED)
