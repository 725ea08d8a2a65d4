"""Small builders for run-side rows (plain functions: explicit and easy to read in a test)."""

from webapp.runs.models import Program, Run, Task


def make_program(name: str = "toy", modules=("solver",)) -> Program:
    return Program.objects.get_or_create(name=name, defaults={"title": name.title(), "modules": list(modules)})[0]


def make_task(name: str = "toy-task") -> Task:
    return Task.objects.get_or_create(name=name, defaults={"title": "Toy task", "program": make_program()})[0]


def make_run(owner, *, state: str = Run.State.QUEUED, **fields) -> Run:
    return Run.objects.create(owner=owner, task=make_task(), config={"steps": 4}, state=state, total_steps=4, **fields)
