"""Every model of the runs app, importable from here: the catalog (programs, tasks), the run and its
state machine, its step metrics, and what it records below them (rollouts, calls, texts, groups)."""

from webapp.runs.models.catalog import EXTERNAL_PROGRAM, Program, Task
from webapp.runs.models.replays import Replay
from webapp.runs.models.rollouts import CallText, Group, GroupMember, ModuleCall, Rollout
from webapp.runs.models.run import InvalidTransition, Run, run_state_changed, steps_stored
from webapp.runs.models.series import SeriesBlock, StepMetric

__all__ = [
    "EXTERNAL_PROGRAM", "CallText", "Group", "GroupMember", "InvalidTransition", "ModuleCall", "Program",
    "Replay", "Rollout", "Run", "SeriesBlock", "StepMetric", "Task", "run_state_changed", "steps_stored",
]
