"""The DSPy side of the bridge: an LM whose every call is answered by Cohort's sampler.

DSPy 3.4 deprecates custom ``BaseLM.forward`` subclasses in favour of an *engine*
(``complete(Request) -> Response``) handed to ``dspy.LM``, so ``PolicyLM`` is a ``dspy.LM`` (a
``dspy.BaseLM``) built on ``_PolicyEngine``. One ``PolicyLM`` is bound to each predictor of the
program (``Predict.lm`` wins over ``dspy.settings.lm``), so a call knows which module made it without
guessing from the prompt. The engine does not sample by itself: it hands the request's chat messages
to the rollout that runs on the calling thread (``trainer.dspy.rollout``), which blocks until the
trainer has sampled a completion for it together with the other rollouts' pending calls.

``ParseWatcher`` is a DSPy callback: an adapter that cannot parse a completion (``AdapterParseError``)
is a format failure of that module call (MMGRPO 3.1) even when the program catches the exception.
"""

from __future__ import annotations

import threading
from typing import Any

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils.callback import BaseCallback

__all__ = ["ParseWatcher", "PolicyLM", "current_rollout", "request_messages"]

_local = threading.local()


def current_rollout():
    """The rollout running on this thread (set by ``trainer.dspy.rollout``), or ``None``."""
    return getattr(_local, "rollout", None)


def set_current_rollout(rollout) -> None:
    _local.rollout = rollout


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") or "" for part in content)


def request_messages(request) -> list[dict[str, str]]:
    """An lm15 ``Request`` as plain chat messages (``[{"role", "content"}]``), system first.

    These are what Cohort stores for the call and renders through the model's chat template.
    """
    messages = [{"role": "system", "content": _text(request.system)}] if request.system is not None else []
    messages.extend({"role": m.role, "content": m.text or ""} for m in request.messages)
    return messages


class _PolicyEngine:
    """A DSPy engine that forwards each request to the rollout of the calling thread."""

    def __init__(self, module: str):
        self.module = module

    def complete(self, request) -> Response:
        rollout = current_rollout()
        if rollout is None:
            raise RuntimeError(
                f"predictor {self.module!r} was called outside a Cohort rollout; a PolicyLM only answers "
                "calls made while Cohort runs the program"
            )
        text = rollout.ask(self.module, request_messages(request))
        return Response(id=None, model=request.model, message=Message.assistant([TextPart(text)]),
                        finish_reason="stop", usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0))

    def stream(self, request):
        raise NotImplementedError("Cohort samples whole completions; streaming is not supported")

    def close(self) -> None:
        pass


class PolicyLM(dspy.LM):
    """The policy being trained, as predictor ``module`` of a DSPy program sees it.

    Sampling settings (temperature, max_new_tokens) are the run's, not the program's: what a
    predictor passes in its own config is ignored, so every module samples from the same policy.
    DSPy's response cache is off: G samples of one prompt must be G different completions.
    """

    def __init__(self, module: str):
        super().__init__(f"cohort/{module}", engine=_PolicyEngine(module), cache=False)
        self.module = module


class ParseWatcher(BaseCallback):
    """Reports every adapter parse on a rollout thread to that rollout (parsed fields or the error)."""

    def on_adapter_parse_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        rollout = current_rollout()
        if rollout is not None:
            rollout.parsed(outputs, exception)
