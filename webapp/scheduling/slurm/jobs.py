"""Slurm's job states as a run's: which words mean the job waits, runs or ended, and what an ended job
means for its run when the trainer's own last word (its final status) did not settle it."""

from __future__ import annotations

WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"})
RUNNING = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED",
                     "RESIZING", "POWER_UP_NODE", "UPDATE_DB"})
# Ended without Slurm requeueing it: a time limit, a preemption or a lost node leave a run resumable.
RESUMABLE = frozenset({"TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"})
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "OUT_OF_MEMORY", *RESUMABLE})


def job_state(fields: dict[str, str]) -> str:
    """JobState without Slurm's qualifiers ("CANCELLED by 0" comes as "CANCELLED")."""
    return (fields.get("JobState", "").split() or [""])[0].split("+")[0].upper()


def job_words(fields: dict[str, str]) -> str:
    """"TIMEOUT, exit code 0:15, on n1": Slurm's words about an ended job, kept on the run."""
    words = [job_state(fields) or "?"]
    if fields.get("ExitCode"):
        words.append(f"exit code {fields['ExitCode']}")
    nodes = fields.get("NodeList", "")
    if nodes and nodes != "(null)":
        words.append(f"on {nodes}")
    return ", ".join(words)
