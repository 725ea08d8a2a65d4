"""The run pages' hooks (webapp/runs/hooks.py): the apps above runs register into them from their
AppConfig.ready(), so runs imports neither alerts nor experiments yet shows the alert badge, a run's
experiments and the "Launch experiment" button."""

from types import SimpleNamespace

from webapp.alerts.selectors import alert_unseen_open_count
from webapp.experiments.views import experiment_launch, runs_experiments_context
from webapp.runs import hooks


def test_alerts_and_experiments_register_from_their_ready():
    assert hooks._badge_counter == [alert_unseen_open_count]
    assert hooks._page_extras["experiments"] is runs_experiments_context
    assert hooks._launch_actions["experiment"].launch is experiment_launch


def test_a_launch_action_is_chosen_by_its_button_and_offered_per_task(monkeypatch):
    monkeypatch.setattr(hooks, "_launch_actions", {})
    assert hooks.launch_action_chosen({"experiment": "1"}) is None
    action = hooks.LaunchAction(offered=lambda task: task.dspy, launch=lambda request, form: None)
    hooks.register_launch_action("experiment", action)
    hooks.register_launch_action("experiment", action)  # a ready() that runs twice registers once
    assert hooks.launch_action_chosen({"experiment": "1"}) is action
    assert hooks.launch_action_chosen({"experiment": ""}) is None and hooks.launch_action_chosen({}) is None
    assert hooks.launch_actions_offered(SimpleNamespace(dspy=True)) == ["experiment"]
    assert hooks.launch_actions_offered(SimpleNamespace(dspy=False)) == []
    assert hooks.launch_actions_offered(None) == []


def test_page_extras_merge_and_the_badge_is_none_without_a_counter(monkeypatch):
    monkeypatch.setattr(hooks, "_page_extras", {})
    monkeypatch.setattr(hooks, "_badge_counter", [])
    assert hooks.run_page_extras([1, 2]) == {} and hooks.badge_count(object()) is None
    hooks.register_run_page_extras("a", lambda runs: {"n": len(runs)})
    hooks.register_run_page_extras("b", lambda runs: {"first": runs[0]})
    assert hooks.run_page_extras(iter([1, 2])) == {"n": 2, "first": 1}
    hooks.register_badge_counter(lambda user: 3)
    assert hooks.badge_count(object()) == 3
