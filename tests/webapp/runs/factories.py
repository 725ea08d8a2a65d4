"""Small builders for run-side rows (plain functions: explicit and easy to read in a test)."""

from webapp.projects.services import personal_project_ensure
from webapp.runs.models import Program, Run, Task


def make_program(name: str = "toy", modules=("solver",)) -> Program:
    return Program.objects.get_or_create(name=name, defaults={"title": name.title(), "modules": list(modules)})[0]


def make_task(name: str = "toy-task") -> Task:
    return Task.objects.get_or_create(name=name, defaults={"title": "Toy task", "program": make_program()})[0]


def make_run(owner, *, state: str = Run.State.QUEUED, **fields) -> Run:
    fields.setdefault("project", personal_project_ensure(owner))
    return Run.objects.create(owner=owner, task=make_task(), config={"steps": 4}, state=state, total_steps=4, **fields)


def make_multihop_task(directory) -> Task:
    """The DSPy test plugin's two-predictor program (dspy_multihop) with four train and two dev rows, as
    staff would set it up (the test plugins must be installed: the `test_plugins` fixture)."""
    import json

    from trainer.programs import program_info
    from webapp.datasets.kinds import program_dataset_kind
    from webapp.datasets.models import Dataset
    from webapp.datasets.services import ImportOptions, SourceFile, dataset_import
    from webapp.runs.launch.catalog import programs_sync

    programs_sync()
    kind = program_dataset_kind(program_info("dspy_multihop"))
    rows = directory / "multihop.jsonl"
    train = [("Capital of France?", "Paris"), ("Color of the sky?", "blue"), ("Two plus two?", "4"),
             ("Opposite of hot?", "cold")]
    dev = [("Capital of Italy?", "Rome"), ("Color of grass?", "green")]
    rows.write_text("".join(json.dumps({"id": f"{split[0]}{i}", "question": q, "hops": 1, "answer": a, "split": split})
                            + "\n" for split, pairs in (("train", train), ("dev", dev))
                            for i, (q, a) in enumerate(pairs)))
    dataset = Dataset.objects.create(name="multihop", kind=kind)
    options = ImportOptions(kind=kind, split_field="split")
    assert dataset_import(dataset, [SourceFile(str(rows), "multihop.jsonl")], options).ok
    return Task.objects.create(name="multihop", title="Multi-hop", program=Program.objects.get(name="dspy_multihop"),
                               dataset=dataset, rewards=program_info("dspy_multihop")["default_rewards"])
