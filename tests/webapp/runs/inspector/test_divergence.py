"""Where the best and the worst rollout part: pure unit tests of webapp.runs.inspector.divergence, then the
grid of a stored run (MHGPO forks that share their calls before the fork point)."""

import math
import re

import pytest

from webapp.runs.ingest.tokens import Alternative, CallTokens
from webapp.runs.inspector.divergence import (
    CallText,
    TokenChoice,
    Trace,
    find_divergence,
    first_token_difference,
    first_word_difference,
    word_context,
)
from webapp.runs.inspector.token_pieces import visible_whitespace


def trace(index, reward, *calls):
    """calls: (module, invocation, completion) triples in call order."""
    return Trace(index, reward, [CallText(*c) for c in calls])


SHARED = ("rewriter", 0, "find the capital of France")


def test_first_differing_call_and_word():
    good = trace(0, 0.9, SHARED, ("answerer", 0, "The capital is Paris today"))
    bad = trace(1, 0.1, SHARED, ("answerer", 0, "The capital is Lyon today"))
    d = find_divergence([bad, good])
    assert (d.best.index, d.worst.index) == (0, 1)
    assert (d.position, d.call_number, d.best_call.label, d.worst_call.label) == (1, 2, "answerer[0]", "answerer[0]")
    assert (d.word_index, d.word_number, d.best_word, d.worst_word) == (3, 4, "Paris", "Lyon")
    assert d.best_context == "The capital is [Paris] today"
    assert d.summary == ("Best (r=0.90, rollout 0) and worst (r=0.10, rollout 1) part at answerer[0] call 2, "
                         "word 4: 'Paris' vs 'Lyon'.")


def test_words_are_split_on_any_whitespace():
    assert first_word_difference("a  b\nc", "a b c") is None  # same words, other spacing
    assert first_word_difference("a b c", "a b") == 2  # one side ends first
    assert first_word_difference("x", "y z") == 0


def test_one_completion_is_a_prefix_of_the_other():
    d = find_divergence([trace(0, 1.0, ("a", 0, "yes because")), trace(1, 0.0, ("a", 0, "yes"))])
    assert (d.word_index, d.best_word, d.worst_word) == (1, "because", "")
    assert d.worst_context == "yes […]"
    assert d.summary.endswith("word 2: 'because' vs (end of text).")


def test_a_call_missing_on_one_side():
    # The worst rollout stopped after the shared call (its program failed there).
    d = find_divergence([trace(0, 1.0, SHARED, ("answerer", 0, "Paris")), trace(1, -1.0, SHARED)])
    assert (d.position, d.best_call.label, d.worst_call, d.word_index) == (1, "answerer[0]", None, None)
    assert d.missing_side == "worst"
    assert d.summary.endswith("part at answerer[0] call 2: the worst rollout has no call there, the best one does.")
    # ... and the other way round: the best one made fewer calls.
    d = find_divergence([trace(0, 1.0, SHARED), trace(1, 0.0, SHARED, ("answerer", 0, "Paris"))])
    assert d.missing_side == "best" and d.worst_call.label == "answerer[0]"


def test_a_different_module_at_the_same_position_differs_even_with_the_same_text():
    d = find_divergence([trace(0, 1.0, ("search", 0, "same")), trace(1, 0.0, ("answer", 0, "same"))])
    assert (d.position, d.place, d.word_index) == (0, "search[0] vs answer[0]", 0)


def test_identical_calls_with_different_rewards():
    d = find_divergence([trace(0, 0.2, SHARED), trace(1, 0.7, SHARED)])
    assert d.identical and d.position is None and d.best.index == 1
    assert "made identical calls" in d.summary and "stochastic reward" in d.summary


@pytest.mark.parametrize("traces", [
    [],
    [trace(0, 1.0, SHARED)],  # fewer than two rollouts
    [trace(0, 0.5, SHARED), trace(1, 0.5, ("a", 0, "other"))],  # all rewards equal
    [trace(0, 1.0, SHARED), trace(1, None, ("a", 0, "x"))],  # one rewarded rollout only
])
def test_no_best_and_worst(traces):
    assert find_divergence(traces) is None


