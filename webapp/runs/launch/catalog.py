"""The catalog of what runs can train: the trainer's program registry mirrored into Program rows,
the built-in tasks that need no uploaded data, and the ready-made tasks on the real datasets.

`catalog_sync()` is idempotent; `manage.py sync_programs` and the quick-start run command call it.
Programs live in code (`trainer/programs/` and installed plugins' `cohort.programs` entry points),
never in uploads: a program that left the registry is kept (runs point at it) but marked inactive
so the launch form stops offering it. A plugin program that is installed but unavailable (its
import failed, its name clashes) gets an inactive row too, so the launch form can show it disabled
with its error and the admin lists it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from trainer.config import ConfigError, RunConfig
from trainer.programs import PROGRAMS, list_programs, program_error, program_info, unavailable_programs
from webapp.datasets.models import Dataset
from webapp.runs.models import EXTERNAL_PROGRAM, Program, Task

# Built-in tasks: (task name, program name, title, description). Their examples are generated in
# code by the program, so they work on a fresh install with no dataset.
BUILTIN_TASKS = [
    ("toy", "toy", "Toy: repeat the word",
     "Synthetic task generated in code: the model must repeat a word. Small enough for the tiny "
     "local model to learn on a CPU in a minute; use it to try Cohort end to end."),
    ("toy_format", "toy_format", "Toy: repeat the word, end with a period",
     "Synthetic two-reward task generated in code: a format reward (end with a period) and a content "
     "reward (the first word is the target). For comparing GRPO and GDPO on a CPU in minutes; with "
     "builtin:smollm2-135m-instruct (its suggested settings) a real model learns both on a CPU."),
    ("arith_format", "arith_format", "Arithmetic in a required answer format",
     "Synthetic two-reward task generated in code for the real instruct model (builtin:smollm2-135m-instruct): "
     "answer 'What is 7 + 5?' correctly (correctness) as exactly 'The answer is 12.' (format). The model "
     "meets both partly from the start, the regime where GDPO expects its gain."),
    ("word_math", "word_math", "Word problems in two DSPy modules",
     "Synthetic two-module DSPy task generated in code for builtin:smollm2-135m-instruct: extract writes the "
     "calculation of a short word problem, solve replies with the number alone (format and correctness "
     "rewards). The model is right about one time in ten before training: the Experiment page's task."),
]


@transaction.atomic
def programs_sync() -> tuple[int, int]:
    """Upserts a Program row per registered program (built-in or plugin) and an inactive one per
    unavailable plugin program that has none; returns (synced, deactivated)."""
    now = timezone.now()
    registered = list_programs()
    for info in registered:
        Program.objects.update_or_create(
            name=info["name"],
            defaults={"title": info["title"], "description": info["description"], "modules": info["agents"],
                      "is_active": True, "synced_at": now},
        )
    deactivated = (
        Program.objects.exclude(name__in=[info["name"] for info in registered]).filter(is_active=True)
        .update(is_active=False, synced_at=now)
    )
    for name in unavailable_program_names():
        Program.objects.get_or_create(name=name, defaults={"title": name, "is_active": False, "synced_at": now})
    return len(registered), deactivated


def unavailable_program_names() -> list[str]:
    """Plugin programs that cannot be used under their name (a built-in that kept its name against a
    clashing plugin is usable, so it is not among them)."""
    return sorted({entry.name for entry in unavailable_programs() if program_error(entry.name)})


@transaction.atomic
def builtin_tasks_sync() -> list[Task]:
    """Creates the built-in tasks that are missing; an admin's later edits to them are kept. A task whose
    program cannot be used here (word_math without DSPy installed) is left out: the launch form lists
    the program as unavailable, with its import error."""
    tasks = []
    for name, program_name, title, description in BUILTIN_TASKS:
        if program_name not in PROGRAMS:
            continue
        program = Program.objects.get(name=program_name)
        rewards = program_info(program_name)["default_rewards"]
        task = _task_get_or_create(name, {"title": title, "description": description, "program": program,
                                          "rewards": rewards})
        tasks.append(task)
    return tasks


def _task_get_or_create(name: str, defaults: dict) -> Task:
    """The task of this name, created from `defaults` when missing. A task that a run trained elsewhere
    created under this name first (webapp/runs/ingest/external.py: its program is EXTERNAL_PROGRAM, which
    nothing can launch) becomes the real one, its runs staying in it, as a sync after them would have
    found it. Otherwise an admin's edits to an existing task are kept."""
    task, created = Task.objects.get_or_create(name=name, defaults=defaults)
    if not created and task.program.name == EXTERNAL_PROGRAM:
        for field, value in defaults.items():
            setattr(task, field, value)
        task.save()
    return task


