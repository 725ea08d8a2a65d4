"""The credit of a real MHGPO run: the trainer's own loop (the tiny local model, LoRA, fork-on-first
and independent sampling over the DSPy test plugin's two-module program, reward propagation and GRPO
advantages) trains two steps, its step events are stored through the real ingest, and the credit the
run page shows adds up to 1 over the modules at every step, each module's share being its |advantage|
mass in the events themselves. (The tiny model's outputs parse for a DSPy program, where they do not
for the search system's `### q1; q2 ###` format: every module is called.)"""

from __future__ import annotations

import json

import pytest

from tests.webapp.runs.credit.builders import on_chain
from tests.webapp.runs.seeding import ingest, make_run
from trainer.config import RunConfig
from webapp.runs.credit.report import run_credit
from webapp.runs.credit.selectors import step_credit

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("test_plugins")]
G = 3
STEPS = 2


class Recorder:
    """The trainer's reporter: keeps its step events as the worker would post them."""

    def __init__(self):
        self.events: list[dict] = []

    def status(self, state, **info):
        pass

    def step(self, event):
        self.events.append({"type": "step", **json.loads(json.dumps(event, allow_nan=False))})

    def should_stop(self):
        return False


@pytest.fixture(scope="module")
def mhgpo_events(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from trainer.run.loop import Trainer

    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("mhgpo-run")
    rows = [{"id": "one-hop", "question": "Who wrote Hamlet?", "hops": 1, "answer": "Shakespeare"},
            {"id": "three-hops", "question": "Where was the author of Hamlet born?", "hops": 3, "answer": "Stratford"}]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    events = {}
    for sampling in ("fof", "is"):
        config = RunConfig(program="dspy_multihop", train_data=str(folder / "train.jsonl"), steps=STEPS,
                           examples_per_step=2, group_size=G, rollouts_per_example=G, max_new_tokens=8,
                           max_context_length=1024, temperature=1.5, eval_every=0, checkpoint_every=0, seed=0,
                           strategy="mhgpo", sampling=sampling, estimator="grpo",
                           rewards=[{"name": "dspy_overlap"}, {"name": "dspy_concise"}])
        recorder = Recorder()
        trainer = Trainer(config, folder / sampling, recorder, model_cache_dir=folder / "models")
        assert trainer.run() == "succeeded"
        events[sampling] = recorder.events
    return events


def _mass_in_events(event: dict) -> dict[str, float]:
    modules: dict[str, float] = {}
    for group in event["groups"]:
        for member in group["members"]:
            if not member.get("padded") and member.get("advantage") is not None:
                modules[group["module"]] = modules.get(group["module"], 0.0) + abs(member["advantage"])
    return modules


@pytest.mark.parametrize("sampling", ["fof", "is"])
def test_a_real_mhgpo_runs_credit_adds_up_to_one_over_its_modules(owner, mhgpo_events, sampling):
    events = mhgpo_events[sampling]
    assert [e["step"] for e in events if e.get("type") == "step"] == list(range(1, STEPS + 1))
    run = on_chain(make_run(owner))
    ingest(run, events)
    credit = step_credit(run, first=1, last=STEPS)
    assert set(credit.modules) == {"query", "answer"}  # both modules called: the credit has two sides
    for event in events:
        mass = _mass_in_events(event)
        total = sum(mass.values())
        assert total > 0
        shares = {m: credit.of(m, event["step"]).share for m in credit.modules}
        assert sum(shares.values()) == pytest.approx(1.0)
        for module, share in shares.items():
            assert share == pytest.approx(mass.get(module, 0.0) / total)
    assert not run_credit(run).message  # the section shows the table, not a note
