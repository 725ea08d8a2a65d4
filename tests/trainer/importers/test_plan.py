"""An imported run fitted to the step-event contract before anything is sent: what would be refused
becomes a named skip or a replaced character, never a refused import or a database error."""

from __future__ import annotations

from trainer.importers import ImportedRun, fitted
from trainer.run import events


def test_nul_characters_become_replacement_characters_everywhere():
    run = ImportedRun(origin="verl", source=".", key="k", name="a\x00b", config={"k\x00": ["v\x00"]})
    run.step(1)["metrics"]["m\x00"] = 1.0
    run.step(1)["rollouts"].append({"prompt": [{"role": "user", "content": "p\x00"}], "completion": "c\x00",
                                    "rewards": {"r\x00": 1.0}, "reward": 1.0, "advantage": None})
    run.texts.append({"step": 1, "tag": "t", "text": "x\x00"})
    fields = fitted(run)
    rollout = run.steps[1]["rollouts"][0]
    assert "\x00" not in repr((fields, run.steps))
    assert fields["name"] == "a\ufffdb" and fields["config"]["k\ufffd"] == ["v\ufffd"]
    assert rollout["completion"] == "c\ufffd" and rollout["prompt"][0]["content"] == "p\ufffd"
    assert "r\ufffd" in rollout["rewards"] and "m\ufffd" in run.steps[1]["metrics"]


def test_a_step_over_the_contracts_counts_is_cut_and_the_cut_is_listed():
    run = ImportedRun(origin="wandb", source=".", key="k")
    run.step(1)["metrics"].update({f"m{i:04d}": float(i) for i in range(events.MAX_METRICS_PER_STEP + 5)})
    run.step(1)["rollouts"].extend({"prompt": "p", "completion": "x" * (events.MAX_TEXT + 10), "reward": 0.0,
                                    "advantage": None, "rewards": {f"r{j}": 0.0 for j in range(40)}} for _ in range(2))
    fields = fitted(run)
    assert len(run.steps[1]["metrics"]) == events.MAX_METRICS_PER_STEP
    assert len(run.steps[1]["rollouts"][0]["completion"]) == events.MAX_TEXT
    assert len(run.steps[1]["rollouts"][0]["rewards"]) == events.MAX_REWARDS_PER_ROLLOUT
    assert {skip.what for skip in run.skipped} == {"1 steps", "1 steps' rewards"} and fields["total_steps"] == 1