def catalog_sync() -> dict[str, int]:
    synced, deactivated = programs_sync()
    tasks = builtin_tasks_sync()
    return {"programs": synced, "deactivated": deactivated, "builtin_tasks": len(tasks)}


@dataclass(frozen=True)
class DataTask:
    """A ready-made task on an imported dataset (`webapp.datasets.builtin` names the datasets)."""

    name: str
    program: str
    dataset: str
    title: str
    description: str
    rewards: tuple[dict, ...] | None = None  # None: the program's default rewards
    corpus: str | None = None


DATA_TASKS = (
    DataTask("banking77", "banking77", "banking77", "Banking77 intent classification",
             "Chain-of-thought classification of banking queries into 77 intents; reward: the label matches.",
             ({"name": "label_match", "weight": 1.0, "params": {}},)),
    DataTask("hotpotqa-search", "search", "hotpotqa", "HotpotQA with the MHGPO 3-agent search system",
             "Rewriter -> BM25 over the HotpotQA corpus -> reranker -> answerer (MHGPO). Reward: answer token F1 "
             "plus each agent's format penalty (agent-specific rewards).", None, corpus="hotpotqa-corpus"),
    DataTask("hover-multihop", "hover", "hover", "HoVer multi-hop retrieval",
             "Query, retrieve, take notes, hop again (a variable number of module calls, MMGRPO). Reward: recall "
             "of the claim's supporting titles. The corpus is HotpotQA's, which holds every supporting title of "
             "only a few HoVer claims: a real evaluation needs the full Wikipedia abstracts.",
             ({"name": "title_recall", "weight": 1.0, "params": {"prediction_field": "titles"}},),
             corpus="hotpotqa-corpus"),
    DataTask("toolrl", "toolcall", "toolrl", "ToolRL tool calling (GDPO)",
             "<think>, then <tool_call> JSON lines or a <response>. Rewards: format and correctness (GDPO "
             "Appendix C); train with estimator 'gdpo' (preset gdpo-toolrl) to normalize them separately.",
             ({"name": "toolrl_format", "weight": 1.0, "params": {}},
              {"name": "toolrl_correctness", "weight": 1.0, "params": {}})),
    DataTask("gsm8k", "math", "gsm8k", "GSM8K math with conditioned length (GDPO)",
             "Solve step by step, end with '#### <number>'. Rewards: correctness, and a length reward that counts "
             "only when the answer is correct (GDPO Eq. 8); train with estimator 'gdpo' (preset gdpo-math).",
             ({"name": "numeric_match", "weight": 1.0, "params": {}},
              {"name": "length", "weight": 1.0, "params": {"limit": 400}, "condition_on": "numeric_match",
               "threshold": 1.0})),
)


def task_rewards_check(program: str, rewards: list[dict]) -> None:
    """ConfigError (naming the field) unless `rewards` are valid for a run of `program`: the same
    RunConfig the worker runs checks names, parameters, weights and conditioning."""
    if program not in PROGRAMS:
        error = program_error(program)
        raise ConfigError("program", f"program {program!r} is unavailable: {error}" if error else
                          f"program {program!r} is not registered in trainer.programs.")
    RunConfig(program=program, rewards=[dict(r) for r in rewards])


@transaction.atomic
def data_tasks_sync() -> tuple[list[Task], list[str]]:
    """Creates the ready-made tasks whose datasets are imported; returns (tasks, missing dataset
    names). Idempotent: an existing task (and an admin's edits to it) is kept as it is."""
    programs_sync()
    tasks, missing = [], []
    for spec in DATA_TASKS:
        names = [spec.dataset] + ([spec.corpus] if spec.corpus else [])
        found = {d.name: d for d in Dataset.objects.filter(name__in=names, version__gte=1)}
        absent = [n for n in names if n not in found]
        if absent:
            missing += [n for n in absent if n not in missing]
            continue
        rewards = [dict(r) for r in (spec.rewards or program_info(spec.program)["default_rewards"])]
        task_rewards_check(spec.program, rewards)
        task = _task_get_or_create(spec.name, {
            "title": spec.title, "description": spec.description, "program": Program.objects.get(name=spec.program),
            "dataset": found[spec.dataset], "corpus": found.get(spec.corpus), "rewards": rewards})
        tasks.append(task)
    return tasks, missing

