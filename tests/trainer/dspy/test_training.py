"""An unmodified DSPy program, installed as a plugin, trains one step on the tiny model under every
strategy: MMGRPO's module-level groups, GDPO on two DSPy metrics, MHGPO FoF and IS by replay."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from trainer.config import RunConfig

pytestmark = [pytest.mark.usefixtures("torch_setup", "test_plugins")]

G = 4


class Quiet:
    def status(self, state, **info):
        pass

    def step(self, event):
        json.dumps(event, allow_nan=False)

    def should_stop(self):
        return False


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = [{"id": "one-hop", "question": "Who wrote Hamlet?", "hops": 1, "answer": "Shakespeare"},
            {"id": "three-hops", "question": "Where was the author of Hamlet born?", "hops": 3,
             "answer": "Stratford"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def one_step(tmp_path, train_file, model_cache, **changes):
    from trainer.run.loop import Trainer

    config = RunConfig(**{
        "program": "dspy_multihop", "train_data": str(train_file), "steps": 1, "examples_per_step": 2,
        "group_size": G, "rollouts_per_example": G, "max_new_tokens": 8, "max_context_length": 1024,
        "temperature": 1.5, "eval_every": 0, "checkpoint_every": 0, "seed": 0,
        "rewards": [{"name": "dspy_overlap"}, {"name": "dspy_concise"}], **changes})
    trainer = Trainer(config, tmp_path / "run", Quiet(), model_cache_dir=model_cache)
    return trainer.train_step(0)


def test_mmgrpo_groups_are_predictor_and_invocation_of_the_recorded_calls(tmp_path, train_file, model_cache):
    result = one_step(tmp_path, train_file, model_cache, strategy="mmgrpo", estimator="grpo")
    trajs = result.trajectories
    assert len(trajs) == 2 * G and not any(t.failed for t in trajs)
    hops = {"one-hop": 1, "three-hops": 3}
    for traj in trajs:
        assert [(c.module, c.invocation_index) for c in traj.calls] == \
            [("query", i) for i in range(hops[traj.example_id])] + [("answer", 0)]
    recorded = Counter((t.example_id, c.module, c.invocation_index) for t in trajs for c in t.calls)
    groups = {(g.example_id, g.module, g.invocation_index): g for g in result.groups}
    assert set(groups) == set(recorded)  # (one-hop: query#0, answer#0; three-hops: query#0..2, answer#0)
    for key, group in groups.items():
        assert len(group.members) == G == recorded[key]
        assert all((m.trajectory.example_id, m.call.module, m.call.invocation_index) == key for m in group.members)
    assert math.isfinite(result.metrics["loss"])


def test_gdpo_normalizes_two_dspy_metrics_separately(tmp_path, train_file, model_cache):
    result = one_step(tmp_path, train_file, model_cache, strategy="mmgrpo", estimator="gdpo",
                      rewards=[{"name": "dspy_graded_overlap"}, {"name": "dspy_graded_concise"}])
    for traj in result.trajectories:
        assert set(traj.rewards) == {"dspy_graded_overlap", "dspy_graded_concise"}
        answer = traj.final_output.answer
        gold = {"one-hop": "shakespeare", "three-hops": "stratford"}[traj.example_id]
        assert traj.rewards["dspy_graded_overlap"] == pytest.approx(len(set(gold) & set(answer.lower())) / len(set(gold)))
        assert traj.rewards["dspy_graded_concise"] == float(len(answer.split()) <= 3)
    assert {"reward/dspy_graded_overlap", "reward/dspy_graded_concise"} <= set(result.metrics)
    assert math.isfinite(result.metrics["loss"])


@pytest.mark.parametrize("sampling", ["fof", "is"])
def test_mhgpo_forks_a_dspy_program_by_replay(tmp_path, train_file, model_cache, sampling):
    result = one_step(tmp_path, train_file, model_cache, strategy="mhgpo", sampling=sampling, estimator="grpo")
    trajs = [t for t in result.trajectories if t.example_id == "three-hops"]
    fork_agents = ["query"] if sampling == "fof" else ["query", "answer"]
    for agent in fork_agents:
        forks = [t for t in trajs if t.fork_point == agent]
        assert len(forks) == G
        at = next(i for i, c in enumerate(forks[0].calls) if c.module == agent)
        # The calls before the fork point are one shared prefix: same prompts, same completions.
        prefixes = {tuple((c.module, c.prompt, c.completion) for c in t.calls[:at]) for t in forks}
        assert len(prefixes) == 1
        # The fork agent's G completions form its homogeneous group.
        (group,) = [g for g in result.groups if g.group_id == f"three-hops/fork:{agent}/{agent}#0"]
        assert group.kind == "homogeneous"
        assert sorted(m.call.call_id for m in group.members) == sorted(t.calls[at].call_id for t in forks)
    assert math.isfinite(result.metrics["loss"])


def test_a_state_saved_by_dspy_after_prompt_optimization_trains_unchanged(tmp_path, train_file, model_cache):
    import dspy
    from cohort_dspy_plugin.program import MultiHop

    optimized = MultiHop()
    optimized.answer.signature = optimized.answer.signature.with_instructions("Answer with one proper noun.")
    optimized = dspy.LabeledFewShot(k=1).compile(optimized, trainset=[
        dspy.Example(question="Capital of France?", notes=["France"], answer="Paris").with_inputs("question", "notes")])
    path = tmp_path / "optimized.json"
    optimized.save(str(path))

    result = one_step(tmp_path, train_file, model_cache, strategy="mmgrpo", program_state=str(path))
    for traj in result.trajectories:
        messages = traj.calls[-1].messages
        assert "Answer with one proper noun." in messages[0]["content"]
        assert any(m["role"] == "assistant" and "Paris" in m["content"] for m in messages[1:-1])


def test_program_state_is_refused_for_a_program_that_cannot_load_one(tmp_path, model_cache):
    from trainer.config import ConfigError
    from trainer.run.loop import Trainer

    config = RunConfig(program="toy", steps=1, program_state=str(tmp_path / "state.json"))
    with pytest.raises(ConfigError, match="does not load a saved DSPy state"):
        Trainer(config, tmp_path / "run", Quiet(), model_cache_dir=model_cache)


@pytest.mark.parametrize(("strategy", "estimator"), [("mhgpo", "grpo"), ("mmgrpo", "gdpo")])
def test_a_dspy_program_trains_on_the_asynchronous_pipeline(tmp_path, train_file, model_cache, strategy, estimator):
    """The sampler process runs the DSPy program (its signatures travel by cloudpickle), and MHGPO's forks
    by replay; the trainer groups (MHGPO's forks, MMGRPO's modules), normalizes (GRPO, GDPO's per reward)
    and updates on batches one version behind."""
    from trainer.run.loop import Trainer

    class Kept(Quiet):
        events: list = []

        def step(self, event):
            super().step(event)
            self.events.append(event)

    config = RunConfig(
        program="dspy_multihop", train_data=str(train_file), steps=3, examples_per_step=2, group_size=G,
        rollouts_per_example=G, max_new_tokens=8, max_context_length=1024, temperature=1.5, eval_every=0,
        checkpoint_every=0, seed=0, rewards=[{"name": "dspy_overlap"}, {"name": "dspy_concise"}],
        strategy=strategy, estimator=estimator, max_staleness=1, **({"sampling": "fof"} if strategy == "mhgpo" else {}))
    reporter = Kept()
    trainer = Trainer(config, tmp_path / "run", reporter, model_cache_dir=model_cache)
    try:
        assert trainer.run() == "succeeded"
    finally:
        trainer.close()
    assert [e["step"] for e in reporter.events] == [1, 2, 3]
    for event in reporter.events:
        (version,) = {r["policy_version"] for r in event["rollouts"]}
        assert event["metrics"]["pipeline/staleness/max"] == event["step"] - 1 - version <= 1
        if strategy == "mhgpo":
            forks = [r for r in event["rollouts"] if r["example_id"] == "three-hops" and r["fork_point"] == "query"]
            assert len(forks) == G
        else:
            assert {g["module"] for g in event["groups"]} == {"query", "answer"}
        assert math.isfinite(event["metrics"]["loss"])
        assert {"reward/dspy_overlap", "reward/dspy_concise"} <= set(event["metrics"])
