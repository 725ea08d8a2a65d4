"""Per-token details on the pages (issue 45): the trajectory inspector's token JSON and colour control,
links to one token, the step page's forks table, pages of runs without details, query counts, and the
run page's Tokens section."""

import json
import re
from urllib.parse import parse_qs, urlparse

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run, with_byte_fork, with_token_details
from webapp.runs.inspector.token_cells import cell_key
from webapp.runs.inspector.token_pieces import HIGH_ENTROPY_NATS
from webapp.runs.inspector.token_reads import step_forks
from webapp.runs.views import CHART_SECTIONS

pytestmark = pytest.mark.django_db

TOKEN_DATA = re.compile(r'<script id="token-data" type="application/json">(.*?)</script>', re.S)


@pytest.fixture
def token_run(owner):
    run = make_run(owner, config={"strategy": "grpo", "padding": "fill", "token_details": "all"})
    event = with_token_details(hover_step_event(1, examples=2, rollouts=4), fork_share=0.2)
    ingest(run, [event])
    return run, event


def inspector(client, run, **params):
    return client.get(reverse("runs:trajectories", args=[run.pk, 1]), {"example": "claim-0", **params})


def token_data(html: str) -> dict:
    return json.loads(TOKEN_DATA.search(html).group(1))


def sent_details(event, example="claim-0") -> dict:
    """{cell key: the details the trainer sent} of an example's calls."""
    return {cell_key(index, position): call["tokens"] for index, t in enumerate(event["rollouts"])
            if t["example_id"] == example for position, call in enumerate(t["calls"])}


def selected_colour(html: str) -> str:
    control = re.search(r'<select id="token-colour">(.*?)</select>', html, re.S).group(1)
    return re.search(r'<option value="(\w+)" selected>', control).group(1)


def test_inspector_embeds_every_calls_tokens_as_json(client, owner, token_run):
    run, event = token_run
    client.force_login(owner)
    html = inspector(client, run).content.decode()
    payload = token_data(html)
    sent = sent_details(event)
    assert set(payload["cells"]) == set(sent)
    for key, details in sent.items():
        rows, forks = payload["cells"][key]["tokens"], payload["cells"][key]["forks"]
        # [piece, entropy, log-prob, |sampler - trainer|, advantage share, sampler, trainer]
        assert all(len(row) == 7 for row in rows)
        assert [r[0] for r in rows] == details["pieces"]
        assert [r[1] for r in rows] == pytest.approx(details["entropy"], abs=2e-3)
        assert [r[2] for r in rows] == pytest.approx(details["trainer"], abs=5e-3)  # the trainer's, when known
        assert [r[5] for r in rows] == pytest.approx(details["sampler"], abs=5e-3)
        assert [r[6] for r in rows] == pytest.approx(details["trainer"], abs=5e-3)
        assert [r[3] for r in rows] == pytest.approx([abs(s - t) for s, t in zip(details["sampler"], details["trainer"],
                                                                                  strict=True)], abs=5e-3)
        assert set(forks) == {str(i) for i, _ in details["topk"]}
    assert any(payload["cells"][k]["forks"] for k in sent)
    # Each call's cell names its tokens; the page loads the script that draws them.
    assert sorted(re.findall(r'data-tokens="([^"]+)"', html)) == sorted(sent)
    assert "js/tokens.js" in html and 'id="token-legend"' in html
    # The colour control, "none" (the word-diff view) unless the URL says otherwise.
    assert re.findall(r'<option value="(\w+)"', html.split('id="token-colour"')[1].split("</select>")[0]) == [
        "none", "entropy", "logprob", "mismatch", "advantage"]
    assert selected_colour(html) == "none"
    assert payload["focus"] is None


@pytest.mark.parametrize("params, colour", [
    ({"colour": "mismatch"}, "mismatch"),
    ({"colour": "advantage"}, "advantage"),
    ({"colour": "bogus"}, "none"),
    ({"rollout": 1, "call": 0, "token": 2}, "entropy"),  # a link to one token opens coloured by entropy...
    ({"rollout": 1, "call": 0, "token": 2, "colour": "logprob"}, "logprob"),  # ...unless it names a colouring
])
def test_the_colouring_comes_from_the_url(client, owner, token_run, params, colour):
    run, _ = token_run
    client.force_login(owner)
    assert selected_colour(inspector(client, run, **params).content.decode()) == colour


