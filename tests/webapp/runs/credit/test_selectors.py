"""Module credit against the hand computation on a constructed trajectory set, and on real MHGPO
toy steps (the trainer's own Fork-on-First sampling, backward propagation and GRPO advantages)."""

import statistics

import pytest

from tests.webapp.runs.credit.builders import (
    ADVANTAGES,
    ANSWERER_LOCAL,
    REWARDS,
    REWRITER_LOCAL,
    VARIANCES,
    call,
    constructed_step,
    drifting_mhgpo_step,
    group,
    on_chain,
    rollout,
    step_event,
)
from tests.webapp.runs.seeding import (
    constant_step_event,
    hover_step_event,
    ingest,
    make_run,
    mhgpo_step_event,
)
from trainer.algorithms.metrics import token_f1
from webapp.runs.credit.change import output_change
from webapp.runs.credit.report import run_credit, step_report
from webapp.runs.credit.selectors import step_credit
from webapp.runs.params import BadParam

pytestmark = pytest.mark.django_db


@pytest.fixture
def constructed(owner):
    run = on_chain(make_run(owner, config={"strategy": "mhgpo"}))
    ingest(run, [constructed_step(1), constructed_step(2)])
    return run


def _mass(step, module):
    return sum(abs(adv) for _, adv, padded in ADVANTAGES[step][module] if not padded) + (
        0.5 * (len(VARIANCES[step][module]) - 1))  # the one-member extra groups


def test_shares_variance_and_correlation_equal_the_hand_computation(constructed):
    credit = step_credit(constructed, first=1, last=2)
    assert credit.steps == [1, 2] and credit.modules == ["answerer", "rewriter"] and credit.advantages_stored
    for step in (1, 2):
        total = _mass(step, "rewriter") + _mass(step, "answerer")
        for module in ("rewriter", "answerer"):
            cell = credit.of(module, step)
            assert cell.mass == _mass(step, module)
            assert cell.share == _mass(step, module) / total
            assert cell.variance == pytest.approx(statistics.mean(VARIANCES[step][module]), abs=1e-12)
        assert credit.of("rewriter", step).share + credit.of("answerer", step).share == pytest.approx(1.0, abs=1e-15)
    # The padded copy (advantage 2.0) is left out: 1 + 0.5 + 0.5 at step 1.
    assert credit.of("rewriter", 1).mass == 2.0 and credit.of("answerer", 1).mass == 2.5
    assert credit.of("rewriter", 1).share == 2.0 / 4.5
    # Local reward = propagated + agent-specific (MHGPO Eq. 4-5), against the rollout's final reward.
    for module, local in (("rewriter", REWRITER_LOCAL), ("answerer", ANSWERER_LOCAL)):
        expected = statistics.correlation([p + s for p, s in local], list(REWARDS))
        cell = credit.of(module, 1)
        assert cell.pairs == 3 and not cell.final_reward
        assert cell.correlation == pytest.approx(expected, abs=1e-12)
    assert credit.of("rewriter", 1).correlation == pytest.approx(0.5447047794019222, abs=1e-12)


def test_the_token_f1_change_equals_the_hand_computation(constructed):
    change = output_change(constructed, 1, 2)
    assert change.absent == ""
    rewriter, answerer = change.modules["rewriter"], change.modules["answerer"]
    # rewriter at step 2: rollouts 0 and 2 are one call (same prompt and completion), so two answers:
    # "capital of france" (F1 1 against itself) and "largest city in france" (best: "france capital city").
    best = max(token_f1("largest city in france", e) for e in ("capital of france", "france capital city"))
    assert best == pytest.approx(4 / 7)
    assert rewriter.answers == 2 and rewriter.f1 == pytest.approx((1.0 + 4 / 7) / 2)
    assert rewriter.change == pytest.approx(3 / 14)
    # answerer: "Paris." = "paris" (1), "marseille" (0), "paris capital" vs "paris is the capital" (0.8);
    # q9 was not drawn at step 1: counted, not scored.
    assert answerer.answers == 3 and answerer.unmatched == 1
    assert answerer.f1 == pytest.approx((1.0 + 0.0 + 0.8) / 3) and answerer.change == pytest.approx(0.4)