def test_ties_go_to_the_lowest_index():
    traces = [trace(4, 1.0, ("a", 0, "four")), trace(2, 1.0, ("a", 0, "two")), trace(3, 0.0, ("a", 0, "three")),
              trace(1, 0.0, ("a", 0, "one")), trace(5, None, ("a", 0, "unrewarded"))]
    d = find_divergence(traces)
    assert (d.best.index, d.worst.index) == (2, 1)
    assert (d.best_word, d.worst_word) == ("two", "one")


def test_word_context_is_short_and_marks_the_word():
    text = " ".join(f"w{i}" for i in range(20))
    assert word_context(text, 10) == "… w7 w8 w9 [w10] w11 w12 w13 …"
    assert word_context(text, 0) == "[w0] w1 w2 w3 …"
    assert word_context("a b", 2) == "a b […]"  # past the end of the shorter completion


def test_long_words_are_cut_in_the_summary():
    d = find_divergence([trace(0, 1.0, ("a", 0, "x" * 100)), trace(1, 0.0, ("a", 0, "y"))])
    assert "'" + "x" * 39 + "…'" in d.summary


# --- the first differing token (per-token details, issue 45) ---------------------------------------------


def answer(text: str, *pieces: str, probs=None, entropy=None, topk=None) -> tuple:
    """An answerer call whose completion `text` is `pieces`, with the log-probs of `probs`."""
    tokens = CallTokens(list(pieces), trainer=[math.log(p) for p in probs] if probs else None,
                        entropy=list(entropy) if entropy else None,
                        topk={i: [Alternative(*a) for a in alts] for i, alts in (topk or {}).items()})
    return ("answerer", 0, text, tokens)


PARIS = answer("It is Paris", "It", " is", " Paris", probs=[0.9, 0.8, 0.6], entropy=[0.2, 0.3, 1.5],
               topk={2: [(" Paris", 0.6), (" Lyon", 0.3)]})
LYON = answer("It is Lyon", "It", " is", " Lyon", probs=[0.9, 0.8, 0.3], entropy=[0.2, 0.3, 1.5],
              topk={2: [(" Paris", 0.6), (" Lyon", 0.3)]})


def test_first_token_difference():
    assert first_token_difference(["a", "b"], ["a", "c"]) == 1
    assert first_token_difference(["a", "b"], ["a"]) == 1  # one side ends first
    assert first_token_difference(["a"], ["a"]) is None
    assert first_token_difference([], ["x"]) == 0


def test_the_first_token_they_chose_differently_with_its_probabilities_and_entropy():
    d = find_divergence([trace(1, 0.1, SHARED, LYON), trace(0, 0.9, SHARED, PARIS)])
    assert (d.position, d.word_index, d.token_index, d.token_number) == (1, 2, 2, 3)
    assert d.best_token == TokenChoice(" Paris", pytest.approx(0.6), 1.5, (("·Paris", 0.6, True), ("·Lyon", 0.3, False)))
    assert d.worst_token.piece == " Lyon" and d.worst_token.prob == pytest.approx(0.3)
    assert d.at_fork and d.token_entropy == 1.5
    assert d.token_summary == ("First token they chose differently: token 3, '·Paris' (p=0.60) vs '·Lyon' (p=0.30), "
                               "entropy 1.50 nats there: a high-entropy fork (at least 0.69 nats; its alternatives "
                               "are stored).")
    assert d.best_token.alternatives_text == "'·Paris' 0.60 (chosen), '·Lyon' 0.30"
    assert d.worst_token.alternatives_text == "'·Paris' 0.60, '·Lyon' 0.30 (chosen)"


