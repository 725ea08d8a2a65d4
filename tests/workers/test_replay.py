"""Replay one module (issue 57 item 4) through a real Celery worker process: the confirm page's cost
first, the start refused for a viewer, G alternatives for the chosen call sampled with the run's
adapter, the earlier calls kept byte for byte, the rewards recomputed."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import wait_for
from tests.webapp.runs.factories import make_task
from tests.workers.test_run_train import toy_config, wait_for_state
from trainer.algorithms.groups import assign_advantages
from trainer.algorithms.scoring import BatchScorer
from trainer.config import RunConfig
from trainer.programs.search import SearchSystem
from trainer.programs.toy import ToyEcho
from trainer.rewards import get_reward
from trainer.rollouts.failures import call_rewards
from trainer.rollouts.prompts import FormattedProgram
from trainer.rollouts.sampling import fork_on
from trainer.rollouts.trajectory import ModuleCall as ModuleCall_
from trainer.rollouts.trajectory import Trajectory, apply_format_failure, jsonable
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.ingest.texts import fill_call_texts
from webapp.runs.launch.check import Launch
from webapp.runs.models import ModuleCall, Replay, Rollout, Run
from webapp.runs.services import run_create, run_directory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def expected_rewards(config: RunConfig, program, example: dict, completions: list[str]) -> tuple[dict, float | None]:
    """What the task's reward functions give the final output the completions lead to, computed here
    without the replay's code: the program stepped by hand, the rewards called one by one."""
    state, parsed_all = program.start(example), True
    for completion in completions:
        step = program.step(state, program.next_agent(state), completion)
        state, parsed_all = step.state, parsed_all and step.parsed_ok
        if not parsed_all:
            break
    fns = {s.name: get_reward(s.name, **s.params) for s in config.rewards}
    names = BatchScorer(config, fns, program.agents).component_names()
    traj = Trajectory("x", final_output=program.final_output(state) if parsed_all else None)
    if not parsed_all:
        traj = apply_format_failure(Trajectory("x", failed=True, rewards=dict.fromkeys(names, 0.0)),
                                    config.format_failure_reward, names)
        return traj.rewards, traj.total_reward
    assert call_rewards(traj, example, fns, names) is None
    weights = {s.name: s.weight for s in config.rewards}
    return traj.rewards, sum(weights[n] * v for n, v in traj.rewards.items() if v is not None)


def test_a_toy_replay_shows_its_cost_refuses_a_viewer_and_samples_g_alternatives_with_recomputed_rewards(
        celery_worker_process, owner, make_user):
    project = project_create(creator=owner, name="replay-lab")
    viewer = make_user("vi")
    member_add(project, user=viewer, role=Role.VIEWER)
    config = toy_config(steps=2, checkpoint_every=1)
    run = run_create(Launch(owner=owner, task=make_task(), config=config, project=project))
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    rollout = Rollout.objects.filter(run=run, step=2).order_by("index").first()
    call = ModuleCall.objects.get(rollout=rollout, position=0)
    confirm = reverse("runs:replay_start", args=[run.pk, call.pk])
    inspector = reverse("runs:trajectories", args=[run.pk, 2]) + f"?example={rollout.example_id}"

    # A viewer sees no button and cannot start one, by GET or POST.
    as_viewer = signed_in(viewer)
    assert confirm not in as_viewer.get(inspector).content.decode()
    assert as_viewer.get(confirm).status_code == 403
    assert as_viewer.post(confirm, {"group_size": "3"}).status_code == 403
    assert not Replay.objects.exists()

    # The owner: the button, then the cost (generations = G x (1 + later calls), the model, the adapter).
    as_owner = signed_in(owner)
    assert confirm in as_owner.get(inspector).content.decode()
    page = as_owner.get(confirm, {"g": "3"})
    text = page.content.decode()
    assert page.status_code == 200 and not Replay.objects.exists()  # shown, not started
    assert "<strong>3</strong> = G 3 × (1 + 0 later calls)" in text
    assert config.model in text and "the checkpoint of step 1, which sampled this step" in text
    assert "about" in text and "s each" in text  # the estimate from step 2's measured sampling time

    started = as_owner.post(confirm, {"group_size": "3"})
    assert started.status_code == 302
    replay = Replay.objects.get()
    # The worker may claim it before this read (CI caught it running): the queued state itself is asserted
    # without a worker, in tests/webapp/runs/replay.
    assert (replay.group_size, replay.cost["generations"]) == (3, 3) and replay.state != Replay.State.FAILED
    wait_for(lambda: Replay.objects.get(pk=replay.pk).done, 240, "the replay", celery_worker_process.log_path)
    replay.refresh_from_db()
    assert replay.state == Replay.State.SUCCEEDED, replay.error
    result = replay.result
    assert replay.adapter_step == 1 and result["adapter"]["exact"] and result["model"] == config.model
    assert len(result["alternatives"]) == 3
    example = next(e for e in ToyEcho().generate_examples("train", seed=config.seed) if e["id"] == rollout.example_id)
    for alternative in result["alternatives"]:
        assert [(c["position"], c["module"]) for c in alternative["calls"]] == [(0, "echo")]
        rewards, total = expected_rewards(config, ToyEcho(), example, [alternative["calls"][0]["completion"]])
        assert alternative["rewards"] == pytest.approx(rewards) and alternative["total_reward"] == pytest.approx(total)
    totals = [a["total_reward"] for a in result["alternatives"]]
    assert result["spread"]["min"] == min(totals) and result["spread"]["max"] == max(totals)
    assert replay.original["total_reward"] == rollout.total_reward

    # Kept, and shown beside the original: the call's replays page and the inspector's table.
    page = as_owner.get(started["Location"]).content.decode()
    assert page.count('class="alternative') == 3 and 'class="original"' in page
    assert f"replay-{replay.pk}" in as_owner.get(inspector).content.decode()
    # A second delivery of the task claims nothing.
    from workers.replay import replay_execute

    assert replay_execute(replay.pk) == "not claimed"


