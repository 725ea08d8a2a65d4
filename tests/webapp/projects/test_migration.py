"""The migration to projects (issue 42): every existing run, experiment and alert rule moves to its
owner's personal project, nothing is lost, and every owner still reads exactly what they read before."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("runs", "0011_run_origin_external_id"), ("experiments", "0001_initial"), ("alerts", "0001_initial"),
          ("api", "0001_initial"), ("projects", None), ("sharing", None)]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state([t for t in targets if t[1] is not None]).apps


def latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.fixture
def back_to_latest():
    """Whatever happens in the test, the database ends with today's schema, as every other test needs it."""
    yield
    migrate(latest())


def test_existing_runs_experiments_and_rules_move_to_their_owners_personal_projects(back_to_latest):
    old = migrate(BEFORE)
    User = old.get_model("auth", "User")
    Program, Task, Run = (old.get_model("runs", name) for name in ("Program", "Task", "Run"))
    Experiment = old.get_model("experiments", "Experiment")
    AlertRule = old.get_model("alerts", "AlertRule")
    ApiToken = old.get_model("api", "ApiToken")
    task = Task.objects.create(name="toy-task", title="Toy", program=Program.objects.create(name="toy", title="Toy"))
    users = [User.objects.create(username=name) for name in ("alice", "bob", "carol@lab.org", "nobody")]
    for i in range(30):
        Run.objects.create(owner=users[i % 3], task=task, config={"steps": i})
    for user in users[:2]:
        Experiment.objects.create(owner=user, task=task, seeds=1, config={})
        AlertRule.objects.create(owner=user, kind="failed")
    AlertRule.objects.create(owner=users[2], kind="failed", run=Run.objects.filter(owner=users[2]).first())
    ApiToken.objects.create(user=users[0], name="old", key_hash="0" * 64, prefix="00000000")
    before = {"runs": sorted(Run.objects.values_list("pk", "owner_id")),
              "experiments": Experiment.objects.count(), "rules": AlertRule.objects.count()}

    new = migrate(latest())
    Run = new.get_model("runs", "Run")
    Project = new.get_model("projects", "Project")
    Membership = new.get_model("projects", "Membership")
    personal = dict(Project.objects.filter(personal_of__isnull=False).values_list("personal_of_id", "pk"))
    assert set(personal) == {u.pk for u in users}  # every user, with runs or not
    assert sorted(Run.objects.values_list("pk", "owner_id")) == before["runs"]  # nothing lost
    assert all(project == personal[owner] for owner, project in Run.objects.values_list("owner_id", "project_id"))
    assert Project.objects.get(personal_of=users[2].pk).name == "carol@lab.org"
    assert set(Membership.objects.values_list("user_id", "project_id", "role")) == {
        (user, project, "admin") for user, project in personal.items()}
    Experiment = new.get_model("experiments", "Experiment")
    AlertRule = new.get_model("alerts", "AlertRule")
    assert Experiment.objects.count() == before["experiments"] and AlertRule.objects.count() == before["rules"]
    assert all(e.project_id == personal[e.owner_id] for e in Experiment.objects.all())
    for rule in AlertRule.objects.select_related("run"):
        assert rule.project_id == (rule.run.project_id if rule.run_id else personal[rule.owner_id])
    token = new.get_model("api", "ApiToken").objects.get()
    assert token.can_write and token.project_id is None  # a token made before keeps writing, everywhere
