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

__all__ = ["MarkerFallbackAdapter", "uses_field_markers"]

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
