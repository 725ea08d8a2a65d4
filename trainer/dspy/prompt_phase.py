"""Phase 1 of a run that optimizes prompts first (BetterTogether, MMGRPO paper Section 4): DSPy's own
MIPROv2 or GEPA optimizes the program's instructions and demos, scored by the run's rewards, before
phase 2 trains the weights of the optimized program.

Every LM call of phase 1 is sampled by the run's own backend (HF or vLLM) with the run's prompt
rendering (``backend_sampler``), so the prompts are chosen for the very weights phase 2 starts from.
``prompt_optimizer_model`` gives the proposer another model (a ``CohortLM``). The trials are reported
as they end (a DSPy callback on every evaluation), and the chosen instructions and demos per module
at the end. The optimized state is saved in the run folder before phase 2 starts: a resumed run loads
it and does not optimize again.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback

from trainer.dspy.local_lm import CohortLM, SamplerEngine, backend_sampler
from trainer.dspy.program import DSPyProgram, copy_without_lms

__all__ = ["PHASE_STATE", "full_score", "optimize_prompts", "prompts_summary", "run_metric", "run_prompt_phase"]

PHASE_STATE = Path("prompt-optimization") / "program_state.json"  # in the run folder


class _TrialReporter(BaseCallback):
    """Reports the score of every evaluation the optimizer runs (MIPROv2: the baseline, then each trial)."""

    def __init__(self, report: Callable[[dict[str, Any]], None]):
        self.report, self.trials, self._lock = report, 0, threading.Lock()

    def on_evaluate_end(self, call_id: str, outputs: Any | None, exception: Exception | None = None) -> None:
        score = getattr(outputs, "score", None)
        if exception is not None or score is None:
            return
        with self._lock:
            self.trials += 1
            trial = self.trials
        self.report({"event": "trial", "trial": trial, "score": float(score)})


def run_metric(rewards: Mapping[str, Any], weights: Mapping[str, float]) -> Callable[..., float]:
    """A DSPy metric scoring a prediction as the run scores a rollout: the weighted sum of its rewards
    (a reward that does not apply, None, is left out). Rewards that read the trajectory get None for
    it: phase 1 sees predictions, not Cohort trajectories."""
    def metric(example, prediction, trace=None, *_gepa_args) -> float:
        data = dict(example.toDict()) if hasattr(example, "toDict") else dict(example)
        total = 0.0
        for name, reward in rewards.items():
            try:
                value = reward(data, prediction, None)
            except Exception:  # a reward that needs the trajectory, or a broken prediction: no credit
                value = 0.0
            if value is not None:
                total += weights.get(name, 1.0) * float(value)
        return total

    return metric


def full_score(rewards: Mapping[str, Any], weights: Mapping[str, float]) -> float | None:
    """The score `run_metric` gives a prediction with every reward at the top of its `value_range`;
    None when a reward declares no range (then any positive score counts, as in DSPy)."""
    total = 0.0
    for name, reward in rewards.items():
        value_range = getattr(reward, "value_range", None)
        if value_range is None:
            return None
        weight = weights.get(name, 1.0)
        best = max(weight * float(value_range[0]), weight * float(value_range[1]))
        if not math.isfinite(best):
            return None
        total += best
    return total


def prompts_summary(module: dspy.Module) -> dict[str, dict[str, Any]]:
    """Per module (predictor name): its instructions and demos, as the run page shows them."""
    return {name: {"instructions": predictor.signature.instructions,
                   "demos": [_plain(d) for d in predictor.demos]}
            for name, predictor in module.named_predictors()}


def _plain(demo: Any) -> dict[str, Any]:
    data = demo.toDict() if hasattr(demo, "toDict") else dict(demo)
    return {k: v if isinstance(v, str | int | float | bool | type(None)) else str(v) for k, v in data.items()}


def optimize_prompts(program: DSPyProgram, *, kind: str, train: Sequence[Mapping[str, Any]],
                     dev: Sequence[Mapping[str, Any]], metric: Callable[..., float], sample: Callable[..., Any],
                     proposer_model: str | None, trials: int, seed: int, max_tokens: int,
                     temperature: float, report: Callable[[dict[str, Any]], None], demos: int = 4,
                     labeled_demos: int = 4, full_score: float | None = None) -> dspy.Module:
    """Runs DSPy's optimizer `kind` ('mipro_light', 'mipro_medium', 'gepa', 'bootstrap_rs') on a copy of
    the program; returns the optimized copy (its predictors without LMs).

    `demos` and `labeled_demos` bound the bootstrapped and labeled demos per module (MIPROv2 and
    BootstrapFewShotWithRandomSearch). A run is bootstrapped into demos only when it scores
    `full_score` (every reward at its maximum): DSPy keeps any truthy score, and a run with the format
    right and the answer wrong would teach the wrong answer."""
    lm = dspy.LM("cohort/policy", engine=SamplerEngine(sample, temperature, max_tokens), cache=False)
    proposer = CohortLM(proposer_model, max_tokens=max(max_tokens, 256)) if proposer_model else lm
    student = copy_without_lms(program.module)
    student.set_lm(lm)
    inputs = list(program.inputs)
    trainset = [dspy.Example(**dict(e)).with_inputs(*inputs) for e in train]
    valset = [dspy.Example(**dict(e)).with_inputs(*inputs) for e in dev] or None
    trials_reporter = _TrialReporter(report)
    # lm: DSPy's candidates reset their predictors (reset_copy), which then ask the settings for an LM.
    with dspy.context(lm=lm, adapter=program.adapter, callbacks=[*dspy.settings.callbacks, trials_reporter]):
        if kind == "gepa":
            optimizer = dspy.GEPA(metric=metric, reflection_lm=proposer, num_threads=1, seed=seed,
                                  track_stats=True, **({"max_metric_calls": trials * len(valset or trainset)}
                                                      if trials else {"auto": "light"}))
            optimized = optimizer.compile(student, trainset=trainset, valset=valset)
            if not trials_reporter.trials:  # GEPA scores its candidates itself, not through dspy.Evaluate
                for score in optimized.detailed_results.val_aggregate_scores:
                    trials_reporter.on_evaluate_end("gepa", dspy.Prediction(score=score))
        elif kind == "bootstrap_rs":
            # Demos only: a small policy's proposed instructions are weak (issue 36), its own best runs
            # and the train rows are not. Candidates: zero-shot, labeled only, then bootstrapped sets.
            optimizer = dspy.BootstrapFewShotWithRandomSearch(
                metric, max_bootstrapped_demos=demos, max_labeled_demos=labeled_demos,
                num_candidate_programs=trials or 16, num_threads=1, metric_threshold=full_score)
            optimized = optimizer.compile(student, trainset=trainset, valset=valset)
        else:
            auto = None if trials else kind.removeprefix("mipro_")
            optimizer = dspy.MIPROv2(metric, prompt_model=proposer, task_model=lm, auto=auto,
                                     num_candidates=trials or None, num_threads=1, seed=seed,
                                     max_bootstrapped_demos=demos, max_labeled_demos=labeled_demos,
                                     metric_threshold=full_score)
            small = dict(num_trials=trials, minibatch=False, program_aware_proposer=False,
                         data_aware_proposer=False) if trials else {}
            optimized = optimizer.compile(student, trainset=trainset, valset=valset, **small)
    return copy_without_lms(optimized)


def backend_sample(backend: Any, tokenizer: Any, prompt_format: str, seed: int) -> Callable[..., Any]:
    """The run's own sampler for phase 1 (see ``backend_sampler``)."""
    return backend_sampler(backend, tokenizer, prompt_format, threading.Lock(), seed=seed)


