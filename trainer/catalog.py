"""What a run can name: the programs and rewards of the registries, and the plugins they refused.

The registries (``trainer.programs``, ``trainer.rewards``) each load their own entry point group
through ``trainer.plugins``, the loader that knows nothing of them; this module sits above both.
"""

from __future__ import annotations

from trainer.plugins import Unavailable
from trainer.programs import unavailable_programs
from trainer.rewards import unavailable_rewards

__all__ = ["unavailable_plugins"]


def unavailable_plugins() -> list[Unavailable]:
    """Every refused or broken plugin entry, programs first, each with its distribution and error."""
    return unavailable_programs() + unavailable_rewards()
