"""TRL's real `GRPOTrainer` training the real SmolLM2 on a CPU and streaming into a real server
(daphne and the database) through `cohort.trl.CohortCallback`; the server is killed mid-run and
started again on its port, and every step arrives once, with its groups and each completion's tokens
and their entropies. Without a model: how the callback pairs TRL's shuffled rows with its completions
and which forward passes it reads entropies from."""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from django.test import Client as DjangoClient
from django.utils.html import escape
from transformers import TrainerCallback

from cohort.sdk.spool import Spool
from cohort.trl import CohortCallback, cohort_metrics, trl_token_details
from tests.conftest import ROOT, asgi_server_process, free_port, service_env
from tests.workers.resilience import connect_when_ready, receive_json, session_cookie
from trainer.algorithms.advantages import grpo_advantages
from webapp.api.services import token_create
from webapp.projects.services import project_create
from webapp.runs.models import CallText, Group, GroupMember, Run, StepMetric

sys.path.insert(0, str(ROOT / "examples"))
from trl_toy_format import make_trainer  # noqa: E402  (the example the README runs)

NEUTRAL = ("TRL streaming through the SDK to daphne over HTTP, with a server restart; the logging API's "
           "queries (create, steps, groups, finish) are tested on both backends in "
           "tests/webapp/api/test_logging_api.py and tests/webapp/runs/ingest/test_external.py")

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


@pytest.mark.slow
@pytest.mark.backend_neutral(reason=NEUTRAL)
@pytest.mark.django_db(transaction=True)
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
    # The entropies come from TRL's loss pass, where the example's LoRA dropout is on: the run says so.
    assert run.config["token_details_pass"] == {"entropies": "loss pass, train mode", "train_mode_dropout": 0.05}

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
        # The timeline from TRL's own timers: each step's generation, rewards and log-prob passes, in order.
        lanes = {span["lane"]: span for span in metric.spans}
        assert {"sampler", "rewards", "trainer"} <= set(lanes), metric.spans
        assert lanes["sampler"]["name"] == "transformers.generate"
        assert lanes["sampler"]["start"] <= lanes["sampler"]["end"] <= lanes["rewards"]["start"]

    # Per token (issue 45): every completion token by token, each token decoded on its own (the
    # end-of-turn token too), with its entropy from TRL's loss pass: their mean over the step is TRL's
    # own `entropy` metric, so each value sits at its token. No sampler log-probs: transformers'
    # generate gives TRL none.
    sent = [json.loads(line) for line in Spool.open(cohort.run.folder).lines()]
    for step in sent:
        rows = step["rollouts"]
        assert len(rows) == NUM_GENERATIONS * PROMPTS_PER_STEP
        assert all(len(r["tokens"]) == len(r["entropies"]) > 0 and "logprobs" not in r for r in rows)
        for r in rows:
            text = "".join(r["tokens"])
            assert text.replace("<|im_end|>", "") == r["completion"] and text.count("<|im_end|>") <= 1
            assert all(e >= 0 for e in r["entropies"])
        entropies = [e for r in rows for e in r["entropies"]]
        assert np.mean(entropies) == pytest.approx(by_step[step["step"]]["entropy"], abs=1e-3)
        assert stored[step["step"] - 1].metrics["tokens/entropy/mean"] == pytest.approx(by_step[step["step"]]["entropy"])
    texts = CallText.objects.filter(run=run)  # the server keeps them beside the texts, one row per example
    assert texts.exists() and not texts.filter(tokens__isnull=True).exists()

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



# --- pairing TRL's buffered rows with its completions, without a model ------------------------------


class Tokenizer:
    """A vocabulary of a few pieces; 0 is the end-of-turn token and 9 the padding, both special."""

    VOCAB = {0: "<eos>", 1: "a", 2: "b", 3: " c", 4: "Q1", 5: "Q2", 9: "<pad>"}
    pad_token_id = 9

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.VOCAB[i] for i in ids if not (skip_special_tokens and i in (0, 9)))


