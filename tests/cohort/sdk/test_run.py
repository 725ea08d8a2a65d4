"""`cohort.init` and `Run` without a server (offline mode): how steps merge and seal, which values
are kept, what a mistake raises, and what finishing (by hand, by `with`, at exit) records."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from fractions import Fraction

import numpy as np
import pytest
import torch

import cohort
from cohort.sdk import CohortWarning
from cohort.sdk.spool import Spool


def offline(tmp_path, **kwargs):
    return cohort.init(task="toy-task", mode="offline", dir=tmp_path, **kwargs)


def written(run) -> list[dict]:
    return [json.loads(line) for line in Spool.open(run.folder).lines()]


def test_logs_of_one_step_merge_and_a_step_is_sealed_when_a_later_one_arrives(tmp_path):
    run = offline(tmp_path)
    run.log({"loss": 1.0, "kl": 0.1}, step=0)
    run.log_rollouts(0, [{"prompt": "p", "completion": "a", "reward": 1.0, "group": 0}])
    run.log({"loss": 0.5}, step=0)  # the later value wins
    run.log_rollouts(0, [{"prompt": "p", "completion": "b", "reward": 0.0, "group": 0}])
    assert written(run) == []  # step 0 may still change: not written
    run.log({"loss": 0.4})  # step=None: the step after the newest
    assert [s["step"] for s in written(run)] == [0]
    assert written(run)[0] == {"step": 0, "metrics": {"loss": 0.5, "kl": 0.1},
                               "rollouts": [{"prompt": "p", "completion": "a", "reward": 1.0, "group": 0},
                                            {"prompt": "p", "completion": "b", "reward": 0.0, "group": 0}]}
    run.log({"loss": 0.3}, step=5)
    run.log({"loss": 0.2})
    with pytest.warns(CohortWarning, match="step 2 is older than the pending step 6: dropped"):
        run.log({"loss": 9.0}, step=2)
    with pytest.warns(CohortWarning, match="step 3 is older"):
        run.log_rollouts(3, [{"prompt": "p", "completion": "late"}])
    run.flush()  # step 6 sealed now
    assert [s["step"] for s in written(run)] == [0, 1, 5, 6]
    with pytest.warns(CohortWarning, match="step 6 is not after step 6, which is sealed"):
        run.log({"loss": 9.0}, step=6)
    run.log({"loss": 0.1}, step=7)
    run.finish()
    assert [(s["step"], s["metrics"]) for s in written(run)] == [
        (0, {"loss": 0.5, "kl": 0.1}), (1, {"loss": 0.4}), (5, {"loss": 0.3}), (6, {"loss": 0.2}), (7, {"loss": 0.1})]
    with pytest.warns(CohortWarning, match="finished"):
        run.log({"loss": 0.0})
    assert len(written(run)) == 5


def test_spans_join_the_pending_step_and_a_bar_that_is_none_raises(tmp_path):
    run = offline(tmp_path)
    run.log({"loss": 1.0}, step=3)
    run.log_span("generate", 10.0, 16.0, lane="sampler", policy_version=2)  # step=None: the pending step 3
    run.log_span("update", 17.0, 16.0)  # given backwards: the bar is the time between them
    with pytest.raises(ValueError, match="a span needs a lane of 1 to"):
        run.log_span("", 1.0, 2.0)
    with pytest.raises(ValueError, match="a whole policy_version"):
        run.log_span("generate", 1.0, 2.0, policy_version=1.5)
    with pytest.raises(ValueError, match="finite start and end"):
        run.log_span("update", float("nan"), 2.0)
    run.log_span("evaluate", 20.0, 21.0, lane="sampler", step=4)
    run.finish()
    assert [(s["step"], s.get("spans")) for s in written(run)] == [
        (3, [{"lane": "sampler", "name": "generate", "start": 10.0, "end": 16.0, "policy_version": 2},
             {"lane": "trainer", "name": "update", "start": 16.0, "end": 17.0}]),
        (4, [{"lane": "sampler", "name": "evaluate", "start": 20.0, "end": 21.0}])]


def test_only_numbers_are_kept_with_one_warning_per_name(tmp_path, recwarn):
    run = offline(tmp_path)
    values = {"int": 3, "float": 0.5, "bool": True, "np.float32": np.float32(0.25), "np.int64": np.int64(4),
              "0-d array": np.array(1.5), "fraction": Fraction(1, 4), "nan": float("nan"), "inf": np.inf,
              "none": None, "text": "0.5", "np.str_": np.str_("1"), "vector": np.zeros(2), "dict": {"a": 1}}
    run.log(values, step=0)
    run.log(values, step=1)
    run.finish()
    kept = {"int": 3, "float": 0.5, "bool": 1, "np.float32": 0.25, "np.int64": 4, "0-d array": 1.5,
            "fraction": 0.25, "nan": None, "inf": None, "none": None}
    assert [s["metrics"] for s in written(run)] == [kept, kept]
    assert type(written(run)[0]["metrics"]["np.int64"]) is int
    messages = sorted(str(w.message) for w in recwarn if w.category is CohortWarning)
    assert len(messages) == 4 and all("is not a number" in m for m in messages)  # once per name, not per call
    assert [m.split("'")[1] for m in messages] == ["dict", "np.str_", "text", "vector"]


@pytest.mark.parametrize(("rollout", "message"), [
    ("not a dict", "rollout 0 must be a dict"),
    ({"completion": "x"}, "rollout 1 has no prompt: a rollout needs a prompt and a completion"),
    ({"prompt": "x" * 100_001, "completion": "x"}, "rollout 1's prompt has 100,001 characters; at most 100,000"),
    ({"prompt": "x", "completion": "x", "module": ""}, "module must not be empty"),
    ({"prompt": "x", "completion": "x", "example_id": "e" * 201}, "example_id must be a string of at most 200"),
    ({"prompt": "x", "completion": "x", "rewrd": 1}, "unknown keys \\['rewrd'\\]"),
    ({"prompt": "x", "completion": 3}, "completion must be a string or a list of chat messages"),
    ({"prompt": [{"role": "user"}], "completion": "x"}, "prompt must be a string or a list of"),
    ({"prompt": "x", "completion": "x", "rewards": {"f1": "high"}}, "reward 'f1' must be a number or None"),
    ({"prompt": "x", "completion": "x", "rewards": [1.0]}, "rewards must be a dict"),
    ({"prompt": "x", "completion": "x", "reward": "1"}, "reward must be a number or None"),
    ({"prompt": "x", "completion": "x", "advantage": [0.1]}, "advantage must be a number or None"),
    ({"prompt": "x", "completion": "x", "group": 1.5}, "group must be a string or an integer"),
    ({"prompt": "x", "completion": "x", "group": True}, "group must be a string or an integer"),
    ({"prompt": "x", "completion": "x", "example_id": 3}, "example_id must be a string"),
])
def test_a_malformed_rollout_raises_at_the_call_and_nothing_of_it_is_kept(tmp_path, rollout, message):
    run = offline(tmp_path)
    good = {"prompt": [{"role": "user", "content": "hi"}], "completion": "yo", "rewards": {"f1": np.float64(0.5)},
            "group": np.int64(2), "module": "answer", "example_id": "e1", "advantage": None}
    with pytest.raises(ValueError, match=message):
        run.log_rollouts(0, [good, rollout] if isinstance(rollout, dict) else [rollout])
    run.log_rollouts(0, [good])
    run.finish()
    assert written(run)[0]["rollouts"] == [{**good, "rewards": {"f1": 0.5}, "group": 2}]


def test_per_token_arrays_are_kept_as_lists_from_lists_numpy_and_tensors(tmp_path):
    run = offline(tmp_path)
    run.log_rollouts(0, [
        {"prompt": "p", "completion": "Hello", "tokens": ["He", "llo", "<|im_end|>"], "logprobs": [-0.5, -1, 0.0],
         "entropies": [np.float32(0.25), 2, 0.0]},
        {"prompt": "p", "completion": "Hi", "tokens": np.array(["Hi"]), "logprobs": np.array([-0.125], dtype=np.float32),
         "entropies": torch.tensor([1.5], dtype=torch.bfloat16)},
        {"prompt": "p", "completion": "Yo", "tokens": ("Yo",), "logprobs": torch.tensor([-2.0]), "entropies": None},
    ])
    run.finish()
    first, second, third = written(run)[0]["rollouts"]
    assert (first["tokens"], first["logprobs"], first["entropies"]) == (["He", "llo", "<|im_end|>"], [-0.5, -1.0, 0.0],
                                                                       [0.25, 2.0, 0.0])
    assert (second["tokens"], second["logprobs"], second["entropies"]) == (["Hi"], [-0.125], [1.5])
    assert third["tokens"] == ["Yo"] and third["logprobs"] == [-2.0] and "entropies" not in third


@pytest.mark.parametrize(("arrays", "message"), [
    ({"tokens": ["a", "b"], "entropies": [0.5] * 3}, "rollouts[1].entropies: 3 values for 2 tokens"),
    ({"tokens": ["a", "b"], "logprobs": np.zeros(1)}, "rollouts[1].logprobs: 1 values for 2 tokens"),
    ({"tokens": ["a", "b"], "logprobs": [-1.0, float("nan")]}, "rollouts[1].logprobs[1] is nan: per-token values "
                                                               "must be finite"),
    ({"tokens": ["a", "b"], "entropies": torch.tensor([1.0, float("inf")])}, "rollouts[1].entropies[1] is inf"),
    ({"tokens": ["a", "b"], "entropies": [1.0, None]}, "rollouts[1].entropies[1] is None"),
    ({"tokens": ["a", "b"], "logprobs": [-1.0, 0.5]}, "rollouts[1].logprobs[1] is 0.5: a log-prob is at most 0"),
    ({"tokens": ["a", "b"], "entropies": [1.0, -0.5]}, "rollouts[1].entropies[1] is -0.5: an entropy is at least 0"),
    ({"tokens": ["a", "b"], "logprobs": [-1.0, "x"]}, "rollouts[1].logprobs[1] must be a number, not str"),
    ({"tokens": ["a", "b"], "logprobs": [-1.0, True]}, "rollouts[1].logprobs[1] must be a number, not bool"),
    ({"tokens": ["a", "b"], "logprobs": np.zeros((2, 1))}, "rollouts[1].logprobs[0] must be a number, not list"),
    ({"tokens": ["a", "b"], "logprobs": -1.0}, "rollouts[1].logprobs must be a list of numbers"),
    ({"logprobs": [-1.0]}, "rollouts[1].logprobs needs rollouts[1].tokens"),
    ({"tokens": "ab"}, "rollouts[1].tokens must be a list of strings"),
    ({"tokens": ["a", 2]}, "rollouts[1].tokens[1] must be a string"),
    ({"tokens": ["a"] * 32_769}, "rollouts[1].tokens has 32,769 tokens; at most 32,768"),
    ({"tokens": ["a", "x" * 1_001]}, "rollouts[1].tokens[1] has 1,001 characters; at most 1,000"),
])
def test_a_bad_per_token_array_raises_at_the_call_naming_the_rollout_and_the_field(tmp_path, arrays, message):
    run = offline(tmp_path)
    good = {"prompt": "p", "completion": "ab", "tokens": ["a", "b"], "logprobs": [-1.0, -2.0], "entropies": [0.5, 1.0]}
    with pytest.raises(ValueError, match=re.escape(message)):
        run.log_rollouts(0, [good, {"prompt": "p", "completion": "ab", **arrays}])
    run.finish()
    assert written(run) == []  # nothing of the call was kept


def test_other_mistakes_raise_clear_value_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("COHORT_URL", raising=False)
    run = offline(tmp_path)
    for step in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="step must be an integer from 0 to"):
            run.log({"a": 1}, step=step)
    with pytest.raises(ValueError, match="a metric's name must be a string of 1 to 200 characters, not 1"):
        run.log({1: 1.0})
    with pytest.raises(ValueError, match="metrics must be a dict"):
        run.log([1.0])
    with pytest.raises(ValueError, match="rollouts must be a list of dicts"):
        run.log_rollouts(0, {"completion": "x"})
    one = {"prompt": "p", "completion": "x"}
    run.log_rollouts(0, [one] * 4000)
    with pytest.raises(ValueError, match="at most 4096 rollouts; this one would hold 4100"):
        run.log_rollouts(0, [one] * 100)
    run.log_rollouts(1, [{**one, "rewards": {f"r{i}": 1.0 for i in range(20)}}])
    with pytest.raises(ValueError, match="at most 32 reward names; this one would name 40"):
        run.log_rollouts(1, [{**one, "rewards": {f"r{i}": 1.0 for i in range(20, 40)}}])
    run.log_rollouts(2, [{**one, "module": f"m{i}"} for i in range(31)] + [one])
    with pytest.raises(ValueError, match="at most 32 modules; this one would name 33"):
        run.log_rollouts(2, [{**one, "module": "one more"}])
    run.log({f"m{i}": 1.0 for i in range(300)}, step=3)
    with pytest.raises(ValueError, match="a step holds at most 500 metrics; this one would hold 600"):
        run.log({f"n{i}": 1.0 for i in range(300)}, step=3)
    with pytest.raises(ValueError, match="a metric's name must be a string of 1 to 200 characters"):
        run.log({"x" * 201: 1.0}, step=3)
    with pytest.raises(ValueError, match="state must be one of"):
        run.finish("cancelled")
    run.finish()
    for kwargs, message in [({"task": "no spaces"}, "task must be the name of a Cohort task"),
                            ({"tags": "baseline"}, "tags must be a list of strings"),
                            ({"tags": ["-bad"]}, "tags are at most 20 labels"),
                            ({"tags": [f"t{i}" for i in range(21)]}, "tags are at most 20 labels"),
                            ({"config": {"blob": "x" * 70_000}}, "config is 70,011 bytes as JSON; at most 65,536"),
                            ({"origin": "cohort"}, "origin must be the trainer's short name"),
                            ({"config": {"lr": float("nan")}}, "config must be JSON without NaN"),
                            ({"config": [1]}, "config must be a dict"),
                            ({"total_steps": -1}, "total_steps \\(0: unknown\\) must be an integer"),
                            ({"project": "two words"}, "project must be a Cohort project's name"),
                            ({"project": 7}, "project must be a Cohort project's name"),
                            ({"mode": "sometimes"}, "mode must be one of online, offline, disabled")]:
        with pytest.raises(ValueError, match=message):
            cohort.init(**{"task": "toy-task", "mode": "offline", "dir": tmp_path, **kwargs})
    with pytest.raises(ValueError, match="needs a server and a token"):
        cohort.init(task="toy-task", mode="online", url="", token="", dir=tmp_path)


def test_the_run_folder_records_the_creation_and_the_finish_and_never_the_token(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COHORT_TOKEN", "secret-token-value")
    run = cohort.init("http://cohort.example:8000", task="toy-task", name="sweep 3", config={"lr": 1e-5,
                      "path": tmp_path}, tags=["Baseline", "gdpo"], notes="n", mode="offline", dir=tmp_path,
                      total_steps=10)
    assert run.id is None and run.url is None and run.folder.parent == tmp_path
    run.log({"loss": 1.0}, step=0)
    run.finish("failed", error="CUDA out of memory")
    record = json.loads((run.folder / "run.json").read_text())
    assert record["create"] == {"client_id": run.folder.name, "task": "toy-task", "name": "sweep 3",
                                "config": {"lr": 1e-5, "path": str(tmp_path)}, "tags": ["baseline", "gdpo"],
                                "notes": "n", "origin": "sdk", "total_steps": 10}
    assert record["url"] == "http://cohort.example:8000/" and record["acked"] == 0
    assert record["finish"] == {"state": "failed", "error": "CUDA out of memory"} and not record["finished"]
    assert "secret-token-value" not in "".join(p.read_text() for p in run.folder.iterdir())
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"cohort: 1 steps saved offline in {run.folder}; upload them with: cohort sync {run.folder}"]


def test_the_project_comes_from_the_call_or_cohort_project(tmp_path, monkeypatch):
    monkeypatch.delenv("COHORT_PROJECT", raising=False)
    named = cohort.init(task="toy-task", mode="offline", dir=tmp_path, project="vision-rl")
    monkeypatch.setenv("COHORT_PROJECT", "lab-p")
    from_env = cohort.init(task="toy-task", mode="offline", dir=tmp_path)
    monkeypatch.delenv("COHORT_PROJECT")
    default = cohort.init(task="toy-task", mode="offline", dir=tmp_path)
    for run in (named, from_env, default):
        run.finish()
    creates = [json.loads((run.folder / "run.json").read_text())["create"] for run in (named, from_env, default)]
    assert [c.get("project") for c in creates] == ["vision-rl", "lab-p", None]  # None: the server's default


def test_a_with_block_finishes_failed_on_an_exception_and_succeeded_otherwise(tmp_path):
    with pytest.raises(RuntimeError), offline(tmp_path) as failing:
        failing.log({"loss": 1.0})
        raise RuntimeError("diverged")
    with offline(tmp_path) as fine:
        fine.log({"loss": 1.0})
    assert Spool.open(failing.folder).state["finish"] == {"state": "failed", "error": "RuntimeError: diverged"}
    assert Spool.open(fine.folder).state["finish"] == {"state": "succeeded", "error": ""}
    assert len(written(failing)) == 1  # the pending step was sealed by the finish


def test_disabled_mode_writes_nothing(tmp_path):
    run = cohort.init(task="toy-task", mode="disabled", dir=tmp_path)
    run.log({"loss": 1.0})
    run.log_rollouts(0, [{"prompt": "p", "completion": "x"}])
    run.finish()
    assert run.folder is None and run.id is None and list(tmp_path.iterdir()) == []


PROGRAM = """
import cohort, sys
run = cohort.init(task="toy-task", mode="offline", dir=sys.argv[1])
run.log({"loss": 1.0}, step=0)
run.log({"loss": 0.5}, step=1)
if sys.argv[2] == "die":
    raise ValueError("bad batch shape")