SEARCH_TRAIN = [{"id": "q-paris", "question": "What is the capital of France?", "answer": "Paris",
                 "supporting_titles": ["Paris"]},
                {"id": "q-rome", "question": "Which river runs through Rome?", "answer": "the Tiber",
                 "supporting_titles": ["Rome"]}]
SEARCH_CORPUS = [{"title": "Paris", "text": "Paris is the capital and largest city of France."},
                 {"title": "Rome", "text": "Rome is the capital of Italy; the Tiber runs through it."},
                 {"title": "Lyon", "text": "Lyon is a city in France on the Rhone."}]


def stored_search_run(owner, tmp_path) -> tuple[Run, RunConfig, dict]:
    """A finished MHGPO run of the 3-agent search program whose step 1 (sampled by the run's initial
    adapter, which a replay rebuilds from the config's seed) is stored through the real ingest; its
    first rollout's calls parse: `### capital of France ###`, `Document0`, `Paris is the answer`."""
    for name, rows in (("train", SEARCH_TRAIN), ("corpus", SEARCH_CORPUS)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = RunConfig(program="search", train_data=str(tmp_path / "train.jsonl"),
                       corpus_data=str(tmp_path / "corpus.jsonl"), strategy="mhgpo", sampling="fof", group_size=2,
                       rollouts_per_example=2, examples_per_step=1, steps=1, max_new_tokens=6, prompt_format="raw",
                       max_context_length=1024, temperature=1.5, eval_every=0, checkpoint_every=0,
                       rewards=[{"name": "token_f1", "params": {"prediction_field": "answer"}},
                                {"name": "mhgpo_penalty_rewriter"}, {"name": "mhgpo_penalty_reranker"},
                                {"name": "mhgpo_penalty_answerer"}])
    program = SearchSystem(corpus_path=config.corpus_data)
    scripted = {"rewriter": "### capital of France ###", "reranker": "Document0", "answerer": "Paris is the answer"}
    example = SEARCH_TRAIN[0]
    trajectories = fork_on(FormattedProgram(program, None, "raw"), example, "rewriter", group_size=2,
                           generate=lambda agent, prompts: [scripted[agent]] * len(prompts), example_id=example["id"])
    return stored_run(owner, config, program, trajectories, example), config, example


def stored_run(owner, config: RunConfig, program, trajectories, example) -> Run:
    """A finished run of `config` whose step 1 holds `trajectories`, scored, grouped and stored as the
    trainer's step event would be (through the real ingest)."""
    fns = {s.name: get_reward(s.name, **s.params) for s in config.rewards}
    scorer = BatchScorer(config, fns, program.agents)
    scored = scorer.score(trajectories, {example["id"]: example})
    groups, _, advantages = scorer.groups_and_advantages(scored, 1)
    assign_advantages(groups, advantages)
    project = project_create(creator=owner, name=f"lab-{config.program}")
    run = Run.objects.create(owner=owner, project=project, task=make_task(), config=config.to_dict(), total_steps=1,
                             state=Run.State.SUCCEEDED, current_step=1)
    step_events_ingest(run, [jsonable({"type": "step", "attempt": 1, "step": 1, "metrics": {"system/sample_s": 0.5},
                                       "rollouts": [t.to_dict() for t in scored],
                                       "groups": [g.to_dict() for g in groups]})])
    return run


def test_a_replay_of_a_middle_module_keeps_the_earlier_calls_byte_for_byte_and_runs_the_later_ones(
        celery_worker_process, owner, tmp_path):
    run, config, example = stored_search_run(owner, tmp_path)
    rollout = Rollout.objects.filter(run=run, step=1).order_by("index").first()
    stored = list(ModuleCall.objects.filter(rollout=rollout).order_by("position"))
    fill_call_texts(stored)
    assert [c.module for c in stored] == ["rewriter", "reranker", "answerer"]
    as_owner = signed_in(owner)
    confirm = reverse("runs:replay_start", args=[run.pk, stored[1].pk])
    text = as_owner.get(confirm, {"g": "3"}).content.decode()
    assert "<strong>6</strong> = G 3 × (1 + 1 later call)" in text and "initial adapter" in text
    assert as_owner.post(confirm, {"group_size": "3"}).status_code == 302
    replay = Replay.objects.get()
    wait_for(lambda: Replay.objects.get(pk=replay.pk).done, 240, "the replay", celery_worker_process.log_path)
    replay.refresh_from_db()
    assert replay.state == Replay.State.SUCCEEDED, replay.error
    result = replay.result
    # The earlier call, as stored, byte for byte; the trainer checked each prompt against the stored one too.
    assert result["prefix"] == [{"position": 0, "module": "rewriter", "completion": stored[0].completion}]
    request = json.loads((run_directory(run.pk) / "replays" / f"replay-{replay.pk}" / "request.json").read_bytes())
    assert [(c["prompt"], c["completion"]) for c in request["calls"]] == [(c.prompt, c.completion) for c in stored[:2]]
    assert len(result["alternatives"]) == 3
    for alternative in result["alternatives"]:
        calls = alternative["calls"]
        assert calls[0]["module"] == "reranker" and calls[0]["position"] == 1
        # the answerer ran again after every reranker output that parsed (none after one that did not)
        assert [c["module"] for c in calls] == (["reranker", "answerer"] if calls[0]["parsed_ok"] else ["reranker"])
        rewards, total = expected_rewards(config, SearchSystem(corpus_path=config.corpus_data), example,
                                          [stored[0].completion] + [c["completion"] for c in calls])
        assert alternative["rewards"] == pytest.approx(rewards)
        assert alternative["total_reward"] == pytest.approx(total)
    # the stored rollout itself is untouched
    again = list(ModuleCall.objects.filter(rollout=rollout).order_by("position"))
    fill_call_texts(again)
    assert [(c.prompt, c.completion) for c in again] == [(c.prompt, c.completion) for c in stored]


def test_a_program_that_does_not_replay_deterministically_fails_the_replay_with_words(owner, settings, tmp_path,
                                                                                   model_cache_dir):
    """The worker's body (workers/replay.py) without Celery: the stored prompt is not what the toy program
    renders any more, so the replay fails, says where, and its page shows it; never a 500."""
    from webapp.runs.replay.selectors import replay_call_get
    from webapp.runs.replay.services import replay_plan, replay_request
    from workers.replay import replay_execute

    settings.COHORT_RUNS_DIR, settings.COHORT_MODEL_CACHE = tmp_path / "runs", model_cache_dir
    config = toy_config(steps=1, group_size=2, rollouts_per_example=2)
    example = ToyEcho().generate_examples("train", seed=config.seed)[0]
    trajectories = [Trajectory(example["id"], [ModuleCall_("echo", 0, "Repeat: apple, said another program", "apple",
                                                            True, parsed="apple", call_id=f"c{i}")],
                               final_output="apple", trajectory_id=f"t{i}") for i in range(2)]
    run = stored_run(owner, config, ToyEcho(), trajectories, example)
    call = replay_call_get(run, ModuleCall.objects.filter(rollout__run=run).first().pk)
    replay = replay_request(replay_plan(run, call, 2, owner), owner)
    assert replay_execute(replay.pk) == Replay.State.FAILED
    replay.refresh_from_db()
    assert replay.state == Replay.State.FAILED and replay.result is None
    assert "call 0 (echo): the program builds another prompt than the stored one" in replay.error
    assert "does not replay deterministically" in replay.error
    page = signed_in(owner).get(reverse("runs:call_replays", args=[run.pk, call.pk]))
    assert page.status_code == 200 and "does not replay deterministically" in page.content.decode()