def test_a_fork_below_the_high_entropy_threshold_is_not_called_high_entropy():
    # A quiet step's forks (its top entropies) can be nearly certain: 0.19 nats is a fork, not a hesitation.
    calm = {2: [(" Paris", 0.97), (" Lyon", 0.02)]}
    best = answer("It is Paris", "It", " is", " Paris", probs=[0.9, 0.8, 0.97], entropy=[0.1, 0.1, 0.19], topk=calm)
    worst = answer("It is Lyon", "It", " is", " Lyon", probs=[0.9, 0.8, 0.02], entropy=[0.1, 0.1, 0.19], topk=calm)
    d = find_divergence([trace(0, 1.0, best), trace(1, 0.0, worst)])
    assert d.at_fork and d.token_entropy == 0.19
    assert "high-entropy" not in d.token_summary
    assert d.token_summary.endswith("0.19 nats there: a fork (its alternatives are stored), though the policy was "
                                    "fairly sure there (under 0.69 nats).")


def test_byte_tokens_are_told_apart_by_their_bytes_and_marked_by_id():
    # "😀" (F0 9F 98 80) split into byte tokens: decoded one by one, each reads U+FFFD.
    def emoji(second: str, sampled_id: int) -> tuple:
        tokens = CallTokens(["Hi", " ", "\ufffd", "\ufffd"], trainer=[-0.1, -0.1, -0.1, -0.2], entropy=[0.1, 0.1, 0.1, 1.2],
                            topk={3: [Alternative("\ufffd", 0.5, 10, "9880"), Alternative("\ufffd", 0.4, 11, "9881")]},
                            sampled_ids={3: sampled_id}, byte_pieces={2: "f09f", 3: second})
        return ("answerer", 0, "Hi \U0001F600" if second == "9880" else "Hi \U0001F601", tokens)

    d = find_divergence([trace(0, 1.0, emoji("9880", 10)), trace(1, 0.0, emoji("9881", 11))])
    assert d.token_index == 3  # the same text, other bytes
    assert d.best_token.text == "'⟨98\u00a080⟩' (p=0.82)" and d.worst_token.text.startswith("'⟨98\u00a081⟩'")
    assert d.best_token.alternatives_text == "'⟨98\u00a080⟩' 0.50 (chosen), '⟨98\u00a081⟩' 0.40"
    assert d.worst_token.alternatives_text == "'⟨98\u00a080⟩' 0.50, '⟨98\u00a081⟩' 0.40 (chosen)"
    assert "\ufffd" not in d.token_summary + d.best_token.alternatives_text


def test_a_differing_token_without_alternatives_is_not_a_fork():
    best = answer("It is Paris", "It", " is", " Paris", probs=[0.9, 0.8, 0.6])
    worst = answer("It is Lyon", "It", " is", " Lyon")  # no log-probs, no entropy stored
    d = find_divergence([trace(0, 1.0, best), trace(1, 0.0, worst)])
    assert d.token_index == 2 and not d.at_fork and d.token_entropy is None
    assert d.worst_token == TokenChoice(" Lyon", None, None)
    assert d.token_summary == ("First token they chose differently: token 3, '·Paris' (p=0.60) vs '·Lyon': "
                               "not a stored fork (no alternatives kept there).")


def test_a_completion_that_ends_first_parts_at_its_end():
    d = find_divergence([trace(0, 1.0, answer("yes because", "yes", " because", probs=[0.5, 0.25])),
                         trace(1, 0.0, answer("yes", "yes", "<|im_end|>", probs=[0.5, 0.75]))])
    assert d.token_index == 1 and d.worst_token.piece == "<|im_end|>"
    d = find_divergence([trace(0, 1.0, answer("yes because", "yes", " because", probs=[0.5, 0.25])),
                         trace(1, 0.0, answer("yes", "yes", probs=[0.5]))])
    assert d.token_index == 1 and d.worst_token == TokenChoice("", None, None)
    assert "'·because' (p=0.25) vs (end of text)" in d.token_summary


def test_no_token_parting_without_details_on_both_sides_or_without_a_call():
    d = find_divergence([trace(0, 1.0, SHARED, PARIS), trace(1, 0.0, SHARED, ("answerer", 0, "It is Lyon"))])
    assert d.word_index == 2 and d.token_index is None and d.token_summary == "" and not d.at_fork
    d = find_divergence([trace(0, 1.0, SHARED, PARIS), trace(1, 0.0, SHARED)])  # the worst has no call there
    assert d.missing_side == "worst" and d.token_index is None and d.token_summary == ""