def test_the_run_summary_is_the_mean_over_the_window(constructed):
    report = run_credit(constructed)
    assert report.window == (1, 2) and not report.message
    rows = {r.module: r for r in report.summary}
    shares = [_mass(s, "rewriter") / (_mass(s, "rewriter") + _mass(s, "answerer")) for s in (1, 2)]
    assert rows["rewriter"].share == pytest.approx(statistics.mean(shares), abs=1e-12)
    assert rows["rewriter"].share + rows["answerer"].share == pytest.approx(1.0, abs=1e-12)
    assert rows["answerer"].variance == pytest.approx((0.4 + 0.9) / 2, abs=1e-12)
    assert rows["rewriter"].change.change == pytest.approx(3 / 14)
    assert (report.change.from_step, report.change.to_step) == (1, 2)
    assert len(report.chart) == 2 and all(line["segments"] for line in report.chart)


def test_the_step_report_compares_with_the_earliest_stored_step(constructed):
    first = step_report(constructed, 1, 1)
    assert "earliest step" in first.change.absent and first.summary[0].change is None
    second = step_report(constructed, 2, 1)
    assert second.window == (2, 2) and second.change.from_step == 1
    assert {r.module: r.share for r in second.summary} == {"answerer": 3.0 / 3.5, "rewriter": 0.5 / 3.5}
    with pytest.raises(BadParam):
        step_report(constructed, 2, 1, from_step=2)
    with pytest.raises(BadParam):
        run_credit(constructed, from_step=2, to_step=1)


def test_mmgrpo_modules_train_on_the_final_reward_so_r_is_one(owner):
    run = on_chain(make_run(owner, config={"strategy": "mmgrpo", "padding": "fill"}))
    ingest(run, [hover_step_event(s, examples=3, rollouts=4) for s in (1, 2)])
    credit = step_credit(run, first=1, last=2)
    assert credit.modules == ["create_query", "summarize"]
    for module in credit.modules:
        for step in credit.steps:
            cell = credit.of(module, step)
            assert cell.final_reward and cell.correlation == 1.0, (module, step)
        row = next(r for r in credit.summary() if r.module == module)
        assert "final reward itself" in row.correlation_note


def test_a_constant_final_reward_leaves_the_correlation_undefined(owner):
    run = make_run(owner)
    ingest(run, [constant_step_event(1)])
    cell = step_credit(run, first=1, last=1).of("answerer", 1)
    assert cell.correlation is None and "same in every rollout" in cell.correlation_note
    assert cell.share is None  # every advantage 0: no mass to share
    assert "one module" in run_credit(run).message


def test_a_chain_whose_rollouts_all_end_at_its_first_module_says_so(owner):
    """SmolLM2 writes no rewriter queries the search program parses: every rollout ends at the first
    module, and the section names the program's modules rather than calling it a one-module program."""
    run = on_chain(make_run(owner))
    rollouts = [rollout(f"t{i}", "q", 0.0, [call(f"c{i}", "rewriter", "no queries")]) for i in range(2)]
    ingest(run, [step_event(1, rollouts, [group("rewriter", "q", 0.0, [("t0", "c0", 0.0), ("t1", "c1", 0.0)])])])
    message = run_credit(run).message
    assert "Only rewriter of the program's modules (rewriter, reranker, answerer) was called" in message


def test_two_steps_that_drew_no_common_input_say_the_change_is_unknown(owner):
    """word_math or toy_format draw fresh examples every step: no answer has an earlier one to compare."""
    run = on_chain(make_run(owner))
    for step, example in ((1, "q1"), (2, "q2")):
        rollouts = [rollout(f"t{step}{i}", example, float(i), [call(f"c{step}{i}", "rewriter", f"query {i}"),
                                                            call(f"d{step}{i}", "answerer", f"answer {i}")])
                    for i in range(2)]
        groups = [group(m, example, 0.5, [(f"t{step}0", f"{c}{step}0", -1.0), (f"t{step}1", f"{c}{step}1", 1.0)])
                  for m, c in (("rewriter", "c"), ("answerer", "d"))]
        ingest(run, [step_event(step, rollouts, groups)])
    change = output_change(run, 1, 2)
    assert all(m.change is None for m in change.modules.values())
    assert "Step 2 drew none of the inputs step 1 drew" in change.absent


def test_a_run_without_advantages_says_so(owner):
    run = on_chain(make_run(owner))
    ingest(run, [constructed_step(1, with_groups=False), constructed_step(2, with_groups=False)])
    report = run_credit(run)
    assert report.no_advantages and all(r.share is None for r in report.summary)
    assert {r.module for r in report.summary} == {"rewriter", "answerer"}
    assert report.summary[0].change is not None  # the change is read from the texts all the same


