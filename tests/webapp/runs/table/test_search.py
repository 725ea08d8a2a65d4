"""The runs table's search box: `key=value` terms on the run's config, `tag:` terms, free text on
names and tags, a 400 with the reason for a bad search, and never a wider view than the user's."""

import pytest
from django.urls import reverse

from tests.webapp.runs.seeding import make_run
from tests.webapp.runs.table_world import LIST, config, names

pytestmark = pytest.mark.django_db


def test_key_value_terms_match_config_values(client, owner, table):
    client.force_login(owner)
    assert names(client, q="estimator=gdpo") == ["alpha"]
    assert names(client, q="strategy=mhgpo") == ["beta"]
    assert names(client, q="learning_rate=0.001") == ["alpha"]  # compared as JSON numbers
    assert names(client, q="lr=1e-3") == ["alpha"]              # 1e-3 == 0.001; lr is learning_rate
    assert names(client, q="group_size=8") == ["delta sweep"]
    assert names(client, q="rewards.0.name=f1") == ["gamma"]    # nested keys with dots
    assert names(client, q="estimator=grpo strategy=grpo") == ["delta sweep", "gamma"]  # every term must match


@pytest.mark.parametrize("q", ["steps.gt=1", "steps.isnull=1", "rewards.regex=1", "group_size.-1=1"])
def test_a_key_part_named_like_a_lookup_or_a_negative_number_matches_nothing(client, owner, table, q):
    """Issue 35: typing `steps.gt=1` into the search box answered 500 on / and /runs/."""
    client.force_login(owner)
    for url in ("/", reverse("runs:list")):
        response = client.get(url, {"q": q})
        assert response.status_code == 200, (url, response.status_code)
    assert names(client, q=q) == []


def test_tag_terms_match_a_tag_exactly_and_free_text_matches_names_or_tags(client, owner, table):
    client.force_login(owner)
    assert names(client, q="tag:baseline") == ["alpha"]           # not baseline-v2
    assert names(client, q="TAG:Baseline-V2") == ["beta"]
    assert names(client, q="baseline") == ["beta", "alpha"]       # in a tag
    assert names(client, q="sweep") == ["delta sweep", "beta"]    # a name or a tag
    assert names(client, q="alp") == ["alpha"]
    assert names(client, q='"delta sweep"') == ["delta sweep"]
    assert names(client, q="tag:baseline estimator=gdpo") == ["alpha"]
    assert names(client, q="tag:nope") == []


@pytest.mark.parametrize(("q", "message"), [
    ("no_such_key=1", "Unknown config key"),
    ('name="unclosed', "quote is not closed"),
    ("a..b=1", "is not a config key"),
    ("tag:", "needs a tag"),
])
def test_a_bad_search_is_a_400_with_the_reason(client, owner, table, q, message):
    client.force_login(owner)
    response = client.get(LIST, {"q": q})
    assert response.status_code == 400
    assert message in response.content.decode()


def test_filters_never_widen_what_a_user_sees(client, owner, stranger, table):
    make_run(stranger, name="theirs", config=config(estimator="gdpo"), tags=["baseline"])
    client.force_login(owner)
    assert names(client, q="estimator=gdpo") == ["alpha"]
    assert "theirs" not in names(client, q="tag:baseline", owner=stranger.username)