def test_whitespace_is_drawn():
    assert visible_whitespace(" a\n\tb") == "·a⏎⇥b"


# --- on stored runs: the grid, the page ------------------------------------------------------------

def forked_after_a_shared_call_event(step: int = 1) -> dict:
    """MHGPO fork_on at the reranker (Algorithm 2): the rewriter's call runs once and is shared by
    the three forks, which then rank and answer differently. Rewards (i % 3) / 2: fork 2 is best
    (1.0), fork 0 worst (0.0)."""
    from tests.webapp.runs.seeding import _mhgpo
    from trainer.rollouts.sampling import LinearChain, fork_on

    texts = {"rewriter": ["capital of France"],
             "reranker": ["passage 3 then passage 1", "passage 1 then passage 3", "passage 3 then passage 2"],
             "answerer": ["It is Lyon", "It is Paris", "It is Paris"]}

    def generate(agent, prompts):
        return [texts[agent][i % len(texts[agent])] for i, _ in enumerate(prompts)]

    trajectories = fork_on(LinearChain(("rewriter", "reranker", "answerer")), "question 0", "reranker",
                           group_size=3, generate=generate, example_id="q0")
    return _mhgpo(step, trajectories)


@pytest.fixture
def forked_run(owner):
    from tests.webapp.runs.seeding import ingest, make_run

    run = make_run(owner, config={"strategy": "mhgpo", "sampling": "fof"})
    ingest(run, [forked_after_a_shared_call_event()])
    return run


@pytest.mark.django_db
def test_forks_share_their_calls_before_the_fork_and_part_after_it(forked_run):
    from webapp.runs.inspector.divergence import grid_divergence
    from webapp.runs.inspector.steps import trajectory_grid

    grid = trajectory_grid(forked_run, 1, "q0")
    # The shared rewriter call is stored under every fork with the same completion.
    assert {row.cells[0].call.completion for row in grid.rows} == {"capital of France"}
    d = grid_divergence(grid)
    assert (d.best.index, d.worst.index, d.best.reward, d.worst.reward) == (2, 0, 1.0, 0.0)
    assert (d.position, d.best_call.label, d.word_index, d.best_word, d.worst_word) == (1, "reranker[0]", 4, "2", "1")
    assert d.summary == ("Best (r=1.00, rollout 2) and worst (r=0.00, rollout 0) part at reranker[0] call 2, "
                         "word 5: '2' vs '1'.")


@pytest.mark.django_db
def test_inspector_page_marks_best_worst_and_where_they_part(client, owner, forked_run):
    from django.urls import reverse

    client.force_login(owner)
    html = client.get(reverse("runs:trajectories", args=[forked_run.pk, 1]), {"example": "q0"}).content.decode()
    summary = html[html.index('id="divergence-summary"'):html.index('id="traj-grid"')]
    assert "part at reranker[0] call 2, word 5: &#x27;2&#x27; vs &#x27;1&#x27;." in summary
    assert "best: <code>… 3 then passage [2]</code>" in summary and "worst: <code>… 3 then passage [1]</code>" in summary
    rows = dict(re.findall(r'data-index="(\d)".*?<th class="rollout-head">(.*?)</th>', html, re.S))
    assert '<span class="badge best">best</span>' in rows["2"] and '<span class="badge worst">worst</span>' in rows["0"]
    assert "badge best" not in rows["1"] and "badge worst" not in rows["1"]
    cells = re.findall(r'<td class="([^"]*\bdiverge\b[^"]*)">(.*?)</td>', html, re.S)
    assert len(cells) == 2
    for _, body in cells:
        assert '<div class="diverge-note">best and worst part here (word 5)</div>' in body
    words = re.findall(r'<mark class="diverge-word">(.*?)</mark>', html)
    assert sorted(words) == ["1", "2"]


