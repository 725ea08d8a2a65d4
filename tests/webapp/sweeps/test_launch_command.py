"""`manage.py launch_run --sweep FILE.toml` and `manage.py launch_sweep FILE.toml`: a sweep from a file,
checked as the launch form's Sweep button checks it; each refusal names its field as the file does."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import ROOT
from tests.webapp.runs.launch.test_launch import toy_task  # noqa: F401 (fixture)
from webapp.runs.models import Run
from webapp.sweeps.models import Sweep, Trial

pytestmark = pytest.mark.django_db

EXAMPLE = ROOT / "examples" / "sweep_toy.toml"
GOOD = """
steps = 6
strategy = "mmgrpo"
rollouts_per_example = 8

[sweep]
method = "random"
seeds = 1
n_trials = 3
parallel = 3

[sweep.space]
learning_rate = {low = 1e-5, high = 1e-3, log = true}
group_size = [4, 8]
"""


def nothing_created():
    return not Sweep.objects.exists() and not Trial.objects.exists() and not Run.objects.exists()


def test_the_example_file_launches_through_launch_run(owner, toy_task):  # noqa: F811
    out = StringIO()
    # As typed: manage.py launch_run --task toy --owner owner --name example --sweep examples/sweep_toy.toml
    call_command("launch_run", "--task", "toy", "--owner", "owner", "--name", "example", "--sweep", str(EXAMPLE),
                 stdout=out)
    sweep = Sweep.objects.get()
    assert f"Sweep {sweep.pk} of toy is running" in out.getvalue()
    assert (sweep.owner, sweep.task, sweep.name, sweep.method, sweep.seeds, sweep.n_trials, sweep.parallel) == (
        owner, toy_task, "example", "tpe", 2, 8, 2)
    assert sweep.space == {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}, "group_size": {"values": [4, 8]}}
    assert (sweep.pruner, sweep.options) == ("median", {"startup_trials": 2, "warmup_steps": 5})
    assert sweep.config["strategy"] == "mmgrpo" and sweep.config["rollouts_per_example"] == 8
    assert sweep.config["steps"] == 30
    runs = Run.objects.filter(sweep_member__trial__sweep=sweep)
    assert sweep.trials.count() == 2 and runs.count() == 4 and {r.state for r in runs} == {Run.State.QUEUED}


def test_launch_sweep_takes_the_base_from_the_file_and_the_command_line(owner, toy_task, tmp_path):  # noqa: F811
    path = tmp_path / "sweep.toml"
    path.write_text(GOOD)
    call_command("launch_sweep", str(path), "--task", "toy", "--owner", "owner", "--set", "steps=4", stdout=StringIO())
    sweep = Sweep.objects.get()
    assert sweep.config["steps"] == 4 and sweep.method == "random" and sweep.trials.count() == 3


@pytest.mark.parametrize(("text", "message"), [
    (GOOD.replace("low = 1e-5, high = 1e-3", "low = 1e-3, high = 1e-5"),
     "sweep.space.learning_rate: the range's low (0.001) must be below its high (1e-05)"),
    (GOOD.replace("group_size = [4, 8]", "model = {low = 1, high = 2}"), "sweep.space.model: model is not numeric"),
    (GOOD.replace("group_size = [4, 8]", "no_such = [1, 2]"), "sweep.space.no_such: RunConfig has no setting"),
    (GOOD.replace("group_size = [4, 8]", 'group_size = [4, "", 8]'), "sweep.space.group_size: value 2 of 3 is empty"),
    (GOOD.replace("group_size = [4, 8]", "group_size = [4, , 8]"), "is not valid TOML"),
    (GOOD.replace("seeds = 1", "seeds = 50"), "sweep.seeds: seeds is a whole number from 1 to 10"),
    (GOOD.replace("method = \"random\"", "method = \"bayes\""), "sweep.method: Choose one of"),
    (GOOD.replace("parallel = 3", "parallel = 3\nsurprise = 1"), "Unknown sweep setting(s) 'surprise'"),
    (GOOD.replace("parallel = 3", "parallel = 3\noptions = {startup_trials = \"two\"}"), "sweep.options:"),
    (GOOD.replace("steps = 6", "steps = 0"), "The sweep was not launched: steps: steps must be"),
    (GOOD.replace("[sweep]", "[other]").replace("[sweep.space]", "[other.space]"), "has no [sweep] table"),
    ("steps = [", "is not valid TOML"),
])
def test_a_refused_file_names_the_field_and_launches_nothing(owner, toy_task, tmp_path, text, message):  # noqa: F811
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    with pytest.raises(CommandError) as refused:
        call_command("launch_run", task="toy", owner="owner", sweep=str(path))
    assert message in str(refused.value)
    assert nothing_created()


def test_an_unknown_task_user_or_file_is_refused(owner, toy_task, tmp_path):  # noqa: F811
    with pytest.raises(CommandError, match="No task named 'nope'"):
        call_command("launch_sweep", str(EXAMPLE), task="nope", owner="owner")
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("launch_run", task="toy", owner="nobody", sweep=str(EXAMPLE))
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("launch_run", task="toy", owner="owner", sweep=str(tmp_path / "missing.toml"))
    assert nothing_created()
