"""One execution of a DSPy program on its own thread, paused at every LM call.

A DSPy program is imperative code, not a state machine, so Cohort cannot ask it "what is your next
call?" directly. Instead each rollout runs the program on a thread whose LM calls block: the thread
reports the call (``Pending``) and waits until the trainer answers it, together with the pending calls
of every other rollout of the step (one batched ``generate`` per module, as for built-in programs).

A rollout may start with a *replay*: calls it answers from recorded completions instead of asking.
That is how MHGPO forks a program (paper 001, Algorithm 2): the G forks of a state re-run the program
with the calls before the fork answered from the record, then continue on their own. A call whose
module or prompt differs from the record means the program is not deterministic given its LM answers
(a random or time-dependent tool): the fork would be grouped with calls it does not share, so the run
stops with ``ReplayDivergence`` instead.

Threads hand over through queues, never sleeps: the trainer waits on the program's next event and the
program waits on its answer. A rollout nobody will answer (an abandoned branch) is unwound with a
``BaseException`` so the program's own ``except Exception`` cannot swallow it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from trainer.dspy.lm import ParseWatcher, set_current_rollout
from trainer.rollouts.sampling import RunAbort

__all__ = ["Finished", "Pending", "Raised", "RecordedCall", "ReplayDivergence", "Rollout"]


class ReplayDivergence(RunAbort):
    """Replaying a DSPy program's recorded calls led it elsewhere: it is not deterministic given its
    LM answers, so MHGPO cannot fork it by replay."""


@dataclass(frozen=True)
class RecordedCall:
    """A call answered earlier in this trajectory: the module, the chat messages it sent, the answer."""

    module: str
    messages: tuple[dict, ...]
    completion: str


@dataclass(frozen=True)
class Pending:
    """The program waits for a completion of ``module`` for these chat messages."""

    module: str
    messages: tuple[dict, ...]


@dataclass(frozen=True)
class Finished:
    """The program returned ``output`` (usually a ``dspy.Prediction``)."""

    output: Any


@dataclass(frozen=True)
class Raised:
    """The program raised ``error``; ``parse_failure`` when it is DSPy's ``AdapterParseError``."""

    error: BaseException
    parse_failure: bool


@dataclass(frozen=True)
class _Diverged:
    message: str


class _Unwind(BaseException):
    """Ends a program thread early: abandoned, or diverged from its replay."""


_ABANDON = object()


def _describe(messages: Sequence[dict]) -> str:
    last = messages[-1]["content"] if messages else ""
    return repr(last[:160] + ("..." if len(last) > 160 else ""))


class Rollout:
    """Runs ``run()`` (the program on one example) on a daemon thread inside ``dspy.context(**context)``.

    ``wait()`` returns the program's next event; ``answer(text)`` answers its pending call and waits
    for the next one. ``timeout`` guards against a program that hangs (a tool that never returns): it
    bounds the wait for one event, not the speed of a step.
    """

    def __init__(self, run: Callable[[], Any], *, replay: Sequence[RecordedCall] = (),
                 context: dict[str, Any] | None = None, timeout: float = 600.0, name: str = "dspy-rollout"):
        self._run = run
        self._replay = list(replay)
        self._context = dict(context or {})
        self._context.setdefault("callbacks", [])
        self._context["callbacks"] = [*self._context["callbacks"], ParseWatcher()]
        self._timeout = timeout
        self._answered = 0
        self._parses: dict[int, tuple[bool, Any]] = {}
        self._divergence: str | None = None
        self._waiting = False
        self._to_program: queue.Queue = queue.Queue(maxsize=1)
        self._to_driver: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    # --- the program's thread ------------------------------------------------------------------
    def _main(self) -> None:
        set_current_rollout(self)
        try:
            with dspy.context(**self._context):
                event: Any = Finished(self._run())
        except _Unwind:
            event = _Diverged(self._divergence) if self._divergence else None
        except BaseException as exc:  # the program's own error: reported, the trainer decides
            event = Raised(exc, isinstance(exc, AdapterParseError))
        finally:
            set_current_rollout(None)
        if self._divergence and not isinstance(event, _Diverged):
            event = _Diverged(self._divergence)  # the program swallowed the unwind: still diverged
        if event is not None:
            self._to_driver.put(event)

    def ask(self, module: str, messages: list[dict]) -> str:
        """Called by the engine on the program's thread: the completion for this call."""
        if self._divergence:
            raise _Unwind
        index = self._answered
        frozen = tuple(messages)
        if index < len(self._replay):
            recorded = self._replay[index]
            if recorded.module != module or recorded.messages != frozen:
                self._divergence = (
                    f"replaying the program diverged at call {index}: the record has module "
                    f"{recorded.module!r} with last message {_describe(recorded.messages)}, the replay asked "
                    f"module {module!r} with {_describe(messages)}. MHGPO forks a DSPy program by replaying "
                    "its calls, so the program must make the same calls given the same LM answers (no random "
                    "or time-dependent tools); use GRPO or MMGRPO for this program, or make it deterministic"
                )
                raise _Unwind
            self._answered += 1
            return recorded.completion
        self._to_driver.put(Pending(module, frozen))
        reply = self._to_program.get()
        if reply is _ABANDON:
            raise _Unwind
        self._answered += 1
        return reply

    def parsed(self, outputs: Any, exception: Exception | None) -> None:
        """Called by ``ParseWatcher`` after the adapter parsed the latest answer."""
        if self._answered:
            self._parses[self._answered - 1] = (exception is None, outputs if exception is None else None)

    # --- the trainer's side --------------------------------------------------------------------
    def wait(self) -> Pending | Finished | Raised:
        """The program's next event. Raises ``ReplayDivergence`` when the replay diverged."""
        try:
            event = self._to_driver.get(timeout=self._timeout)
        except queue.Empty:
            raise RuntimeError(
                f"the DSPy program made no LM call and did not return within {self._timeout:.0f} s "
                "(a tool that never returns?)"
            ) from None
        if isinstance(event, _Diverged):
            raise ReplayDivergence(event.message)
        self._waiting = isinstance(event, Pending)
        return event

    def answer(self, completion: str) -> Pending | Finished | Raised:
        """Answer the pending call with ``completion`` and return the program's next event."""
        if not self._waiting:
            raise RuntimeError("this rollout has no pending call to answer")
        self._waiting = False
        self._to_program.put(completion)
        return self.wait()

    def parse_of(self, index: int) -> tuple[bool, Any] | None:
        """(parsed_ok, parsed fields) of answered call ``index``, or None if no adapter parsed it."""
        return self._parses.get(index)

    @property
    def answered(self) -> int:
        return self._answered

    def abandon(self) -> None:
        """Unwind a program blocked on a call nobody will answer."""
        if self._waiting:
            self._waiting = False
            self._to_program.put(_ABANDON)