@pytest.mark.django_db
def test_no_marks_when_every_reward_is_equal(client, owner):
    from django.urls import reverse

    from tests.webapp.runs.seeding import collapse_step_event, ingest, make_run

    run = make_run(owner)
    event = collapse_step_event(members=4)
    for rollout in event["rollouts"]:
        rollout["reward"] = 0.5
    ingest(run, [event])
    client.force_login(owner)
    html = client.get(reverse("runs:trajectories", args=[run.pk, 1]), {"example": "q-collapse"}).content.decode()
    assert "divergence-summary" not in html and "diverge" not in html and "badge best" not in html


@pytest.mark.django_db
def test_missing_call_cell_is_marked_in_the_grid(client, owner):
    """The worst fork ranks as the best one did but ends before answering: they part at a call
    the worst one lacks, and its missing cell is marked."""
    from django.urls import reverse

    from tests.webapp.runs.seeding import ingest, make_run

    event = forked_after_a_shared_call_event()
    best, worst = event["rollouts"][2], event["rollouts"][0]
    worst["calls"][1]["completion"] = best["calls"][1]["completion"]
    dropped = worst["calls"].pop()["call_id"]
    for group in event["groups"]:
        group["members"] = [m for m in group["members"] if m["call_id"] != dropped]
    run = make_run(owner, config={"strategy": "mhgpo"})
    ingest(run, [event])
    client.force_login(owner)
    response = client.get(reverse("runs:trajectories", args=[run.pk, 1]), {"example": "q0"})
    d = response.context["divergence"]
    assert (d.position, d.best_call.label, d.worst_call, d.missing_side) == (2, "answerer[0]", None, "worst")
    html = response.content.decode()
    assert "part at answerer[0] call 3: the worst rollout has no call there, the best one does." in html
    cells = re.findall(r'<td class="([^"]*\bdiverge\b[^"]*)">(.*?)</td>', html, re.S)
    # Rows in rollout order: the worst (#0, its answerer cell missing), then the best (#2).
    assert ["missing" in classes.split() for classes, _ in cells] == [True, False]
    assert "best and worst part here: the worst rollout has no call 3" in html
    assert "diverge-word" not in html  # no word to point at when a whole call is missing


@pytest.mark.django_db
def test_the_inspector_marks_the_first_token_where_best_and_worst_part(client, owner):
    import json

    from django.urls import reverse

    from tests.webapp.runs.seeding import ingest, make_run, with_token_details
    from webapp.runs.inspector.divergence import grid_divergence
    from webapp.runs.inspector.steps import trajectory_grid

    run = make_run(owner, config={"strategy": "mhgpo", "sampling": "fof", "token_details": "all"})
    ingest(run, [with_token_details(forked_after_a_shared_call_event(), fork_share=0.5)])
    d = grid_divergence(trajectory_grid(run, 1, "q0"))
    # "passage 3 then passage 2" vs "passage 3 then passage 1", a piece per word and space: token 9 parts.
    assert (d.best.index, d.worst.index, d.position, d.token_index) == (2, 0, 1, 8)
    assert (d.best_token.piece, d.worst_token.piece) == ("2", "1")
    assert d.best_token.prob is not None and d.token_entropy is not None
    client.force_login(owner)
    html = client.get(reverse("runs:trajectories", args=[run.pk, 1]), {"example": "q0"}).content.decode()
    line = re.search(r'<span class="divergence-token" id="divergence-token">(.*?)</span>\s*</p>', html, re.S).group(1)
    assert "First token they chose differently: token 9, &#x27;2&#x27; (p=" in line
    assert ("a high-entropy fork" in line) == d.at_fork
    links = [a.replace("&amp;", "&") for a in re.findall(r'<a class="parting-link" href="([^"]+)">', line)]
    assert [re.search(r"rollout=(\d)&call=(\d)&token=(\d+)", a).groups() for a in links] == [("2", "1", "8"), ("0", "1", "8")]
    payload = json.loads(re.search(r'<script id="token-data" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert payload["diverge"] == {"2-1": 8, "0-1": 8}  # the token highlighted in both cells
