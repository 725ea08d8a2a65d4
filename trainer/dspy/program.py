"""``DSPyProgram``: any ``dspy.Module`` as a Cohort ``AgentProgram``, so every strategy trains it.

The agents are the program's predictors as ``named_predictors()`` names them, and a module call is
one LM call of one predictor, numbered per predictor in call order: MMGRPO's module-level groups are
then exactly (predictor, invocation index), as in ``dspy.GRPO``.

The state handed to the sampler is the trajectory so far (the calls answered, with their prompts and
completions) and what the program asked next, with the live thread that is paused there
(``trainer.dspy.rollout``). Stepping a state answers its thread, so a one-to-one rollout runs the
program once. A state stepped more than once (MHGPO's G forks, paper 001 Algorithm 2) gives its live
thread to the first fork and replays the recorded calls for the others, which also checks that the
program is deterministic given its LM answers.

Prompts are the chat messages DSPy's adapter builds (instructions, demos, inputs); the trainer renders
them with the model's chat template. An adapter parse error is a format failure (MMGRPO 3.1): the
trajectory keeps its calls up to that one and gets the fallback reward. DSPy's JSON fallback, which
would silently make a second call with another prompt, is off unless you pass your own adapter.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from trainer.dspy.lm import PolicyLM
from trainer.dspy.rollout import Finished, Pending, Raised, RecordedCall, Rollout
from trainer.rollouts.sampling import StepResult
from trainer.rollouts.trajectory import jsonable

__all__ = ["DSPyProgram", "DSPyState", "copy_without_lms"]


def copy_without_lms(module: dspy.Module) -> dspy.Module:
    """A deep copy of a program's instructions, demos and code, sharing no LM with the original (an LM
    may hold a loaded model, which a deep copy would duplicate); the original keeps its LMs."""
    predictors = module.predictors()
    lms = [p.lm for p in predictors]
    try:
        for predictor in predictors:
            predictor.lm = None
        return module.deepcopy()
    finally:
        for predictor, lm in zip(predictors, lms, strict=True):
            predictor.lm = lm


class _Live:
    """The thread paused at a state's pending call; the first fork to step the state claims it."""

    def __init__(self, rollout: Rollout):
        self._rollout: Rollout | None = rollout
        self._lock = threading.Lock()

    def claim(self) -> Rollout | None:
        with self._lock:
            rollout, self._rollout = self._rollout, None
            return rollout

    def release(self) -> None:
        rollout = self.claim()
        if rollout is not None:
            rollout.abandon()


@dataclass(frozen=True, eq=False)
class DSPyState:
    """A DSPy program part-way through one example: the calls answered so far and its next event."""

    example: Mapping[str, Any]
    history: tuple[RecordedCall, ...]
    event: Pending | Finished | Raised
    live: _Live | None = field(default=None, repr=False)


