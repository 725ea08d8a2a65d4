"""Call texts stored once per (step, example), compressed: the codec is exact, readers get the texts
back in two queries, and old rows with their own text columns read as before."""

import pytest

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.runs.ingest.texts import decode_texts, encode_texts, fill_call_texts
from webapp.runs.models import CallText, ModuleCall

pytestmark = pytest.mark.django_db

CALLS = [  # (rollout index, prompt, messages, completion): two rollouts sharing their first prompt
    (0, "Claim: x\nNotes: \n", None, "Query: a"),
    (0, "Claim: x\nNotes: a\n", [{"role": "user", "content": "Claim: x"}], ""),
    (1, "Claim: x\nNotes: \n", None, "Query: b \x00é"),
    (1, "Totally different", None, "done"),
    (3, "", None, ""),
]


def test_the_codec_round_trips_exactly_including_empty_texts_and_unicode():
    decoded = decode_texts(encode_texts(CALLS))
    assert decoded == {(0, 0): (CALLS[0][1], None, "Query: a"), (0, 1): (CALLS[1][1], CALLS[1][2], ""),
                       (1, 0): (CALLS[2][1], None, "Query: b \x00é"), (1, 1): ("Totally different", None, "done"),
                       (3, 0): ("", None, "")}


def test_shared_prefixes_are_stored_once():
    long = "Instruction: " + "verify the claim carefully. " * 40
    calls = [(r, long + f"Claim {r % 3}", None, f"answer {r}") for r in range(12)]
    raw = sum(len(p) + len(c) for _, p, _, c in calls)
    assert len(encode_texts(calls)) < raw / 10


def test_ingest_stores_one_text_row_per_step_and_example_and_readers_get_every_text_back(owner, django_assert_num_queries):
    run = make_run(owner)
    event = hover_step_event(1, examples=3, rollouts=4)
    ingest(run, [event])
    assert CallText.objects.filter(run=run).count() == 3
    calls = list(ModuleCall.objects.filter(rollout__run=run).select_related("rollout").order_by("rollout__index", "position"))
    assert all(c.prompt is None and c.completion is None for c in calls)
    with django_assert_num_queries(2):
        fill_call_texts(calls)
    sent = [(t["example_id"], c["prompt"], c["completion"]) for t in event["rollouts"] for c in t["calls"]]
    assert [(c.rollout.example_id, c.prompt, c.completion) for c in calls] == sent


def test_calls_stored_with_their_own_text_read_as_before(owner, django_assert_num_queries):
    run = make_run(owner)
    ingest(run, [hover_step_event(1, examples=1, rollouts=2)])
    ModuleCall.objects.filter(rollout__run=run).update(prompt="old prompt", completion="old completion")
    CallText.objects.filter(run=run).delete()
    calls = list(ModuleCall.objects.filter(rollout__run=run))
    with django_assert_num_queries(0):
        fill_call_texts(calls)
    assert {(c.prompt, c.completion) for c in calls} == {("old prompt", "old completion")}
