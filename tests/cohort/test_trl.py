"""TRL's real `GRPOTrainer` training the real SmolLM2 on a CPU and streaming into a real server
(daphne and the database) through `cohort.trl.CohortCallback`; the server is killed mid-run and
started again on its port, and every step arrives once, with its groups."""

from __future__ import annotations

import sys
from contextlib import ExitStack

import numpy as np
import pytest
from django.test import Client as DjangoClient
from django.utils.html import escape
from transformers import TrainerCallback

from cohort.trl import CohortCallback, cohort_metrics
from tests.conftest import ROOT, asgi_server_process, free_port, service_env
from tests.workers.resilience import connect_when_ready, receive_json, session_cookie
from trainer.algorithms.advantages import grpo_advantages
from webapp.api.services import token_create
from webapp.projects.services import project_create
from webapp.runs.models import Group, GroupMember, Run, StepMetric

sys.path.insert(0, str(ROOT / "examples"))
from trl_toy_format import make_trainer  # noqa: E402  (the example the README runs)

NEUTRAL = ("TRL streaming through the SDK to daphne over HTTP, with a server restart; the logging API's "
           "queries (create, steps, groups, finish) are tested on both backends in "
           "tests/webapp/api/test_logging_api.py and tests/webapp/runs/test_external.py")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

STEPS = 6
NUM_GENERATIONS = 4
PROMPTS_PER_STEP = 2
SERVER_DOWN_AT, SERVER_UP_AT = 2, 4  # killed after step 2 ends, started again after step 4


class ServerOutage(TrainerCallback):
    """Kills the server after one step and starts it again after another: the training decides when,
    so the steps in between are logged while nothing answers. Watches the run page's websocket before
    and after the outage."""

    def __init__(self, cohort: CohortCallback, start_server, cookie: str):
        self.cohort, self.start_server, self.cookie = cohort, start_server, cookie
        self.server = start_server()
        self.before: list[dict] = []
        self.after = None

    def on_step_end(self, args, state, control, **kwargs):
        run = self.cohort.run
        if state.global_step == SERVER_DOWN_AT:
            # CohortCallback ran first: step 1 is sealed (step 2 began), so it is sent and acknowledged.
            assert run.wait(60), "step 1 was not acknowledged while the server was up"
            self.before.append(StepMetric.objects.get(run_id=run.id, step=1).metrics)
            self.server.close()
        elif state.global_step == SERVER_UP_AT:
            self.server = self.start_server()
            self.after = connect_when_ready(f"{self.url}/ws/runs/{run.id}/", self.cookie)

    @property
    def url(self) -> str:
        return self.server.url


def test_a_trl_run_streams_metrics_and_groups_live_and_loses_nothing_when_the_server_restarts(
        tmp_path, owner, smollm2_dir):
    lab = project_create(creator=owner, name="trl-lab")  # the callback logs into a project (issue 42)
    token = token_create(user=owner, name="trl", project=lab, can_write=True)[1]
    port = free_port()
    env = service_env(DATABASE_CONN_MAX_AGE="0")
    starts = []

    def start_server() -> ExitStack:
        stack = ExitStack()
        stack.url = stack.enter_context(asgi_server_process(tmp_path / f"daphne-{len(starts)}.log", env, port=port))
        starts.append(stack.url)
        return stack

    trainer = make_trainer(str(smollm2_dir), str(tmp_path / "trl"), steps=STEPS, num_generations=NUM_GENERATIONS,
                           prompts_per_step=PROMPTS_PER_STEP, max_new_tokens=8)
    cohort = CohortCallback(trainer, url=f"http://127.0.0.1:{port}", token=token, task="toy_format",
                            name="trl on toy_format", tags=["trl"], dir=str(tmp_path / "cohort-runs"), project="trl-lab")
    trainer.add_callback(cohort)
    outage = ServerOutage(cohort, start_server, session_cookie(owner))
    trainer.add_callback(outage)
    logged: list[dict] = []

    class KeepLogs(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            logged.append({"step": state.global_step, **(logs or {})})

    trainer.add_callback(KeepLogs())
    try:
        trainer.train()  # on_train_end finishes the run: it waits for the sender to drain
        assert len(starts) == 2
        # Live after the restart: the page's socket, opened while steps 3-4 were still queued in the
        # SDK, gets a notice for every step stored from then on, the last one included.
        seen = [receive_json(outage.after, 60)]  # a TimeoutError when a notice is a minute late
        while seen[-1].get("step") != STEPS:
            seen.append(receive_json(outage.after, 60))
        assert all(n["type"] in ("step", "status") for n in seen)
    finally:
        if outage.after is not None:
            outage.after.close()
        outage.server.close()

    run = Run.objects.get(pk=cohort.run.id)
    assert (run.origin, run.state, run.task.name, run.owner) == ("trl", Run.State.SUCCEEDED, "toy_format", owner)
    assert run.project == lab
    assert run.config["num_generations"] == NUM_GENERATIONS and run.config["reward_funcs"] == ["regex_match", "exact_match"]

    # Every step once, through the outage, with TRL's numbers under TRL's names and Cohort's.
    stored = list(StepMetric.objects.filter(run=run).order_by("step"))
    assert [m.step for m in stored] == list(range(1, STEPS + 1))
    assert outage.before == [stored[0].metrics]
    by_step = {entry["step"]: entry for entry in logged if "reward" in entry}
    for metric in stored:
        sent = cohort_metrics(by_step[metric.step])
        assert metric.metrics["reward/mean"] == pytest.approx(sent["reward"])
        assert metric.metrics["zero_var_share"] == pytest.approx(sent["frac_reward_zero_std"])
        assert "group_var/completion" in metric.metrics and "similarity/completion" in metric.metrics

    # A group is the num_generations completions of one prompt; the advantages TRL trained with are
    # GRPO's within exactly those groups (Cohort's grpo_advantages on the same rewards agrees).
    for step in range(1, STEPS + 1):
        groups = list(Group.objects.filter(run=run, step=step).order_by("index"))
        assert len(groups) == PROMPTS_PER_STEP and all(g.size == NUM_GENERATIONS for g in groups)
        members = list(GroupMember.objects.filter(group__in=groups).order_by("group__index", "position"))
        assert all(set(m.reward_components) == {"regex_match", "exact_match"} for m in members)
        rewards = np.array([m.reward for m in members])
        group_ids = np.repeat(np.arange(PROMPTS_PER_STEP), NUM_GENERATIONS)
        np.testing.assert_allclose([m.advantage for m in members], grpo_advantages(rewards, group_ids), atol=1e-4)

    # The group inspector shows a TRL group: its completions and each reward's score.
    browser = DjangoClient()
    browser.force_login(owner)
    group = Group.objects.get(run=run, step=STEPS, index=0)
    page = browser.get(f"/runs/{run.pk}/groups/{group.pk}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "regex_match" in text and "exact_match" in text
    first = trainer._logs["completion"][0]  # the last step's batch: prompt 0's first completion
    first = first[-1]["content"] if isinstance(first, list) else first
    assert escape(first[:40]) in text
    # The page offers no Cancel or Resume for a run Cohort's worker does not train.
    detail = browser.get(f"/runs/{run.pk}/").content.decode()
    assert "TRL" in detail and f"/runs/{run.pk}/cancel" not in detail

