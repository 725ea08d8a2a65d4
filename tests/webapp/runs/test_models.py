import itertools

import pytest
from django.db import IntegrityError, transaction

from tests.webapp.runs.factories import make_run
from webapp.runs.models import Group, GroupMember, InvalidTransition, ModuleCall, Rollout, Run, StepMetric

pytestmark = pytest.mark.django_db

S = Run.State
ALLOWED = {
    (S.QUEUED, S.RUNNING), (S.QUEUED, S.CANCELLED), (S.QUEUED, S.FAILED),
    (S.RUNNING, S.SUCCEEDED), (S.RUNNING, S.FAILED), (S.RUNNING, S.CANCELLING), (S.RUNNING, S.INTERRUPTED),
    (S.CANCELLING, S.CANCELLED), (S.CANCELLING, S.SUCCEEDED), (S.CANCELLING, S.FAILED),
    (S.INTERRUPTED, S.QUEUED), (S.INTERRUPTED, S.CANCELLED),
    (S.FAILED, S.QUEUED),
    # A run trained elsewhere whose trainer went silent, and came back or finished (webapp/runs/ingest/lost.py).
    (S.RUNNING, S.LOST), (S.LOST, S.RUNNING), (S.LOST, S.SUCCEEDED), (S.LOST, S.FAILED),
    # A sweep's pruner stops a queued run, or a running one through cancelling; a sweep gives up a run
    # whose worker was lost (webapp/sweeps/services.py).
    (S.QUEUED, S.PRUNED), (S.CANCELLING, S.PRUNED), (S.INTERRUPTED, S.FAILED),
}
ALL_PAIRS = list(itertools.product(S.values, S.values))


@pytest.mark.parametrize(("source", "target"), sorted(ALLOWED))
def test_allowed_transition_moves_the_run(owner, source, target):
    run = make_run(owner, state=source)
    assert run.transition(target) is True
    assert Run.objects.get(pk=run.pk).state == target


@pytest.mark.parametrize(("source", "target"), [p for p in ALL_PAIRS if p not in ALLOWED])
def test_refused_transition_raises_and_changes_nothing(owner, source, target):
    run = make_run(owner, state=source)
    with pytest.raises(InvalidTransition, match=f"from '{source}' to '{target}'"):
        run.transition(target)
    assert Run.objects.get(pk=run.pk).state == source


def test_final_states_have_no_way_out():
    assert Run.TRANSITIONS[S.SUCCEEDED] == frozenset()
    assert Run.TRANSITIONS[S.CANCELLED] == frozenset()
    assert Run.TRANSITIONS[S.PRUNED] == frozenset()
    with pytest.raises(InvalidTransition, match="none \\(final state\\)"):
        Run.check_transition(S.SUCCEEDED, S.RUNNING)


def test_compare_and_set_lets_only_the_first_claim_win(owner):
    run = make_run(owner)
    first, second = Run.objects.get(pk=run.pk), Run.objects.get(pk=run.pk)
    assert first.transition(S.RUNNING, worker="a") is True
    # The second copy still believes the run is queued: its UPDATE matches no row.
    assert second.transition(S.RUNNING, worker="b") is False
    assert Run.objects.get(pk=run.pk).worker == "a"


def test_transition_applies_extra_fields_atomically(owner):
    run = make_run(owner, state=S.INTERRUPTED)
    assert run.transition(S.QUEUED, attempt=2)
    run.refresh_from_db()
    assert (run.state, run.attempt) == (S.QUEUED, 2)


def test_attempt_must_be_positive(owner):
    with pytest.raises(IntegrityError), transaction.atomic():
        make_run(owner, attempt=0)


def test_step_metric_unique_per_run_attempt_step(owner):
    run = make_run(owner)
    StepMetric.objects.create(run=run, attempt=1, step=1, seq=1, metrics={"reward": 0.5})
    StepMetric.objects.create(run=run, attempt=2, step=1, seq=2)  # a resumed attempt may repeat a step
    with pytest.raises(IntegrityError), transaction.atomic():
        StepMetric.objects.create(run=run, attempt=1, step=1, seq=3)


def test_step_metric_seq_unique_per_run(owner, stranger):
    run, other = make_run(owner), make_run(stranger)
    StepMetric.objects.create(run=run, attempt=1, step=1, seq=1)
    StepMetric.objects.create(run=other, attempt=1, step=1, seq=1)  # seq is per run
    with pytest.raises(IntegrityError), transaction.atomic():
        StepMetric.objects.create(run=run, attempt=1, step=2, seq=1)


def _rollout(run, index=0, step=1):
    return Rollout.objects.create(run=run, attempt=1, step=step, index=index, example_id="ex-1")


def test_rollout_index_unique_within_a_step(owner):
    run = make_run(owner)
    _rollout(run, 0)
    _rollout(run, 0, step=2)
    with pytest.raises(IntegrityError), transaction.atomic():
        _rollout(run, 0)


def test_module_call_position_unique_and_ordered(owner):
    rollout = _rollout(make_run(owner))
    for position, module in [(2, "answerer"), (0, "rewriter"), (1, "reranker")]:
        ModuleCall.objects.create(rollout=rollout, position=position, module=module, invocation_index=0,
                                  prompt="p", completion="c")
    assert [c.module for c in rollout.calls.all()] == ["rewriter", "reranker", "answerer"]
    with pytest.raises(IntegrityError), transaction.atomic():
        ModuleCall.objects.create(rollout=rollout, position=1, module="x", invocation_index=0, prompt="", completion="")


def test_group_and_member_uniqueness(owner):
    run = make_run(owner)
    group = Group.objects.create(run=run, attempt=1, step=1, index=0, module="rewriter", invocation_index=0, size=2)
    with pytest.raises(IntegrityError), transaction.atomic():
        Group.objects.create(run=run, attempt=1, step=1, index=0, module="answerer", invocation_index=0, size=2)
    call = ModuleCall.objects.create(rollout=_rollout(run), position=0, module="rewriter", invocation_index=0,
                                     prompt="p", completion="c")
    GroupMember.objects.create(group=group, position=0, call=call)
    GroupMember.objects.create(group=group, position=1, call=call, duplicated=True)  # up-sampled copy
    with pytest.raises(IntegrityError), transaction.atomic():
        GroupMember.objects.create(group=group, position=1, call=call)
