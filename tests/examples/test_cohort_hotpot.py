"""The example plugin (examples/cohort-hotpot), installed by `make install` like a user's package,
trains a few steps end to end through the real CLI on the local HotpotQA data and the tiny model."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.slow


def test_the_example_plugin_is_listed_and_trains_end_to_end(tmp_path):
    listing = subprocess.run([sys.executable, "-m", "trainer", "programs"], capture_output=True, text=True,
                             check=True).stdout
    assert "hotpot_qa" in listing and "generate_query -> generate_answer" in listing

    train = tmp_path / "train.jsonl"
    rows = (SHARED_DATA / "hotpotqa" / "train.jsonl").read_text().splitlines()[:8]
    train.write_text("\n".join(rows) + "\n")
    config = tmp_path / "hotpot.toml"
    config.write_text(f"""
program = "hotpot_qa"
strategy = "mmgrpo"
estimator = "gdpo"
train_data = "{train}"
corpus_data = "{SHARED_DATA / 'hotpotqa' / 'corpus.jsonl'}"
steps = 3
examples_per_step = 2
group_size = 4
rollouts_per_example = 4
max_new_tokens = 12
max_context_length = 2048
eval_every = 0
rewards = [{{name = "hotpot_f1", params = {{min_words = 1}}}}, {{name = "hotpot_format"}}, {{name = "hotpot_em"}}]
""")
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "trainer", "train", "--config", str(config), "--run-dir",
                           str(run_dir), "--quiet"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    steps = [e for e in events if e.get("rollouts")]
    from cohort_hotpot.program import Search

    search = Search(str(SHARED_DATA / "hotpotqa" / "corpus.jsonl"))
    assert [e["step"] for e in steps] == [1, 2, 3]
    for event in steps:
        assert {"reward/hotpot_f1", "reward/hotpot_format", "reward/hotpot_em"} <= set(event["metrics"])
        for rollout in event["rollouts"]:
            modules = [c["module"] for c in rollout["calls"]]
            assert modules[0] == "generate_query" and modules[-1] in ("generate_query", "generate_answer")
            if rollout["failed"]:
                continue
            assert modules == ["generate_query", "generate_answer"]
            # The answer call saw what BM25 retrieved for the query the first call wrote (the tiny
            # model's queries are mostly noise, so often nothing).
            query = rollout["calls"][0]["parsed"]["query"]
            context = rollout["calls"][1]["messages"][-1]["content"].split("[[ ## question ## ]]")[0]
            passages = search(query)
            assert context.strip() == "[[ ## context ## ]]\n" + (json.dumps(passages, ensure_ascii=False) if passages else "[]")