class DSPyProgram:
    """Train a ``dspy.Module``'s weights with Cohort.

    ``module`` is the program (an instance, or a zero-argument factory building one). ``inputs`` names
    the example fields passed to it as keyword arguments (default: the parameters of its
    ``forward``). ``state_path`` loads a state saved with DSPy's ``save()`` (optimized instructions and
    demos from MIPROv2, GEPA or any other optimizer), so training starts from the optimized prompts.
    ``adapter`` is the DSPy adapter to format and parse with (default ``ChatAdapter`` without its JSON
    fallback). ``example_fields``, ``default_rewards``, ``title``, ``description``, ``dataset_kind`` (a built-in kind
    such as ``"qa"``; None: a generic kind of ``example_fields``), ``needs_corpus``
    (the run must name a retrieval corpus, passed to your factory as ``corpus_path``) and
    ``suggested_config`` describe it in the dashboard like a built-in program.

    Example::

        class QA(dspy.Module):
            def __init__(self):
                super().__init__()
                self.answer = dspy.Predict("question -> answer")
            def forward(self, question):
                return self.answer(question=question)

        program = DSPyProgram(QA, name="qa", example_fields=("question", "answer"))
        program.agents  # ('answer',)
    """

    def __init__(
        self,
        module: dspy.Module | Callable[[], dspy.Module],
        *,
        name: str,
        title: str | None = None,
        description: str = "",
        inputs: Sequence[str] | None = None,
        example_fields: Sequence[str] = (),
        default_rewards: Sequence[Mapping[str, Any]] = (),
        state_path: str | Path | None = None,
        adapter: Any = None,
        dataset_kind: str | None = None,
        needs_corpus: bool = False,
        suggested_config: Mapping[str, Any] | None = None,
        timeout: float = 600.0,
    ):
        self.module = module if isinstance(module, dspy.Module) else module()
        if not isinstance(self.module, dspy.Module):
            raise TypeError(f"DSPyProgram needs a dspy.Module (or a factory of one), got {type(self.module).__name__}")
        if state_path:
            if not Path(state_path).is_file():
                raise FileNotFoundError(f"program state {state_path} does not exist (a file saved by DSPy's save())")
            self.module.load(str(state_path))
        self.state_path = str(state_path) if state_path else None
        self.name = name
        self.title = title or name
        self.description = description or f"DSPy program {type(self.module).__name__}"
        predictors = self.module.named_predictors()
        if not predictors:
            raise ValueError(f"DSPy program {type(self.module).__name__} has no predictors to train")
        self.agents = tuple(name for name, _ in predictors)
        for agent, predictor in predictors:
            predictor.lm = PolicyLM(agent)  # Predict.lm wins over dspy.settings.lm
        self.inputs = tuple(inputs) if inputs is not None else self._forward_parameters()
        self.example_fields = tuple(example_fields) or self.inputs
        self.default_rewards = [dict(r) for r in default_rewards]
        self.dataset_kind = dataset_kind
        self.needs_corpus = needs_corpus
        self.suggested_config = dict(suggested_config or {})
        # The tiny test model's tokenizer learns merges from this: the adapter's field markers and the
        # predictors' instructions, so marked completions are a few tokens, not dozens of bytes.
        self.tokenizer_corpus = tuple(
            text for _, p in predictors
            for text in (p.signature.instructions, *(f"[[ ## {f} ## ]]" for f in p.signature.fields))
        ) + ("[[ ## completed ## ]]",)
        self.adapter = adapter if adapter is not None else dspy.ChatAdapter(use_json_adapter_fallback=False)
        self.timeout = timeout
        self.optimizes_prompts = True  # DSPy's prompt optimizers can run as a run's phase 1

    def load_state_file(self, path: str | Path) -> None:
        """Loads a state saved with DSPy's save() (phase 1's optimized prompts) into the program; the
        predictors stay bound to the policy (DSPy's load resets each predictor's LM)."""
        self.module.load(str(path))
        for agent, predictor in self.module.named_predictors():
            predictor.lm = PolicyLM(agent)

    def _forward_parameters(self) -> tuple[str, ...]:
        # Through the class: DSPy warns when a module's ``forward`` is read on the instance.
        params = list(inspect.signature(type(self.module).forward).parameters.values())[1:]
        names = tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        if not names:
            raise ValueError("pass inputs=...: the program's forward() takes no named parameters")
        return names

    # --- running the program -------------------------------------------------------------------
    def _launch(self, example: Mapping[str, Any], replay: Sequence[RecordedCall]) -> tuple[Rollout, Any]:
        missing = [k for k in self.inputs if k not in example]
        if missing:
            raise KeyError(f"example has no field(s) {', '.join(missing)} for {self.name}'s inputs {list(self.inputs)}")
        kwargs = {k: example[k] for k in self.inputs}
        rollout = Rollout(lambda: self.module(**kwargs), replay=replay, timeout=self.timeout,
                          context={"adapter": self.adapter, "disable_history": True},
                          name=f"dspy-{self.name}")
        return rollout, rollout.wait()

    def _state(self, example, history, rollout: Rollout, event) -> DSPyState:
        live = None
        if isinstance(event, Pending):
            live = _Live(rollout)
        state = DSPyState(example, tuple(history), event, live)
        if live is not None:
            weakref.finalize(state, live.release)  # a state dropped unstepped frees its thread
        return state

    # --- AgentProgram --------------------------------------------------------------------------
    def start(self, example: Mapping[str, Any]) -> DSPyState:
        rollout, event = self._launch(example, ())
        return self._state(example, (), rollout, event)

    def has_next(self, state: DSPyState) -> bool:
        if isinstance(state.event, Raised):
            raise state.event.error  # the program's own error: the sampler fails this trajectory
        return isinstance(state.event, Pending)

    def next_agent(self, state: DSPyState) -> str:
        return self._pending(state).module

    def process_prompt(self, state: DSPyState, agent: str) -> list[dict]:
        return [dict(m) for m in self._pending(state).messages]

    def step(self, state: DSPyState, agent: str, completion: str) -> StepResult:
        pending = self._pending(state)
        call = RecordedCall(pending.module, pending.messages, completion)
        history = (*state.history, call)
        rollout = state.live.claim() if state.live is not None else None
        if rollout is not None:
            event = rollout.answer(completion)
        else:
            rollout, event = self._launch(state.example, history)  # a fork: replay to here
        parse = rollout.parse_of(len(state.history))
        parse_failed = (parse is not None and not parse[0]) or (isinstance(event, Raised) and event.parse_failure)
        parsed = jsonable(parse[1]) if parse is not None and parse[0] else None
        return StepResult(self._state(state.example, history, rollout, event), not parse_failed, parsed)

    def final_output(self, state: DSPyState) -> Any:
        if not isinstance(state.event, Finished):
            raise RuntimeError("the program has not returned yet")
        return state.event.output

    @staticmethod
    def _pending(state: DSPyState) -> Pending:
        if not isinstance(state.event, Pending):
            raise RuntimeError("the program is not waiting for an LM call")
        return state.event