def test_retention_that_dropped_the_earlier_step_is_named(owner):
    run = on_chain(make_run(owner, config={"strategy": "mhgpo", "keep_rollouts_last_steps": 1}))
    ingest(run, [constructed_step(1), constructed_step(2)])
    run.refresh_from_db()  # its current step, which retention reads
    report = run_credit(run)
    assert "Only one step" in report.change.absent and "retention keeps the rollouts of the newest 1" in report.change.absent
    asked = run_credit(run, from_step=1, to_step=2)
    assert "dropped by this run's retention" in asked.change.absent
    assert "dropped by this run's retention" in step_report(run, 2, 1, from_step=1).change.absent


@pytest.mark.parametrize("build, questions, group_size", [
    (mhgpo_step_event, 2, 3), (mhgpo_step_event, 4, 2), (drifting_mhgpo_step, 3, 3), (drifting_mhgpo_step, 5, 4)])
def test_on_real_mhgpo_toy_steps_the_shares_add_up_to_one(owner, build, questions, group_size):
    run = on_chain(make_run(owner, config={"strategy": "mhgpo", "sampling": "fof"}))
    events = [build(s, questions=questions, group_size=group_size) for s in (1, 2, 3)]
    ingest(run, events)
    credit = step_credit(run, first=1, last=3)
    assert credit.steps == [1, 2, 3] and set(credit.modules) == {"rewriter", "reranker", "answerer"}
    for event in events:
        step = event["step"]
        shares = [credit.of(m, step).share for m in credit.modules]
        assert sum(shares) == pytest.approx(1.0, abs=1e-12), step
        # The same shares straight from the trainer's event: Σ|A| of each module's unpadded members.
        module_of = {(t["trajectory_id"], c["call_id"]): c["module"] for t in event["rollouts"] for c in t["calls"]}
        mass = {}
        for g in event["groups"]:
            for m in g["members"]:
                if not m["padded"] and m["advantage"] is not None:
                    module = module_of[(m["trajectory_id"], m["call_id"])]
                    mass[module] = mass.get(module, 0.0) + abs(m["advantage"])
        total = sum(mass.values())
        for module in credit.modules:
            assert credit.of(module, step).share == pytest.approx(mass.get(module, 0.0) / total, abs=1e-12)
        # The rewriter's local reward is its propagated (mean of its forks') reward plus its penalty.
        pairs = [(c["propagated_reward"] + c["specific_reward"], t["reward"]) for t in event["rollouts"]
                 for c in t["calls"] if c["module"] == "rewriter" and c["propagated_reward"] is not None]
        xs, ys = zip(*pairs, strict=True)
        cell = credit.of("rewriter", step)
        if len(set(xs)) > 1 and len(set(ys)) > 1:
            assert cell.correlation == pytest.approx(statistics.correlation(xs, ys), abs=1e-9)
        else:
            assert cell.correlation is None


def test_the_run_page_reads_a_window_of_the_newest_steps(owner, monkeypatch):
    monkeypatch.setattr("webapp.runs.credit.selectors.WINDOW_STEPS", 3)
    run = on_chain(make_run(owner, config={"strategy": "mhgpo"}))
    ingest(run, [drifting_mhgpo_step(s) for s in range(1, 7)])
    report = run_credit(run)
    assert report.credit.steps == [4, 5, 6] and report.window == (4, 6)
    assert (report.change.from_step, report.change.to_step) == (1, 6)  # the change: earliest and newest stored


def test_a_large_step_is_compared_on_a_bounded_sample_of_examples(owner, monkeypatch):
    monkeypatch.setattr("webapp.runs.credit.change.MAX_EXAMPLES", 2)
    run = on_chain(make_run(owner, config={"strategy": "mhgpo"}))
    ingest(run, [drifting_mhgpo_step(s, questions=4) for s in (1, 2)])
    sampled = output_change(run, 1, 2)
    assert "Measured on 2 of the 4 examples" in sampled.sampled
    monkeypatch.setattr("webapp.runs.credit.change.MAX_EXAMPLES", 64)
    whole = output_change(run, 1, 2)
    assert whole.sampled == ""
    # q0 and q1 (the first two by id) are the sample: each module's answers there, G per fork.
    assert sum(m.answers + m.unmatched for m in sampled.modules.values()) < sum(
        m.answers + m.unmatched for m in whole.modules.values())


def test_the_window_of_a_run_without_groups_is_bounded_too(owner, monkeypatch):
    monkeypatch.setattr("webapp.runs.credit.selectors.WINDOW_STEPS", 1)
    run = on_chain(make_run(owner))
    ingest(run, [constructed_step(1, with_groups=False), constructed_step(2, with_groups=False)])
    assert run_credit(run).credit.steps == [2]
