"""`import_dataset`, `import_builtin_datasets`, `create_builtin_tasks`, the Task admin's reward
editing, and the export of a task's data into the files a RunConfig reads."""

import json

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from trainer.config import RunConfig
from trainer.data import read_jsonl
from trainer.programs import PROGRAMS, get_program
from webapp.datasets.export import ExportError, task_export
from webapp.datasets.models import Dataset
from webapp.runs.launch import catalog
from webapp.runs.launch.catalog import DATA_TASKS, builtin_tasks_sync, data_tasks_sync, programs_sync
from webapp.runs.models import Program, Task

pytestmark = pytest.mark.django_db


def test_import_dataset_command_with_mapping_and_ratio(tmp_path, capsys):
    path = tmp_path / "intents.csv"
    path.write_text("utterance,intent\n" + "".join(f"text {i},label{i % 3}\n" for i in range(40)))
    call_command("import_dataset", str(path), "--kind", "classification", "--name", "intents",
                 "--map", "utterance=text", "--map", "intent=label", "--dev-ratio", "0.25", "--seed", "3")
    dataset = Dataset.objects.get(name="intents")
    assert (dataset.row_count, dataset.train_count, dataset.dev_count, dataset.version) == (40, 30, 10, 1)
    assert "intents (version 1): imported 40 rows (30 train, 10 dev)" in capsys.readouterr().out


def test_import_dataset_command_reports_problems_and_imports_nothing(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "answer": "1"}\n{"question": "q"}\n')
    with pytest.raises(CommandError, match="1 problem\\(s\\); nothing was imported into 'bad'"):
        call_command("import_dataset", str(path), "--kind", "math", "--name", "bad")
    assert "bad.jsonl, line 2, field 'answer': missing (required number)" in capsys.readouterr().err
    assert Dataset.objects.get(name="bad").rows.count() == 0
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_dataset", str(tmp_path / "nope.jsonl"), "--kind", "math", "--name", "x")


def test_builtin_tasks_are_created_once_their_datasets_exist(shared_data, capsys):
    call_command("create_builtin_tasks")
    out = capsys.readouterr().out
    assert "Missing datasets" in out and "banking77" in out and "0 ready-made task(s)" in out

    call_command("import_builtin_datasets", "--data-dir", str(shared_data), "--only", "gsm8k", "toolrl", "hotpotqa",
                 "hotpotqa-corpus")
    tasks, missing = data_tasks_sync()
    assert sorted(t.name for t in tasks) == ["gsm8k", "hotpotqa-search", "toolrl"]
    assert sorted(missing) == ["banking77", "hover"]
    call_command("import_builtin_datasets", "--data-dir", str(shared_data), "--only", "banking77", "hover")
    call_command("create_builtin_tasks")
    call_command("create_builtin_tasks")  # idempotent
    assert Task.objects.filter(name__in=[t.name for t in DATA_TASKS]).count() == 5
    search = Task.objects.get(name="hotpotqa-search")
    assert (search.program.name, search.dataset.name, search.corpus.name) == ("search", "hotpotqa", "hotpotqa-corpus")
    assert [r["name"] for r in search.rewards] == ["token_f1", "mhgpo_penalty_rewriter", "mhgpo_penalty_reranker",
                                                    "mhgpo_penalty_answerer"]
    gsm8k = Task.objects.get(name="gsm8k")
    assert gsm8k.rewards[1] | {"params": None} == {"name": "length", "weight": 1.0, "params": None,
                                                   "condition_on": "numeric_match", "threshold": 1.0}
    for task in Task.objects.filter(name__in=[t.name for t in DATA_TASKS]):
        assert task.dataset.kind == PROGRAMS[task.program.name].dataset_kind
        # Its rewards are a valid run config (GDPO for the two multi-reward tasks of the paper).
        RunConfig(program=task.program.name, rewards=task.rewards,
                  estimator="gdpo" if task.name in ("toolrl", "gsm8k") else "grpo")


def test_a_builtin_task_whose_program_cannot_be_used_here_is_left_out(monkeypatch):
    # word_math on a machine without DSPy: its entry point fails to import, so the program is unavailable
    monkeypatch.setattr(catalog, "BUILTIN_TASKS", [*catalog.BUILTIN_TASKS, ("gone", "no_such_program", "Gone", "")])
    programs_sync()
    tasks = builtin_tasks_sync()
    assert "gone" not in {t.name for t in tasks} and not Task.objects.filter(name="gone").exists()
    assert {"toy", "arith_format", "word_math"} <= {t.name for t in tasks}