def micro_batch(rows, *, sampler=None):
    """Rows of (prompt id, completion ids, completion mask, advantage), as TRL buffers them (prompts
    left-padded to 2, completions right-padded to 3)."""
    return {"prompt_ids": torch.tensor([[9, prompt] for prompt, _, _, _ in rows]),
            "prompt_mask": torch.tensor([[0, 1]] * len(rows)),
            "completion_ids": torch.tensor([ids + [9] * (3 - len(ids)) for _, ids, _, _ in rows]),
            "completion_mask": torch.tensor([mask for _, _, mask, _ in rows]),
            "advantages": torch.tensor([advantage for _, _, _, advantage in rows]),
            **({"sampling_per_token_logps": torch.tensor(sampler)} if sampler is not None else {})}


def entropies_of(batch, values):
    """What the forward hook keeps of the loss's pass over `batch`: its input ids and an entropy per
    position (the last three are the completion's)."""
    full = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    return full, torch.tensor([[7.0] + row for row in values])


def test_each_completion_gets_the_tokens_of_its_own_row_or_none():
    first = micro_batch([(5, [1, 2, 0], [1, 1, 1], 1.0), (4, [1, 2, 0], [1, 1, 1], 1.0)],
                        sampler=[[-0.1, -0.2, -0.3], [-0.4, float("nan"), -0.6]])
    second = micro_batch([(5, [3, 3, 3], [0, 0, 0], -1.0),  # truncated, masked whole by TRL
                          (4, [1, 2, 0], [1, 1, 1], 1.0)])
    trainer = SimpleNamespace(processing_class=Tokenizer(), _buffered_inputs=[first, second])
    captures = [entropies_of(first, [[1.0, 2.0, 3.0], [4.0, 5.0, -1e-7]]),
                entropies_of(second, [[0.5, 0.5, 0.5], [6.0, 8.0, 9.0]])]
    prompts = [[{"role": "user", "content": "Q1"}], [{"role": "user", "content": "Q1"}],
               [{"role": "user", "content": "Q2"}], "Q2", "Q2"]
    completions = [[{"role": "assistant", "content": "ab"}], "ab", "ab", " c c c", "zzz"]
    details = trl_token_details(trainer, prompts, completions, [1.0, 1.0, 1.0, -1.0, 1.0], captures=captures)
    # Q1's two rows of "ab" are one completion twice: the first entry takes the first in the buffer. The
    # sampler's NaN leaves that row's log-probs out; -1e-7 is an entropy of 0.
    assert details[0] == {"tokens": ["a", "b", "<eos>"], "entropies": [4.0, 5.0, 0.0]}
    assert details[1] == {"tokens": ["a", "b", "<eos>"], "entropies": [6.0, 8.0, 9.0]}
    # Q2's "ab" has the same text and advantage: its prompt tells it apart.
    assert details[2] == {"tokens": ["a", "b", "<eos>"], "logprobs": [-0.1, -0.2, -0.3], "entropies": [1.0, 2.0, 3.0]}
    # A completion TRL masked whole is sent without entropies (its pass attended to none of it).
    assert details[3] == {"tokens": [" c", " c", " c"]}
    assert details[4] is None  # no row: another process's completion, or an evaluation's


def test_two_different_rows_of_one_text_that_the_prompt_cannot_tell_apart_send_nothing():
    batch = micro_batch([(4, [1, 2, 0], [1, 1, 1], 0.0), (5, [1, 2, 9], [1, 1, 0], 0.0)])  # "ab" twice
    trainer = SimpleNamespace(processing_class=Tokenizer(), _buffered_inputs=[batch])
    assert trl_token_details(trainer, ["Q3", "Q3"], ["ab", "ab"], [0.0, 0.0]) == [None, None]
    assert trl_token_details(trainer, ["Q1", "Q2"], ["ab", "ab"], [0.0, 0.0]) == [
        {"tokens": ["a", "b", "<eos>"]}, {"tokens": ["a", "b"]}]


