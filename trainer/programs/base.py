"""Small pieces every program uses: parsing helpers and the immutable state of a run.

Programs implement `trainer.rollouts.sampling.AgentProgram`. Their states are frozen dataclasses replaced at
each step, because MHGPO's forks continue from one shared state.
"""

from __future__ import annotations

import re
from typing import Any

from trainer.rollouts.sampling import StepResult

_FIELD = r"^\s*{name}\s*:\s*(.+?)\s*$"


def tagged_field(text: str, name: str) -> str | None:
    """The value of the last `Name: value` line (case-insensitive), or None.

    >>> tagged_field("thinking...\\nLabel: card_arrival\\n", "label")
    'card_arrival'
    >>> tagged_field("no label here", "label") is None
    True
    """
    matches = re.findall(_FIELD.format(name=re.escape(name)), text or "", flags=re.IGNORECASE | re.MULTILINE)
    return matches[-1] if matches else None


def failed(state: Any, parsed: Any = None) -> StepResult:
    """A completion that did not parse: the sampler ends the trajectory at this call."""
    return StepResult(state, False, parsed)
