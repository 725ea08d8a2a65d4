"""LM programs: each declares its modules (prompt + parser) and runs its control flow as a
`trainer.rollouts.sampling.AgentProgram`, so every strategy (GRPO, MMGRPO, MHGPO) can roll it out.

Programs of other installed packages join through the ``cohort.programs`` entry points
(`trainer.programs.registry`, `trainer.plugins`)."""

from trainer.programs import arith_format, banking77, gsm8k, hover, search, toolcall, toy, toy_format  # noqa: F401  (register them)
from trainer.programs.registry import (
    PROGRAMS,
    get_program,
    list_programs,
    program_error,
    program_info,
    register_program,
    unavailable_programs,
)

__all__ = ["PROGRAMS", "get_program", "list_programs", "program_error", "program_info", "register_program",
           "unavailable_programs"]