class Policy(torch.nn.Module):
    """A model whose output carries per-token entropies, as TRL's fused LM head makes it."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))

    def forward(self, input_ids, **kwargs):
        return SimpleNamespace(entropy=input_ids.float() * self.weight)


def test_entropies_are_read_from_the_training_passes_with_gradients_only():
    """The loss's pass runs with gradients in training mode; TRL's old-policy and reference passes run
    under no_grad, evaluation in eval mode: only the first is kept, until the step ends."""
    model = Policy()
    callback = CohortCallback(SimpleNamespace(model=model), run=None)
    callback._watch_entropies()
    ids = torch.tensor([[1, 2, 3]])
    model(input_ids=ids)
    with torch.no_grad():
        model(input_ids=ids + 1)
    model.eval()
    model(input_ids=ids + 2)
    assert [(i.tolist(), e.tolist()) for i, e in callback._captures] == [([[1, 2, 3]], [[1.0, 2.0, 3.0]])]
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    callback.on_step_end(None, state, None)
    assert callback._captures == []
    callback.on_train_end(None, state, None)
    model.train()
    model(input_ids=ids)
    assert callback._captures == []  # unhooked
    assert CohortCallback(SimpleNamespace(model=model), token_details=False)._watch_entropies() is None
    assert not model._forward_hooks


def test_a_steps_token_details_stop_at_max_step_tokens():
    batch = micro_batch([(4, [1, 2, 0], [1, 1, 1], 0.0), (4, [3], [1, 0, 0], 0.0), (4, [1, 1], [1, 1, 0], 0.0)])
    trainer = SimpleNamespace(processing_class=Tokenizer(), _buffered_inputs=[batch], model=None)
    callback = CohortCallback(trainer, max_step_tokens=4)
    rollouts = [{"completion": c} for c in ("ab", " c", "aa")]
    callback._add_token_details(rollouts, ["Q1"] * 3, ["ab", " c", "aa"], [0.0] * 3)
    assert [r.get("tokens") for r in rollouts] == [["a", "b", "<eos>"], [" c"], None]  # 3 + 1 tokens; 2 more do not fit


def test_the_config_records_that_the_entropies_come_from_the_loss_pass_and_its_dropout():
    """TRL's entropies come from its loss pass, in train mode: the run's config says with which dropout
    (PEFT's lora_dropout modules, or a config's functional attention dropout), for the inspector's note."""
    import doctest

    import cohort.trl

    args = SimpleNamespace(to_dict=lambda: {"learning_rate": 1e-5})
    lora = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.05))
    config = CohortCallback(SimpleNamespace(model=lora, reward_func_names=["fmt"]))._config(args)
    assert config["token_details_pass"] == {"entropies": "loss pass, train mode", "train_mode_dropout": 0.05}
    llama = torch.nn.Linear(2, 2)
    llama.config = SimpleNamespace(to_dict=lambda: {"attention_dropout": 0.1, "hidden_size": 2, "use_cache": True})
    assert cohort.trl.token_pass(llama)["train_mode_dropout"] == 0.1
    assert cohort.trl.token_pass(torch.nn.Linear(2, 2))["train_mode_dropout"] == 0.0
    assert cohort.trl.token_pass(None)["train_mode_dropout"] == 0.0
    quiet = CohortCallback(SimpleNamespace(model=lora), token_details=False)._config(args)
    assert "token_details_pass" not in quiet  # no per-token numbers sent: nothing to say where from
    examples = doctest.testmod(cohort.trl)  # token_pass's example, as the reference page shows it
    assert examples.attempted >= 1 and examples.failed == 0


# --- the timeline from TRL's timers, without a trainer ---------------------------------------------


def test_trls_timers_become_bars_on_their_lanes_while_a_recorder_is_open():
    from trl.extras.profiling import ProfilingContext

    from cohort.trl_timers import MERGE_OVER, TimerSpans

    original = ProfilingContext.__exit__
    spans = TimerSpans(reward_names=("exact_match",))
    spans.open()
    try:
        with ProfilingContext("GRPOTrainer.transformers.generate", report_to=[]):
            pass
        for _ in range(MERGE_OVER + 1):  # the loss's micro-batches: one bar for them all
            with ProfilingContext("GRPOTrainer._get_per_token_logps_and_entropies", report_to=[]):
                pass
        with ProfilingContext("GRPOTrainer.exact_match", report_to=[]):
            pass
        with ProfilingContext("GRPOTrainer.sync_weights", report_to=[]):
            pass
        taken = spans.take()
    finally:
        spans.close()
    assert [(s["lane"], s["name"]) for s in taken] == [
        ("sampler", "transformers.generate"),
        ("trainer", f"_get_per_token_logps_and_entropies ({MERGE_OVER + 1} calls)"),
        ("rewards", "exact_match"), ("adapter", "sync_weights")]
    assert all(s["start"] <= s["end"] for s in taken) and spans.take() == []
    assert ProfilingContext.__exit__ is original  # TRL's class as it was once no recorder is open
    with ProfilingContext("GRPOTrainer.transformers.generate", report_to=[]):
        pass
    assert spans.take() == []
