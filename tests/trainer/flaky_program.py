"""A test-local program whose code raises for chosen examples, and a tiny-model Trainer running it.

``FlakyEcho`` is the toy program (one module, ``echo``) over four examples ``e0``..``e3`` from a JSONL
file; its ``step`` raises ``ZeroDivisionError`` for the example ids in ``raise_for`` and ``Abort`` (a
``RunAbort``) for those in ``abort_for``. It is registered only while a test uses it
(``registered_flaky_echo``), so the program lists other tests see stay as they were.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trainer.programs import register_program
from trainer.programs.toy import ToyEcho, ToyState
from trainer.rollouts.sampling import RunAbort

EXAMPLES = [{"id": f"e{i}", "word": "apple", "answer": "apple"} for i in range(4)]


class Abort(RunAbort):
    """What a program raises on purpose to stop the run."""


@dataclass(frozen=True)
class FlakyState(ToyState):
    example_id: str = ""


class FlakyEcho(ToyEcho):
    name = "test_flaky_echo"
    title = "Flaky echo (tests)"
    description = "The toy program, whose step raises for chosen examples."

    def __init__(self, **options):
        super().__init__(**options)
        self.raise_for: set[str] = set()
        self.abort_for: set[str] = set()

    def start(self, example):
        return FlakyState(word=example["word"], example_id=example["id"])

    def step(self, state, agent, completion):
        if state.example_id in self.abort_for:
            raise Abort(f"{state.example_id} cannot go on: stop the run")
        if state.example_id in self.raise_for:
            raise ZeroDivisionError(f"cannot echo {state.example_id}")
        return super().step(state, agent, completion)


@contextmanager
def registered_flaky_echo() -> Iterator[type[FlakyEcho]]:
    """``FlakyEcho`` in the program registry for the block, gone afterwards."""
    from trainer.programs import registry

    builtins = getattr(registry, "_BUILTINS", None)
    if builtins is None:  # the registry before plugins: PROGRAMS is the dict itself
        builtins = registry.PROGRAMS
    register_program(FlakyEcho)
    try:
        yield FlakyEcho
    finally:
        builtins.pop(FlakyEcho.name, None)


def flaky_config(data_dir: Path, **changes):
    """A RunConfig training ``FlakyEcho`` on the four examples, all four each step, 4 rollouts each."""
    from trainer.config import RunConfig

    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "train.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in EXAMPLES))
    base = {**ToyEcho.suggested_config, "program": FlakyEcho.name, "train_data": str(path), "steps": 2,
            "group_size": 4, "rollouts_per_example": 4, "examples_per_step": 4, "eval_every": 0,
            "checkpoint_every": 0, "seed": 0, "format_failure_reward": -1.0}
    return RunConfig(**{**base, **changes})


def flaky_trainer(config, run_dir: Path, reporter, model_cache: Path):
    """A tiny-model Trainer for ``config``; ``trainer.parts.program.program`` is the ``FlakyEcho`` to arm."""
    from trainer.run.loop import Trainer

    return Trainer(config, run_dir, reporter, model_cache_dir=model_cache)
