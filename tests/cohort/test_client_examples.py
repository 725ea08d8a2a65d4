"""`Client.examples_diff` against the real ASGI server (daphne) over HTTP, with a real token: the
part-ways table of two seed groups as one DataFrame, equal to the API's rows, pages followed."""

import pandas as pd
import pytest

from cohort import client as client_module
from cohort.client import Client, CohortAPIError
from tests.webapp.runs.examples.partways_world import EXPECTED_CATEGORY, EXPECTED_ORDER, world
from webapp.api.services import token_create
from webapp.runs.examples.partways import partways, row_dict

NEUTRAL = ("cohort.client turning the part-ways API's pages into one DataFrame over HTTP (daphne); the endpoint "
           "and its queries are tested on both backends in tests/webapp/api/test_examples_diff.py and "
           "tests/webapp/runs/examples/test_partways.py")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def test_examples_diff_is_the_table_as_a_dataframe(asgi_server, owner, monkeypatch):
    gdpo, grpo = world(owner)
    client = Client(asgi_server, token_create(user=owner, name="nb")[1])
    monkeypatch.setattr(client_module, "PAGE_SIZE", 4)  # three pages for nine examples
    frame = client.examples_diff([r.pk for r in gdpo], [r.pk for r in grpo])
    assert frame["example_id"].tolist() == EXPECTED_ORDER
    assert dict(zip(frame["example_id"], frame["category"], strict=True)) == EXPECTED_CATEGORY
    expected = pd.DataFrame([row_dict(r) for r in partways(gdpo, grpo).rows])
    pd.testing.assert_frame_equal(frame, expected, check_dtype=False)
    assert frame.attrs["counts"]["learned_a"] == 4 and frame.attrs["notes"] == []
    e8 = frame.set_index("example_id").loc["e8"]
    assert e8["a_late"] == pytest.approx(2 / 3) and e8["b_late"] == pytest.approx(1 / 3) and e8["a_runs"] == 3

    one = client.examples_diff(gdpo[2].pk, grpo[0].pk, kind="learned_b")
    assert "e8" in one["example_id"].tolist() and set(one["category"]) == {"learned_b"}
    assert client.examples_diff([r.pk for r in gdpo], [r.pk for r in grpo], solved=0.5).attrs["counts"]["solved_both"] == 8
    with pytest.raises(CohortAPIError) as refused:
        client.examples_diff(gdpo[0].pk, [])
    assert refused.value.status == 400 and "'b' names no run" in str(refused.value)
