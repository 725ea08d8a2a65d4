"""A lab of two projects for the role matrix (tests/webapp/test_every_url.py) and the API fuzz by role.

Project `lab-p`: alice (a member who owns the runs the URLs name), mo (a member), vi (a viewer), ada (an
admin) and eve (a member nobody acts as: the one the members page changes). Project `lab-q`: quinn
alone, with a run whose name, config value and completion text hold SECRET, which nobody outside
lab-q (staff aside) may ever read. Alice's share links to her running run: a valid one, and one each
that is revoked and expired after its holder opened it. Alice's API tokens for lab-p: read only, and
read and write.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.test import Client
from django.utils import timezone

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.alerts.models import AlertRule, Kind
from webapp.api.services import token_create
from webapp.experiments.models import Experiment, ExperimentRun
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.ingest.external import external_run_start, external_steps_log
from webapp.runs.models import Group, ModuleCall, Rollout, Run
from webapp.runs.services import run_directory
from webapp.sharing.models import ShareLink
from webapp.sharing.services import share_link_create
from webapp.sweeps.models import Sweep, Trial

SECRET = "qsecret"  # in lab-q's run name, config and completions: never in a body outside lab-q


@dataclass
class Lab:
    users: dict = field(default_factory=dict)  # caller name -> user
    p: object = None
    q: object = None
    run: Run = None  # alice's running run in lab-p, with a stored step
    queued: Run = None
    finished: Run = None  # succeeded, with a trained adapter
    external: Run = None  # alice's run trained elsewhere, in lab-p
    q_run: Run = None  # quinn's, in lab-q
    values: dict = field(default_factory=dict)  # URL parameter -> alice's object
    hostile: dict = field(default_factory=dict)  # URL parameter -> lab-q's object
    links: dict = field(default_factory=dict)  # "valid" | "revoked" | "expired" -> ShareLink
    tokens: dict = field(default_factory=dict)  # "read" | "write" -> key


def build_lab(make_user, runs_dir) -> Lab:
    lab = Lab()
    names = {"owner": "alice", "member": "mo", "viewer": "vi", "admin": "ada", "other": "quinn", "bystander": "eve"}
    lab.users = {caller: make_user(name) for caller, name in names.items()}
    lab.users["staff"] = make_user("root", staff=True)
    u = lab.users
    lab.p = project_create(creator=u["admin"], name="lab-p")
    for caller, role in (("owner", Role.MEMBER), ("member", Role.MEMBER), ("viewer", Role.VIEWER),
                         ("bystander", Role.MEMBER)):
        member_add(lab.p, user=u[caller], role=role)
    lab.q = project_create(creator=u["other"], name="lab-q")

    lab.run = make_run(u["owner"], project=lab.p, state=Run.State.RUNNING, name="alice-run",
                       config={"strategy": "mmgrpo"})
    ingest(lab.run, [hover_step_event(1)])
    lab.queued = make_run(u["owner"], project=lab.p, state=Run.State.QUEUED, name="alice-queued")
    lab.finished = make_run(u["owner"], project=lab.p, state=Run.State.SUCCEEDED, name="alice-finished")
    adapter = run_directory(lab.finished.pk) / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    lab.external, _ = external_run_start(u["owner"], client_id="alice-trl", task="toy_format", origin="trl",
                                         project=lab.p)

    lab.q_run, _ = external_run_start(u["other"], client_id="quinn-trl", task="q-task", origin="trl", project=lab.q,
                                      name=f"{SECRET}-run-name", config={"lr_note": f"{SECRET}-config-value"})
    external_steps_log(lab.q_run, [{"step": 1, "metrics": {"reward/mean": 0.5}, "rollouts": [
        {"prompt": "p", "completion": f"{SECRET}-completion-text {i}", "rewards": {"r": float(i % 2)}, "group": 0}
        for i in range(4)]}])

    rule = AlertRule.objects.create(owner=u["owner"], project=lab.run.project, kind=Kind.FAILED, run=lab.run)
    token, _ = token_create(user=u["owner"], name="alice's")
    experiment = Experiment.objects.create(owner=u["owner"], project=lab.p, task=lab.run.task, seeds=1, config={})
    ExperimentRun.objects.create(experiment=experiment, run=lab.run, kind=ExperimentRun.Kind.WEIGHTS, seed=0)
    for kind in ("valid", "revoked", "expired"):
        lab.links[kind] = share_link_create(creator=u["owner"], runs=[lab.run], label=kind, allow_adapter=True)

    lab.values = _parameters(lab.run, rule_id=rule.pk, token_id=token.pk, experiment_id=experiment.pk,
                             link=lab.links["valid"], project="lab-p", member=u["bystander"].pk)
    lab.values["sweep_id"] = _sweep(u["owner"], lab.p, lab.run.task, name="alice-sweep").pk
    q_experiment = Experiment.objects.create(owner=u["other"], project=lab.q, task=lab.q_run.task, seeds=1, config={})
    q_rule = AlertRule.objects.create(owner=u["other"], project=lab.q_run.project, kind=Kind.FAILED, run=lab.q_run)
    q_token, _ = token_create(user=u["other"], name="quinn's")
    q_link = share_link_create(creator=u["other"], runs=[lab.q_run], label="quinn's")
    lab.hostile = _parameters(lab.q_run, rule_id=q_rule.pk, token_id=q_token.pk, experiment_id=q_experiment.pk,
                              link=q_link, project="lab-q", member=u["other"].pk)
    lab.hostile["token"] = q_link.token[:-4] + "AAAA"  # quinn's link with a forged signature
    lab.hostile["sweep_id"] = _sweep(u["other"], lab.q, lab.q_run.task, name=f"{SECRET}-sweep-name").pk
    lab.tokens = {"read": token_create(user=u["owner"], name="read", project=lab.p, can_write=False)[1],
                  "write": token_create(user=u["owner"], name="write", project=lab.p, can_write=True)[1]}
    return lab


def _parameters(run: Run, *, rule_id, token_id, experiment_id, link: ShareLink, project: str, member: int) -> dict:
    call = ModuleCall.objects.filter(rollout__run=run).order_by("pk").first()
    rollout = Rollout.objects.filter(run=run).order_by("pk").first()
    return {"run_id": run.pk, "step": 1, "group_id": Group.objects.filter(run=run).first().pk, "call_id": call.pk,
            "example_id": rollout.example_id, "rule_id": rule_id, "token_id": token_id, "experiment_id": experiment_id,
            "key": "run-charts", "link_id": link.pk, "token": link.token, "name": project, "user_id": member}


def _sweep(owner, project, task, *, name: str) -> Sweep:
    """A running sweep with one complete trial (its name: lab-q's holds SECRET)."""
    sweep = Sweep.objects.create(owner=owner, project=project, task=task, name=name, config={"steps": 4},
                                 space={"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}}, n_trials=2,
                                 objective="reward/mean")
    Trial.objects.create(sweep=sweep, number=0, params={"learning_rate": 1e-4}, state=Trial.State.COMPLETE,
                         value=0.5, intermediate={"1": 0.5}, finished_at=timezone.now())
    return sweep


def link_holder(lab: Lab, kind: str, handler=None) -> Client:
    """A browser with no account that opened alice's `kind` link while it was valid; the revoked and
    expired ones are made so afterwards (`end_links`)."""
    client = Client()
    if handler is not None:
        client.handler = handler
    response = client.get(f"/share/{lab.links[kind].token}/")
    assert response.status_code == 302, response.status_code
    return client


def end_links(lab: Lab) -> None:
    ShareLink.objects.filter(pk=lab.links["revoked"].pk).update(revoked_at=timezone.now())
    ShareLink.objects.filter(pk=lab.links["expired"].pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
