"""Per-token details stored beside the texts (webapp/runs/ingest/tokens.py) and read back
(webapp/runs/inspector/token_reads.py)."""

import math

import pytest

from tests.webapp.runs.seeding import END_OF_TURN, hover_step_event, ingest, make_run, with_token_details
from webapp.runs.ingest.tokens import CallTokens, decode_tokens, encode_tokens
from webapp.runs.inspector.token_reads import advantage_shares, call_token_rows, fill_call_tokens, step_forks
from webapp.runs.models import CallText, ModuleCall

pytestmark = pytest.mark.django_db


def test_the_codec_round_trips_pieces_float16_values_and_forks():
    text = "Hé llo, wörld"
    details = {"pieces": ["H", "é", " llo", ",", " wörld", END_OF_TURN, "\x00"],
               "sampler": [-0.1, -2.5, None, -0.0001, -7.25, -0.5, float("nan")],
               "trainer": [-0.1, -2.4, -1.0, 0.0, -7.0, -0.5, -1.0],
               "entropy": [0.5, 1.25, 2.0, 0.0, 3.5, 0.1, float("inf")],
               "topk": [[4, [[" wörld", 0.25], [" world", 0.2]]], [99, [["x", 1.0]]]]}
    blob = encode_tokens([((0, 1), text, details), ((1, 0), "", {"pieces": []})])
    decoded = decode_tokens(blob, {(0, 1): text, (1, 0): ""})
    assert list(decoded) == [(0, 1)]  # a call without pieces is not stored
    tokens = decoded[(0, 1)]
    assert tokens.pieces == details["pieces"]
    assert tokens.sampler[:2] == pytest.approx([-0.1, -2.5], abs=5e-3) and tokens.sampler[2] is None
    assert tokens.sampler[6] is None and tokens.entropy[6] is None  # NaN and inf are unknown
    assert tokens.trainer == pytest.approx(details["trainer"], abs=5e-3)
    assert tokens.topk == {4: [(" wörld", 0.25, None, None), (" world", 0.2, None, None)]}  # one past the end: dropped
    assert tokens.logprob(2) == pytest.approx(-1.0) and tokens.mismatch(1) == pytest.approx(0.1, abs=5e-3)
    assert encode_tokens([((0, 0), "x", None)]) is None


def test_a_call_whose_arrays_are_absent_or_short_keeps_its_pieces():
    blob = encode_tokens([((0, 0), "ab", {"pieces": ["a", "b"], "entropy": [1.0]})])
    tokens = decode_tokens(blob, {(0, 0): "ab"})[(0, 0)]
    assert tokens.sampler is None and tokens.trainer is None and tokens.entropy == [1.0, None]


def test_storage_stays_within_eight_bytes_a_token_beyond_the_texts():
    event = with_token_details(hover_step_event(1, examples=4, rollouts=8), seed=3)
    for t in event["rollouts"]:
        for c in t["calls"]:
            c["tokens"].pop("topk")
    tokens = sum(len(c["tokens"]["pieces"]) for t in event["rollouts"] for c in t["calls"])
    blobs = [encode_tokens([((i, p), c["completion"], c["tokens"]) for i, t in enumerate(event["rollouts"])
                            for p, c in enumerate(t["calls"]) if t["example_id"] == example])
             for example in {t["example_id"] for t in event["rollouts"]}]
    assert sum(len(b) for b in blobs) / tokens <= 8


def test_ingest_stores_details_with_the_texts_and_readers_get_them_back(owner, django_assert_num_queries):
    run = make_run(owner)
    event = with_token_details(hover_step_event(1, examples=2, rollouts=4))
    ingest(run, [event])
    assert CallText.objects.filter(run=run, tokens__isnull=False).count() == 2
    calls = list(ModuleCall.objects.filter(rollout__run=run).order_by("rollout__index", "position"))
    with django_assert_num_queries(4):  # texts: 2; details: 2
        fill_call_tokens(calls)
    sent = [c["tokens"] for t in event["rollouts"] for c in t["calls"]]
    assert [c.tokens.pieces for c in calls] == [s["pieces"] for s in sent]
    assert all(c.tokens.entropy == pytest.approx(s["entropy"], abs=2e-3) for c, s in zip(calls, sent, strict=True))
    rows = call_token_rows(calls[0])
    assert len(rows["tokens"]) == len(sent[0]["pieces"]) and rows["tokens"][0][0] == sent[0]["pieces"][0]


def test_a_run_without_details_reads_none(owner):
    run = make_run(owner)
    ingest(run, [hover_step_event(1, examples=1, rollouts=2)])
    calls = list(ModuleCall.objects.filter(rollout__run=run))
    fill_call_tokens(calls)
    assert all(c.tokens is None for c in calls) and step_forks(run, 1, 1) == []


def test_step_forks_are_the_highest_entropy_positions_with_their_context(owner):
    run = make_run(owner)
    event = with_token_details(hover_step_event(1, examples=2, rollouts=4), fork_share=0.1)
    ingest(run, [event])
    forks = step_forks(run, 1, 1)
    assert forks and [f.entropy for f in forks] == sorted((f.entropy for f in forks), reverse=True)
    top = forks[0]
    trajectory = next(t for t in event["rollouts"] if t["example_id"] == top.example_id
                      and event["rollouts"].index(t) == top.rollout)
    details = trajectory["calls"][top.position]["tokens"]
    assert top.chosen == details["pieces"][top.token]
    assert top.before == tuple((piece, None) for piece in details["pieces"][max(0, top.token - 12):top.token])
    assert top.module == trajectory["calls"][top.position]["module"]
    assert top.chosen_prob == pytest.approx(math.exp(details["trainer"][top.token]), rel=5e-3)
    assert len(step_forks(run, 1, 1, limit=3)) == 3


def test_advantage_shares_weigh_by_the_truncated_importance_weight():
    tokens = CallTokens(pieces=["a", "b"], sampler=[-1.0, -1.0], trainer=[-1.0, 0.0])
    assert advantage_shares(tokens, 2.0, cap=None) == [1.0, 1.0]
    assert advantage_shares(tokens, 2.0, cap=2.0) == [1.0, pytest.approx(2.0)]  # e^1 capped at 2
    assert advantage_shares(tokens, None, cap=2.0) == [None, None]


def test_retention_drops_a_step_s_details_with_its_texts_and_storage_counts_them(owner):
    from webapp.runs.ingest.retention import storage_recount
    from webapp.runs.models import Run

    run = make_run(owner, config={"keep_rollouts_last_steps": 1})
    plain = make_run(owner, config={"keep_rollouts_last_steps": 1})
    for step in (1, 2):
        ingest(run, [with_token_details(hover_step_event(step, examples=1, rollouts=3), seed=step)])
        ingest(plain, [hover_step_event(step, examples=1, rollouts=3)])
    assert set(CallText.objects.filter(run=run).values_list("step", flat=True)) == {2}
    assert CallText.objects.get(run=run).tokens is not None
    stored = Run.objects.get(pk=run.pk).storage_bytes
    assert stored == storage_recount(run) > Run.objects.get(pk=plain.pk).storage_bytes