def test_export_writes_what_the_trainer_reads(shared_data, tmp_path):
    call_command("import_builtin_datasets", "--data-dir", str(shared_data), "--only", "hotpotqa", "hotpotqa-corpus")
    data_tasks_sync()
    task = Task.objects.get(name="hotpotqa-search")
    values = task_export(task, tmp_path / "run")
    assert values == {"train_data": str(tmp_path / "run/train.jsonl"), "dev_data": str(tmp_path / "run/dev.jsonl"),
                      "corpus_data": str(tmp_path / "run/corpus.jsonl")}
    train, dev, corpus = (read_jsonl(values[k]) for k in ("train_data", "dev_data", "corpus_data"))
    assert (len(train), len(dev), len(corpus)) == (300, 150, 4_429)
    # Byte-for-byte the shared records, in file order.
    assert train == [json.loads(line) for line in (shared_data / "hotpotqa/train.jsonl").read_text().splitlines()]
    assert corpus[0] == json.loads((shared_data / "hotpotqa/corpus.jsonl").read_text().splitlines()[0])
    # The trainer's program runs on them as they are.
    config = RunConfig(program="search", rewards=task.rewards, **values)
    program = get_program("search", corpus_path=config.corpus_data)
    state = program.start(train[0])
    assert program.next_agent(state) == "rewriter"
    assert train[0]["question"] in program.process_prompt(state, "rewriter")[-1]["content"]
    assert list(tmp_path.joinpath("run").iterdir()).__len__() == 3  # no partial files left


def test_export_of_a_task_without_rows_or_without_a_dataset(tmp_path):
    programs_sync()
    empty = Dataset.objects.create(name="empty", kind="math")
    task = Task.objects.create(name="m", title="m", program=Program.objects.get(name="math"), dataset=empty)
    with pytest.raises(ExportError, match="has no training rows yet"):
        task_export(task, tmp_path)
    toy = Task.objects.create(name="toy", title="toy", program=Program.objects.get(name="toy"))
    assert task_export(toy, tmp_path) == {"train_data": None, "dev_data": None, "corpus_data": None}


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("boss", password="pw-for-tests-1"))
    return client


def task_form(program, dataset=None, corpus=None, rewards=()):
    data = {"name": "t1", "title": "T1", "description": "", "program": program.pk,
            "dataset": dataset.pk if dataset else "", "corpus": corpus.pk if corpus else ""}
    for i, reward in enumerate([*rewards, {}]):
        for key in ("name", "weight", "params", "condition_on", "threshold"):
            data[f"rewards-{i}-{key}"] = reward.get(key, "")
    return data


def test_task_admin_edits_rewards_with_weights_and_conditioning(admin_client):
    programs_sync()
    gsm8k = Dataset.objects.create(name="gsm8k", kind="math")
    url = reverse("admin:runs_task_add")
    assert 'name="rewards-0-name"' in admin_client.get(url).content.decode()
    form = task_form(Program.objects.get(name="math"), gsm8k, rewards=[
        {"name": "numeric_match", "weight": "2"},
        {"name": "length", "weight": "0.5", "params": '{"limit": 300}', "condition_on": "numeric_match",
         "threshold": "1"}])
    response = admin_client.post(url, form)
    assert response.status_code == 302, response.content.decode()[-3000:]
    task = Task.objects.get(name="t1")
    assert task.rewards == [
        {"name": "numeric_match", "weight": 2.0, "params": {}},
        {"name": "length", "weight": 0.5, "params": {"limit": 300}, "condition_on": "numeric_match", "threshold": 1.0}]
    assert "2×numeric_match + 0.5×length if numeric_match ≥ 1" in admin_client.get(
        reverse("admin:runs_task_changelist")).content.decode()


@pytest.mark.parametrize("change, field, message", [
    ({"rewards": [{"name": "length", "condition_on": "nope"}]}, "rewards", "conditioned on &#x27;nope&#x27;"),
    ({"rewards": [{"name": "unknown_reward"}]}, "rewards", "unknown reward"),
    ({"rewards": [{"name": "length", "params": "{limit"}]}, "rewards", "not valid JSON"),
    ({"rewards": [{"name": "length", "weight": "heavy"}]}, "rewards", "weight must be a number"),
    ({"dataset": "corpus"}, "dataset", "Select a valid choice"),
    ({"program": "search"}, "corpus", "choose a retrieval corpus"),
])
def test_task_admin_rejects_invalid_tasks_with_a_message(admin_client, change, field, message):
    programs_sync()
    math = Dataset.objects.create(name="gsm8k", kind="math")
    qa = Dataset.objects.create(name="qa", kind="qa")
    corpus = Dataset.objects.create(name="passages", kind="corpus")
    program = Program.objects.get(name=change.get("program", "math"))
    dataset = {"corpus": corpus}.get(change.get("dataset"), qa if program.name == "search" else math)
    form = task_form(program, dataset, rewards=change.get("rewards", [{"name": "token_f1" if program.name == "search"
                                                                       else "numeric_match"}]))
    response = admin_client.post(reverse("admin:runs_task_add"), form)
    assert response.status_code == 200 and message in response.content.decode()
    assert not Task.objects.filter(name="t1").exists()