def test_a_link_to_a_token_names_it_in_the_page(client, owner, token_run):
    run, event = token_run
    client.force_login(owner)
    payload = token_data(inspector(client, run, rollout=1, call=0, token=2).content.decode())
    assert payload["focus"] == {"cell": "1-0", "token": 2}
    # A token of a call this example does not have is no focus (the page opens as usual).
    assert token_data(inspector(client, run, rollout=1, call=99, token=2).content.decode())["focus"] is None


@pytest.mark.parametrize("params", [{"rollout": 1}, {"rollout": 1, "call": 0}, {"rollout": 1, "call": 0, "token": "x"},
                                    {"rollout": 1, "call": 0, "token": -1}])
def test_a_bad_token_link_is_400(client, owner, token_run, params):
    run, _ = token_run
    client.force_login(owner)
    assert inspector(client, run, **params).status_code == 400


@pytest.mark.parametrize("config, reason", [
    ({"strategy": "grpo"}, "it ran before Cohort recorded them"),
    ({"strategy": "grpo", "token_details": "off"}, "(token_details = off)"),
])
def test_a_run_without_details_keeps_its_page_with_a_disabled_control(client, owner, config, reason):
    run = make_run(owner, config=config)
    ingest(run, [hover_step_event(1, examples=2, rollouts=4)])
    client.force_login(owner)
    html = inspector(client, run, colour="entropy", rollout=1, call=0, token=2).content.decode()
    assert "token-data" not in html and "js/tokens.js" not in html and "data-tokens" not in html
    assert 'id="token-legend"' not in html
    assert re.search(r'<select id="token-colour" disabled[^>]*><option>none</option></select>', html)
    note = re.search(r'<p class="muted small token-legend" id="no-token-details">(.*?)</p>', html).group(1)
    assert reason in note
    assert '<div class="completion">' in html  # the word-diff view, as before


def test_an_example_without_details_in_a_sampled_run_says_why(client, owner):
    run = make_run(owner, config={"strategy": "grpo", "token_details": "sampled"})
    event = with_token_details(hover_step_event(1, examples=2, rollouts=4))
    for t in event["rollouts"]:
        if t["example_id"] == "claim-0":
            for call in t["calls"]:
                call.pop("tokens")
    ingest(run, [event])
    client.force_login(owner)
    assert "token_details = sampled" in inspector(client, run).content.decode()
    assert "token-data" in inspector(client, run, example="claim-1").content.decode()


# --- the step page's forks ------------------------------------------------------------------------------


def fork_rows(html: str) -> list[str]:
    return re.findall(r'<tr class="fork-row">(.*?)</tr>', html, re.S)


def test_step_page_lists_the_forks_highest_entropy_first_linking_to_each_token(client, owner, token_run):
    run, event = token_run
    client.force_login(owner)
    response = client.get(reverse("runs:step", args=[run.pk, 1]))
    html = response.content.decode()
    forks = step_forks(run, 1, 1)
    assert forks and [row.fork for row in response.context["forks"]] == forks
    rows = fork_rows(html)
    assert len(rows) == len(forks)
    entropies = [float(re.search(r'<td class="num" data-value="([^"]+)">', row).group(1)) for row in rows]
    assert entropies == sorted(entropies, reverse=True) == pytest.approx([f.entropy for f in forks])
    assert 'aria-sort="descending"' in html and 'data-key="entropy"' in html and "js/sort-table.js" in html
    for row, fork in zip(rows, forks, strict=True):
        assert f"#{fork.rollout} " in row and f'<td data-value="{fork.example_id}">' in row
        assert fork.module in row
        assert row.count('<span class="alt') == len(fork.alternatives)
        link = re.search(r'<a class="fork-link" href="([^"]+)">', row).group(1).replace("&amp;", "&")
        query = {k: v[0] for k, v in parse_qs(urlparse(link).query).items()}
        assert query == {"example": fork.example_id, "attempt": "1", "rollout": str(fork.rollout),
                         "call": str(fork.position), "token": str(fork.token)}
    # The link opens the inspector at that token: the chosen piece there, its alternatives kept.
    first = forks[0]
    link = re.search(r'<a class="fork-link" href="([^"]+)">', rows[0]).group(1).replace("&amp;", "&")
    payload = token_data(client.get(link).content.decode())
    focused = payload["cells"][payload["focus"]["cell"]]
    assert payload["focus"] == {"cell": cell_key(first.rollout, first.position), "token": first.token}
    assert focused["tokens"][first.token][0] == first.chosen
    assert focused["forks"][str(first.token)] == [[a.piece, a.prob, sampled]
                                                  for a, sampled in zip(first.alternatives, first.sampled, strict=True)]


