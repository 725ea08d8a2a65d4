"""An adapter for training small models, whose first completions rarely follow DSPy's field markers.

With ``ChatAdapter`` a completion without the ``[[ ## field ## ]]`` headers is a parse failure, so a
model that has not learned the format yet gets the fallback reward on every rollout and no signal to
learn from. ``MarkerFallbackAdapter`` formats prompts exactly like ``ChatAdapter`` and parses marked
completions exactly like it; an unmarked completion of a signature with one text output field is read
as that field (markers stripped) instead of failing. Reward the format separately (``marker_format``
below, a GDPO-style format reward) so the policy still learns to write the markers.
"""

from __future__ import annotations

import re
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

__all__ = ["MarkerFallbackAdapter", "PlainChatAdapter", "uses_field_markers"]

_MARKER = re.compile(r"\[\[\s*##\s*\w+\s*##\s*\]\]")


def uses_field_markers(text: str, fields: tuple[str, ...] = ()) -> bool:
    """Whether ``text`` carries ChatAdapter headers (for ``fields``, when given).

    >>> uses_field_markers("[[ ## answer ## ]]\\nParis"), uses_field_markers("Paris")
    (True, False)
    """
    if fields:
        return all(re.search(rf"\[\[\s*##\s*{re.escape(f)}\s*##\s*\]\]", text or "") for f in fields)
    return bool(_MARKER.search(text or ""))


class MarkerFallbackAdapter(dspy.ChatAdapter):
    """``ChatAdapter`` that reads an unmarked completion as the only text output field."""

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("use_json_adapter_fallback", False)
        super().__init__(**kwargs)

    def parse(self, signature, completion: str) -> dict[str, Any]:
        try:
            return super().parse(signature, completion)
        except AdapterParseError:
            outputs = signature.output_fields
            if len(outputs) != 1:
                raise
            (name, field), = outputs.items()
            if field.annotation not in (str, None):
                raise
            text = _MARKER.sub("", completion or "").strip()
            if not text:
                raise
            return {name: text}


class PlainChatAdapter(MarkerFallbackAdapter):
    """Plain chat turns for a small model: the instructions are the system message, the inputs' values
    the user message, and the whole reply the one output field, with no field markers anywhere.

    ``ChatAdapter``'s system message (field lists, the marker layout) is ~150 tokens that a 135M model
    reads as the task itself: on ``word_math``-like problems SmolLM2-135M-Instruct was right 3 % of the
    time with it and 6 % with plain turns (instructions worded a little differently in the two
    measurements), and two demos raised the plain program to a bare number in 59 % of replies
    (trainer/dspy/word_math.py has the measurements). Demos are formatted the same way, as
    earlier user and assistant turns, which is the few-shot prompt a small instruct model follows best.
    A signature with several outputs is refused: a plain reply holds one value.
    """

    def format_system_message(self, signature) -> str:
        return signature.instructions

    def format_user_message_content(self, signature, inputs: dict[str, Any], prefix: str = "", suffix: str = "",
                                    main_request: bool = False) -> str:
        values = [str(inputs[name]) for name in signature.input_fields if name in inputs]
        if len(signature.input_fields) > 1:  # several inputs: name them, one per line
            values = [f"{name}: {inputs[name]}" for name in signature.input_fields if name in inputs]
        return "\n".join(part for part in (prefix, *values, suffix) if part)

    def format_assistant_message_content(self, signature, outputs: dict[str, Any],
                                         missing_field_message: str | None = None) -> str:
        (name,) = self._single_output(signature)
        return str(outputs.get(name, missing_field_message))

    def parse(self, signature, completion: str) -> dict[str, Any]:
        (name,) = self._single_output(signature)
        text = (completion or "").strip()
        if not text:
            raise AdapterParseError(adapter_name="PlainChatAdapter", signature=signature, lm_response=completion,
                                    message="the reply is empty")
        return {name: text}

    @staticmethod
    def _single_output(signature) -> tuple[str]:
        names = tuple(signature.output_fields)
        if len(names) != 1:
            raise ValueError(f"PlainChatAdapter reads one output field per reply; {signature.__name__} has {len(names)}")
        return names