"""


@pytest.mark.parametrize(("how", "finish"), [("die", {"state": "failed", "error": "ValueError: bad batch shape"}),
                                             ("forget", {"state": "succeeded", "error": ""})])
def test_a_run_the_program_forgot_to_finish_is_finished_at_exit(tmp_path, how, finish):
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path), how], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == (1 if how == "die" else 0), done.stderr
    if how == "die":
        assert "ValueError: bad batch shape" in done.stderr  # the original excepthook still printed it
    (folder,) = tmp_path.iterdir()
    spool = Spool.open(folder)
    assert spool.state["finish"] == finish
    assert [json.loads(line)["step"] for line in spool.lines()] == [0, 1]


def test_importing_cohort_loads_neither_pandas_nor_numpy_and_of_the_trainer_only_the_event_contract():
    code = textwrap.dedent("""
        import sys, cohort
        cohort.init, cohort.Run, cohort.CohortAPIError
        import cohort.sdk.sync, cohort.__main__
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("pandas", "numpy", "django", "torch", "trainer")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    # The SDK checks its values against the bounds of trainer/run/events.py, which imports nothing.
    assert done.stdout.strip() == "['trainer', 'trainer.run', 'trainer.run.events']"
    assert cohort.Client.__module__ == "cohort.client"
    from cohort.client import Client, CohortAPIError

    assert Client is cohort.Client and CohortAPIError is cohort.CohortAPIError