def test_forks_show_whitespace_and_mark_the_chosen_token(client, owner, token_run):
    run, _ = token_run
    client.force_login(owner)
    html = client.get(reverse("runs:step", args=[run.pk, 1])).content.decode()
    rows = fork_rows(html)
    # The seeded pieces are words and the spaces between them: every context shows its spaces.
    assert all('<span class="ws">·</span>' in row for row in rows)
    assert all(row.count('<strong class="chosen">') == 1 for row in rows)
    assert any(f.chosen == " " for f in step_forks(run, 1, 1))  # the seed has spaces among its forks...
    assert '<strong class="chosen"><span class="ws">·</span></strong>' in html  # ...drawn, not left blank
    # The sampled token is marked among the alternatives (the seeding always lists it first).
    assert all(row.count("chosen-alt") == 1 and "✓" in row for row in rows)


def with_repeated_call(event: dict, example: str = "claim-0") -> tuple[dict, int]:
    """The event with the first call of the example's first rollout copied into its other rollouts
    (completion and details: what MHGPO's forks store for the calls they share), and how many share it."""
    rollouts = [t for t in event["rollouts"] if t["example_id"] == example]
    first = rollouts[0]["calls"][0]
    for t in rollouts[1:]:
        t["calls"][0].update(completion=first["completion"], tokens=first["tokens"], module=first["module"])
    return event, len(rollouts)


def test_rollouts_sharing_a_context_make_one_row_with_their_count(client, owner):
    run = make_run(owner, config={"strategy": "grpo", "padding": "fill", "token_details": "all"})
    event, copies = with_repeated_call(with_token_details(hover_step_event(1, examples=2, rollouts=4), fork_share=0.2))
    ingest(run, [event])
    shared_forks = [pos for pos, _ in event["rollouts"][0]["calls"][0]["tokens"]["topk"]]
    assert shared_forks and copies == 4
    forks = step_forks(run, 1, 1)
    contexts = [(f.example_id, f.before, f.chosen, f.after, f.entropy) for f in forks]
    assert len(contexts) == len(set(contexts))  # one row per distinct context and numbers
    shared = [f for f in forks if len(f.copies) > 1]
    assert len(shared) == len(shared_forks) and all([r for r, _ in f.copies] == [0, 1, 2, 3] for f in shared)
    client.force_login(owner)
    html = client.get(reverse("runs:step", args=[run.pk, 1])).content.decode()
    rows = fork_rows(html)
    assert len(rows) == len(forks)
    counts = [int(re.search(r'<td class="num fork-count" data-value="(\d+)"', row).group(1)) for row in rows]
    assert sorted(counts, reverse=True)[:len(shared)] == [copies] * len(shared) and set(counts) == {1, copies}
    assert 'title="The same context and numbers in 4 rollouts: #0 (' in html
    assert all(re.search(r'data-value="1">\s*</td>', row) for row, n in zip(rows, counts, strict=True) if n == 1)
    positions = sum(counts)
    summary = re.search(r'<span class="muted" id="forks-count">([^<]*)</span>', html).group(1)
    assert summary == f"{len(rows)} rows for {positions} positions"


def test_the_forks_table_is_folded_below_the_groups(client, owner, token_run):
    run, _ = token_run
    client.force_login(owner)
    html = client.get(reverse("runs:step", args=[run.pk, 1])).content.decode()
    assert html.index('id="groups"') < html.index('id="forks-section"') < html.index('id="token-forks"')
    opening = re.search(r'<details class="card section forks-section" id="forks-section"[^>]*>', html).group(0)
    assert " open" not in opening  # folded by default: its summary gives the row count


def test_only_entropies_above_the_threshold_are_called_high(client, owner):
    run = make_run(owner, config={"strategy": "grpo", "padding": "fill", "token_details": "all"})
    event = with_token_details(hover_step_event(1, examples=2, rollouts=4), fork_share=0.2)
    calm = {id(c["tokens"]): c["tokens"] for t in event["rollouts"] if t["example_id"] == "claim-1" for c in t["calls"]}
    for details in calm.values():  # a quiet example: its forks (the step's top entropies) under 0.3 nats
        details["entropy"] = [e / 10 for e in details["entropy"]]
    ingest(run, [event])
    client.force_login(owner)
    html = client.get(reverse("runs:step", args=[run.pk, 1])).content.decode()
    note = re.search(r'<p class="muted small" id="forks-note">(.*?)</p>', html, re.S).group(1)
    assert f"at least {HIGH_ENTROPY_NATS:.2f} nats, a fair coin between two tokens" in note
    forks = step_forks(run, 1, 1)
    assert {f.entropy >= HIGH_ENTROPY_NATS for f in forks} == {True, False}  # the seed has both
    for row, fork in zip(fork_rows(html), forks, strict=True):
        assert ('<span class="high-entropy"' in row) == (fork.entropy >= HIGH_ENTROPY_NATS)
    high = sum(f.entropy >= HIGH_ENTROPY_NATS for f in forks)
    assert f": {high} of {len(forks)} rows." in note


