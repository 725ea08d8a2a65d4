"""Cohort as a DSPy optimizer: ``cohort.dspy.MMGRPO`` trains a DSPy program's module weights with
MMGRPO (or GRPO, MHGPO, GDPO: any Cohort strategy and estimator), and ``cohort.dspy.CohortLM`` is
the local model it trains and returns.

    import dspy
    from cohort.dspy import MMGRPO, CohortLM

    lm = CohortLM("builtin:smollm2-135m-instruct")
    program.set_lm(lm)
    trained = MMGRPO(metric, steps=20, group_size=4).compile(program, trainset=train, valset=dev)
    trained(question="...")          # answered by the model with the trained LoRA adapter

    # the MMGRPO paper's BetterTogether: prompts first, then weights
    dspy.BetterTogether(metric, p=dspy.MIPROv2(metric, auto="light"), w=MMGRPO(metric, steps=20),
                        ).compile(program, trainset=train, valset=dev, strategy="p -> w")

``compile`` trains in this process with the same engine and ``RunConfig`` fields as a dashboard run
(the keyword arguments of ``MMGRPO`` are RunConfig fields; ``steps``, ``group_size``,
``learning_rate``...). The student's current instructions and demos are what is trained, so after a
prompt optimizer the weights learn the optimized program (MMGRPO paper, Section 4, BetterTogether).
The run's event log, checkpoints and final adapter are kept in ``run_dir``.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

try:
    import dspy
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("cohort.dspy needs DSPy: pip install 'cohort[dspy]'") from exc

from dspy.teleprompt import Teleprompter

from trainer.config import RunConfig
from trainer.dspy import DSPyProgram, dspy_metric
from trainer.dspy.local_lm import CohortLM
from trainer.dspy.program import copy_without_lms

__all__ = ["MMGRPO", "CohortLM"]

# A paper-like MMGRPO run at a size a laptop finishes; every field can be overridden.
DEFAULTS: dict[str, Any] = {"strategy": "mmgrpo", "estimator": "grpo", "steps": 20, "group_size": 4,
                            "rollouts_per_example": 4, "examples_per_step": 2, "eval_every": 0,
                            "checkpoint_every": 0}


class MMGRPO(Teleprompter):
    """Train the module weights of a DSPy program with Cohort (a ``dspy.Teleprompter``).

    ``metric(example, prediction, trace=None)`` is the DSPy metric to maximize (a bool, a number, a
    ``Prediction`` with a ``score``); it becomes the run's reward. ``model`` is the Cohort model id to
    train; by default the model of the student's ``CohortLM``. ``adapter`` is the DSPy adapter the
    rollouts format and parse with (default ``dspy.settings.adapter``, else ``ChatAdapter`` without its
    JSON fallback; ``trainer.dspy.adapters.MarkerFallbackAdapter`` for small models). ``run_dir`` keeps
    the run (a new temporary folder per compile when None). Every other keyword is a ``RunConfig``
    field, checked here.

    With ``client`` (a ``cohort.client.Client``), the run is queued on that server instead, as the
    token's owner, with the launch form's checks (limits, model allow-list): it trains the server's
    registered ``program`` (default: the task's) on the rows of its ``task``, from the student's
    current instructions and demos, with the task's rewards (or ``rewards=[...]``); it is live in the
    dashboard like any run, and ``compile`` returns when it ends, with its adapter downloaded.
    """

    def __init__(self, metric: Callable[..., Any] | None = None, *, model: str | None = None, adapter: Any = None,
                 run_dir: str | Path | None = None, name: str | None = None, verbose: bool = False,
                 client: Any = None, task: str | None = None, program: str | None = None,
                 timeout: float | None = None, **config: Any):
        super().__init__()
        reserved = ("program", "train_data", "dev_data", "program_state") + (() if client else ("rewards",))
        for key in reserved:
            if key in config:
                raise TypeError(f"MMGRPO sets {key} itself (from the student, the metric and the sets given to "
                                "compile)")
        if client is None and metric is None:
            raise TypeError("MMGRPO needs the metric to train in this process (with a client the server task's "
                            "rewards are used)")
        if client is not None and not task:
            raise TypeError("with a client, name the server's task to train on: task='...'")
        self.metric, self.model, self.adapter, self.name, self.verbose = metric, model, adapter, name, verbose
        self.client, self.task, self.program, self.timeout = client, task, program, timeout
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.config = {**DEFAULTS, **config}
        RunConfig.from_dict({**self.config, "model": model or "builtin:tiny"})  # a bad field fails now
        self.last_run_dir: Path | None = None
        self.last_run: dict | None = None  # the server's run, with a client

    def compile(self, student: dspy.Module, *, trainset: list[dspy.Example],
                valset: list[dspy.Example] | None = None) -> dspy.Module:
        """Trains ``student``'s weights on ``trainset`` (evaluating on ``valset`` when ``eval_every`` is
        set) and returns a copy of it whose predictors sample with the trained adapter. With a client the
        server trains on its task's rows (``trainset`` and ``valset`` stay here: name the task that holds
        them)."""
        if not trainset:
            raise ValueError("trainset is empty")
        base_lm = self._student_lm(student)
        self._check_model(base_lm)
        model = self.model or base_lm.cohort_model
        run_dir = self.run_dir or Path(tempfile.mkdtemp(prefix="cohort-mmgrpo-"))
        run_dir.mkdir(parents=True, exist_ok=True)
        if self.client is not None:
            adapter = self._train_on_server(student, model, run_dir)
        else:
            adapter = self._train_here(student, model, run_dir, base_lm, trainset, valset)
        self.last_run_dir = run_dir
        trained = copy_without_lms(student)
        trained.set_lm((base_lm or CohortLM(model)).with_adapter(adapter))
        trained._compiled = True
        return trained

    def _train_here(self, student, model: str, run_dir: Path, base_lm: CohortLM | None, trainset, valset) -> Path:
        inputs = _input_keys(trainset)
        name = self.name or _slug(type(student).__name__)
        program = DSPyProgram(copy_without_lms(student), name=name, inputs=inputs,
                              adapter=self.adapter or dspy.settings.adapter)
        reward = _register_metric(self.metric, inputs)
        config = RunConfig.from_dict({
            **self.config, "program": name, "model": model, "rewards": [{"name": reward}],
            "train_data": str(_write_jsonl(run_dir / "data" / "train.jsonl", trainset)),
            "dev_data": str(_write_jsonl(run_dir / "data" / "dev.jsonl", valset)) if valset else "",
        })
        cache = base_lm.model_cache_dir if base_lm is not None else None
        return _train(config, run_dir, program, verbose=self.verbose, model_cache_dir=cache)

    def _train_on_server(self, student, model: str, run_dir: Path) -> Path:
        """Queues the run on the server (the student's saved state as its program_state), follows it
        until it ends and downloads its adapter into `run_dir`."""
        state_file = run_dir / "program_state.json"
        copy_without_lms(student).save(str(state_file))
        run = self.client.create_run(
            self.task, program=self.program, name=self.name or f"{type(student).__name__} (cohort.dspy)",
            tags=["cohort.dspy"], config={**self.config, "model": model},
            program_state=json.loads(state_file.read_text(encoding="utf-8")))
        run = self.client.wait(run["id"], timeout=self.timeout)
        self.last_run = run
        if run["state"] != "succeeded":
            error = run["summary"]["error"]
            raise RuntimeError(f"run {run['id']} on the server ended {run['state']}" + (f": {error}" if error else ""))
        return self.client.download_adapter(run["id"], run_dir / "adapter")

    @staticmethod
    def _student_lm(student: dspy.Module) -> CohortLM | None:
        lms = {id(p.lm): p.lm for p in student.predictors() if p.lm is not None}
        found = [lm for lm in lms.values() if isinstance(lm, CohortLM)]
        models = {lm.cohort_model for lm in found}
        if len(models) > 1:
            raise ValueError(f"the student's predictors use several models ({', '.join(sorted(models))}); "
                             "MMGRPO trains one policy shared by every module")
        return found[0] if found else None

    def _check_model(self, base_lm: CohortLM | None) -> None:
        if self.model is None and base_lm is None:
            raise ValueError("pass model= (a Cohort model id), or set a cohort.dspy.CohortLM on the student")


def _train(config: RunConfig, run_dir: Path, program: DSPyProgram, *, verbose: bool,
           model_cache_dir: str | Path | None) -> Path:
    """Runs the Trainer in this process; returns the folder of the final adapter."""
    from trainer.policy.adapter_files import FINAL_ADAPTER_DIR
    from trainer.run.loop import Trainer
    from trainer.run.reporting import JsonlReporter

    (run_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    reporter = JsonlReporter(run_dir / "events.jsonl", progress_total=config.steps if verbose else None)
    trainer = Trainer(config, run_dir, reporter, program=program, model_cache_dir=model_cache_dir)
    try:
        state = trainer.run()
        if state != "succeeded":
            raise RuntimeError(f"the MMGRPO run ended {state}; its events are in {run_dir / 'events.jsonl'}")
        return run_dir / FINAL_ADAPTER_DIR
    finally:
        trainer.close()


def _input_keys(examples: Sequence[dspy.Example]) -> tuple[str, ...] | None:
    keys = getattr(examples[0], "_input_keys", None)
    return tuple(sorted(keys)) if keys else None


def _write_jsonl(path: Path, examples: Sequence[dspy.Example]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row, example in enumerate(examples, start=1):
            data = example.toDict() if hasattr(example, "toDict") else dict(example)
            try:
                handle.write(json.dumps(data, ensure_ascii=False) + "\n")
            except TypeError as exc:
                raise ValueError(f"example {row} cannot be written as JSON for training: {exc}") from None
    return path


def _register_metric(metric: Callable[..., Any], inputs: Sequence[str] | None) -> str:
    from trainer.rewards import register_reward

    label = getattr(metric, "__name__", type(metric).__name__)
    name = f"dspy_metric:{_slug(label)}:{id(metric):x}"
    register_reward(name, dspy_metric(metric, inputs=inputs))
    return name


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_") or "program"
