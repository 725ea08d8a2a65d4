"""The pages that read query parameters, fuzzed by hand (issue 25, item 4): random and hostile values
(NUL, huge and negative numbers, floats, long and odd Unicode text, repeated parameters, path segments
out of every integer range) give a page or a 400, never a 500.

The API has its own schema-driven fuzz (tests/webapp/api/test_schema_fuzz.py); these views publish
no schema, so each is given the parameters it reads, and some it does not."""

from __future__ import annotations

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.runs.models import Group, ModuleCall, Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

EXAMPLES_PER_PAGE = 60
# Each page with the parameters its view reads ({run}, {group}, {example} are the owner's objects).
PAGES = {
    "/": ["state", "task", "program", "owner", "q", "archived", "sort", "page", "tag"],
    "/runs/{run}/": ["tab", "step"],
    "/runs/{run}/metrics.json": ["after", "series", "max_points", "from_step", "to_step"],
    "/runs/{run}/heatmap.json": ["family", "max_columns", "from_step", "to_step"],
    "/runs/{run}/timeline.json": ["from_step", "to_step"],
    "/runs/{run}/steps/1/": ["attempt", "module", "offset", "example", "from"],
    "/runs/{run}/credit": ["from", "to"],
    "/runs/{run}/steps/1/trajectories": ["example", "attempt"],
    "/runs/{run}/groups/{group}/": ["attempt"],
    "/runs/{run}/examples/": ["example", "before"],
    "/runs/{run}/examples/{example}/": ["before"],
    "/runs/{run}/export/metrics.csv": ["format"],
    "/runs/{run}/export/rollouts.jsonl": ["format"],
    "/runs/compare": ["runs", "metrics", "band", "group_by", "experiment"],
    "/runs/examples/across": ["runs", "example", "align", "solved"],
    "/runs/examples/partways": ["a", "b", "solved", "kind", "limit"],
    "/runs/new": ["task", "preset", "model"],
    "/runs/{run}/calls/{call}/replay": ["g"],  # the replay's confirm page: G
    "/runs/{run}/calls/{call}/replays/": ["g"],
}
HOSTILE = st.one_of(
    st.text(max_size=40),
    st.integers().map(str),
    st.sampled_from(["0", "-1", "1e9", "NaN", "inf", "1.5", " 7", "007", "0x10", "9" * 40, "-" + "9" * 40,
                     "reward/mean", "-started", "created", "%", "\x00", "a\x00b", "'; DROP TABLE runs_run; --",
                     "../../etc/passwd", "<script>alert(1)</script>", "∞", "\U0001F600" * 50, "x" * 5000,
                     "group_var", "zero_var_share", "mmgrpo", "running", "1,2,3", "{run}"]),
)
ODD_PATHS = ["/runs/{huge}/", "/runs/{huge}/metrics.json", "/runs/{run}/steps/{huge}/",
             "/runs/{run}/groups/{huge}/", "/runs/{run}/calls/{huge}/prompt", "/runs/{run}/examples/%00/",
             "/runs/{run}/examples/{long}/", "/runs/{run}/steps/{huge}/trajectories", "/experiments/{huge}/",
             "/api/runs/{huge}/adapter/", "/runs/{run}/calls/{huge}/replay", "/runs/{run}/calls/{huge}/replays/"]


@pytest.fixture
def seeded(make_user):
    owner = make_user("fuzzer")
    run = make_run(owner, state=Run.State.RUNNING, name="fuzzed", config={"strategy": "mmgrpo"})
    ingest(run, [hover_step_event(1), hover_step_event(2, seed=1)])
    client = Client()
    client.force_login(owner)
    group = Group.objects.filter(run=run).first()
    call = ModuleCall.objects.filter(rollout__run=run).order_by("pk").first()
    return {"client": client, "run": run.pk, "group": group.pk, "example": group.example_id, "call": call.pk}


def params_for(names: list[str]):
    known = st.sampled_from(names)
    anything = st.text(min_size=1, max_size=12)
    pairs = st.lists(st.tuples(st.one_of(known, known, anything), HOSTILE), max_size=6)
    return pairs


def assert_answered(client: Client, url: str, query: list[tuple[str, str]]) -> None:
    response = client.get(url, query_params=_as_multi(query))
    if response.streaming:
        b"".join(response.streaming_content)  # an export fails while streaming, not before
    assert response.status_code < 500, (url, query, response.status_code)
    assert response.status_code in (200, 302, 400, 404), (url, query, response.status_code)


def _as_multi(query):
    multi: dict[str, list[str]] = {}
    for key, value in query:
        multi.setdefault(key, []).append(value)
    return multi


@pytest.mark.parametrize("page", sorted(PAGES))
def test_hostile_query_parameters_give_a_page_or_a_400(seeded, page):
    url = page.format(**seeded)

    @settings(max_examples=EXAMPLES_PER_PAGE, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(query=params_for(PAGES[page]))
    def fuzz(query):
        assert_answered(seeded["client"], url, query)

    fuzz()


@pytest.mark.parametrize("path", ODD_PATHS)
@pytest.mark.parametrize("huge", [2**31, 2**63, 10**30])
def test_path_numbers_out_of_every_integer_range_are_a_404(seeded, path, huge):
    url = path.format(huge=huge, long="e" * 3000, **seeded)
    response = seeded["client"].get(url)
    assert response.status_code in (400, 404), (url, response.status_code)


def test_a_nul_anywhere_in_the_address_is_a_400_in_the_form_its_clients_read(seeded):
    client, run = seeded["client"], seeded["run"]
    page = client.get("/", {"q": "a\x00b"})
    assert page.status_code == 400 and b"NUL" in page.content and page["Content-Type"].startswith("text/html")
    chart = client.get(f"/runs/{run}/metrics.json", {"series": "\x00"})
    assert chart.status_code == 400 and "NUL" in chart.json()["error"]
    api = client.get("/api/runs/", {"owner": "\x00"})
    assert api.status_code == 400 and "NUL" in api.json()["detail"]