def test_byte_tokens_show_their_bytes_and_one_sampled_alternative(client, owner):
    run = make_run(owner, config={"strategy": "grpo", "padding": "fill", "token_details": "all"})
    ingest(run, [with_byte_fork(with_token_details(hover_step_event(1, examples=2, rollouts=4), fork_share=0.2))])
    client.force_login(owner)
    html = client.get(reverse("runs:step", args=[run.pk, 1])).content.decode()
    table = html[html.index('id="token-forks"'):html.index("</table>", html.index('id="token-forks"'))]
    assert "\ufffd" not in table
    (row,) = [r for r in fork_rows(html) if '<strong class="chosen"><span class="bytes"' in r]
    assert '<strong class="chosen"><span class="bytes" title="bytes of a multi-byte character, split across tokens">' \
           '⟨98\u00a080⟩</span></strong>' in row
    assert '⟨F0\u00a09F⟩' in row  # the context before it, byte for byte
    assert row.count("chosen-alt") == 1 and row.count("✓") == 1  # by id: the other byte token is not the sampled one
    assert re.search(r'chosen-alt" title="the sampled token"><code><span class="bytes"[^>]*>⟨98\u00a080⟩', row)
    # The inspector's JSON: the pieces as their bytes, the sampled alternative marked by id.
    payload = token_data(inspector(client, run).content.decode())
    cell = payload["cells"][cell_key(0, 0)]
    k = cell["bytes"][-1]
    assert [cell["tokens"][i][0] for i in cell["bytes"]] == ["⟨F0\u00a09F⟩", "⟨98\u00a080⟩"]
    assert cell["forks"][str(k)] == [["⟨98\u00a080⟩", 0.5, True], ["⟨98\u00a081⟩", 0.45, False], [" ok", 0.05, False]]


def test_a_step_without_forks_says_so_in_one_line(client, owner):
    run = make_run(owner, config={"strategy": "grpo", "token_details": "off"})
    ingest(run, [hover_step_event(1)])
    client.force_login(owner)
    html = client.get(reverse("runs:step", args=[run.pk, 1])).content.decode()
    assert 'id="token-forks"' not in html and 'id="forks-section"' not in html and "sort-table.js" not in html
    assert re.search(r'<p class="muted small" id="no-forks">No forks: [^<]*token_details = off[^<]*</p>', html)


# --- query counts ----------------------------------------------------------------------------------------


def count_queries(client, url, **params) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params)
    assert response.status_code == 200, response.content[:300]
    return len(queries.captured_queries)


def test_token_details_keep_the_pages_query_counts_fixed(client, owner):
    plain, small, large = make_run(owner), make_run(owner), make_run(owner)
    ingest(plain, [hover_step_event(1, examples=1, rollouts=2, group_size=2)])
    ingest(small, [with_token_details(hover_step_event(1, examples=1, rollouts=2, group_size=2))])
    ingest(large, [with_token_details(hover_step_event(1, examples=6, rollouts=12, group_size=14, seed=5), seed=5)])
    client.force_login(owner)
    counts = {}
    for name, run in (("plain", plain), ("small", small), ("large", large)):
        counts[name] = (count_queries(client, reverse("runs:trajectories", args=[run.pk, 1]), example="claim-0"),
                        count_queries(client, reverse("runs:step", args=[run.pk, 1])))
    assert counts["small"] == counts["large"]
    # The inspector reads the details with the texts, in the same row: no query more than without them.
    assert counts["small"][0] == counts["plain"][0]
    # The step's forks: one query finds no details; with details, a second reads the calls' modules.
    assert counts["small"][1] == counts["plain"][1] + 1


# --- the run page ----------------------------------------------------------------------------------------


def test_the_run_page_has_a_tokens_section_right_after_learning(client, owner):
    run = make_run(owner)
    keys = [key for key, _, _ in CHART_SECTIONS]
    assert keys[keys.index("learning") + 1] == "tokens"
    client.force_login(owner)
    html = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert html.index('id="section-learning"') < html.index('id="section-tokens"') < html.index('id="section-groups"')
    assert "Entropy, the sampled tokens&#x27; probability, sampler/trainer mismatch per token." in html