def run_prompt_phase(trainer: Any) -> None:
    """Phase 1 of `trainer`'s run (a `trainer.run.loop.Trainer` whose config sets `prompt_optimizer`):
    optimizes, saves and loads the program's prompts, reporting each trial; a run folder that already
    holds phase 1's result (a resumed run) loads it instead."""
    import os

    c = trainer.config
    program: DSPyProgram = trainer.parts.program.program  # inside FormattedProgram
    path = trainer.run_dir / PHASE_STATE
    if path.is_file():
        program.load_state_file(path)  # resumed after phase 1: its prompts, never a second search
        return

    def report(event: dict[str, Any]) -> None:
        trainer.reporter.prompts({"attempt": trainer.attempt, **event})

    report({"event": "started", "optimizer": c.prompt_optimizer, "model": c.prompt_optimizer_model or c.model})
    weights = {spec.name: spec.weight for spec in c.rewards}
    # Candidates are chosen on a slice held out of the train split, never on the dev set the run reports
    # (the Experiment page's prompt-optimized score would otherwise be selected on its own test). A
    # budget of one's own (trials) also bounds the rows demos are bootstrapped from: DSPy's bootstrap
    # tries rows until enough succeed, which with a small model can be every row of the train split.
    train = list(trainer.parts.stream.examples)
    held = max(1, min(c.eval_size, len(train) // 2))
    po_train = train[:-held] or train
    if c.prompt_optimizer_trials:
        po_train = po_train[:held]
    optimized = optimize_prompts(
        program, kind=c.prompt_optimizer, train=po_train, dev=train[-held:],
        metric=run_metric(trainer.parts.reward_fns, weights), demos=c.prompt_optimizer_demos,
        labeled_demos=c.prompt_optimizer_labeled_demos, full_score=full_score(trainer.parts.reward_fns, weights),
        sample=backend_sample(trainer.parts.backend, trainer.parts.tokenizer, trainer.parts.prompt_format, c.seed),
        proposer_model=c.prompt_optimizer_model, trials=c.prompt_optimizer_trials, seed=c.seed,
        max_tokens=c.max_new_tokens, temperature=c.temperature, report=report)
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_suffix(".tmp.json")
    optimized.save(str(staged))
    os.replace(staged, path)  # phase 1 is done only once its result is whole on disk
    program.load_state_file(path)
    report({"event": "chosen", "modules": prompts_summary(program.module)})
