"""The catalog of what runs can train: the trainer's program registry mirrored into Program rows,
and the built-in tasks that need no uploaded data.

`catalog_sync()` is idempotent; `manage.py sync_programs` and the quick-start run command call it.
Programs live in code (`trainer/programs/`), never in uploads: a program that left the registry is
kept (runs point at it) but marked inactive so the launch form stops offering it.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from trainer.programs import list_programs, program_info
from webapp.runs.models import Program, Task

# Built-in tasks: (task name, program name, title, description). Their examples are generated in
# code by the program, so they work on a fresh install with no dataset.
BUILTIN_TASKS = [
    ("toy", "toy", "Toy: repeat the word",
     "Synthetic task generated in code: the model must repeat a word. Small enough for the tiny "
     "local model to learn on a CPU in a minute; use it to try Cohort end to end."),
]


@transaction.atomic
def programs_sync() -> tuple[int, int]:
    """Upserts a Program row per registered program; returns (synced, deactivated)."""
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
    return len(registered), deactivated


@transaction.atomic
def builtin_tasks_sync() -> list[Task]:
    """Creates the built-in tasks that are missing; an admin's later edits to them are kept."""
    tasks = []
    for name, program_name, title, description in BUILTIN_TASKS:
        program = Program.objects.get(name=program_name)
        rewards = program_info(program_name)["default_rewards"]
        task, _ = Task.objects.get_or_create(
            name=name, defaults={"title": title, "description": description, "program": program, "rewards": rewards},
        )
        tasks.append(task)
    return tasks


def catalog_sync() -> dict[str, int]:
    synced, deactivated = programs_sync()
    tasks = builtin_tasks_sync()
    return {"programs": synced, "deactivated": deactivated, "builtin_tasks": len(tasks)}
