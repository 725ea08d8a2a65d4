"""What the queue page shows of a queued run: its size, the GPU it needs, and who may act on it; and
which running runs the user may open."""

from __future__ import annotations

from dataclasses import dataclass

from trainer.config import RunConfig
from webapp.limits.services import run_token_budget
from webapp.projects.selectors import role_in, roles_of
from webapp.runs.access import can_change
from webapp.runs.models import Run


@dataclass
class QueuedRow:
    position: int
    run: Run
    tokens: int | None  # None: the stored config no longer parses (shown as "?")
    min_gpu_memory_gb: float | None
    processes: int  # num_processes: one GPU each
    waits_for: str  # why it cannot start on any reported worker, or ""
    visible: bool  # the user may open the run (a member of its project, or staff)
    can_cancel: bool  # its owner while a member, an admin of its project, or staff

    @property
    def tokens_label(self) -> str:
        """12,345 tokens as "12.3k" (the column compares sizes at a glance; the title has the exact value)."""
        if self.tokens is None:
            return "?"
        for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
            if self.tokens >= size:
                return f"{self.tokens / size:.1f}{unit}"
        return str(self.tokens)


def queued_rows(order: list[tuple[int, Run]], user, largest_gpu_gb: float | None,
                most_gpus: int = 0) -> list[QueuedRow]:
    """`largest_gpu_gb` / `most_gpus`: the largest GPU and the most GPUs any reported worker has."""
    roles = roles_of(user)
    rows = []
    for position, run in order:
        try:  # a run trained elsewhere is never queued; its free-form config would be refused here
            config = RunConfig.from_dict(run.config)
            tokens, need, processes = run_token_budget(config), config.min_gpu_memory_gb, config.num_processes
        except (TypeError, ValueError):
            tokens, need, processes = None, None, 1
        waits_for = ""
        if need is not None and (largest_gpu_gb is None or largest_gpu_gb < need):
            waits_for = (f"needs a GPU with {need:g} GB; the largest worker has "
                         f"{'no GPU' if largest_gpu_gb is None else f'{largest_gpu_gb:g} GB'}")
        elif most_gpus and processes > most_gpus:
            waits_for = f"needs a worker with {processes} GPUs; the largest has {most_gpus}"
        role = role_in(roles, run.project_id)
        rows.append(QueuedRow(position, run, tokens, need, processes, waits_for, visible=role is not None,
                              can_cancel=role is not None and can_change(user, run, role)))
    return rows


def mark_readable(runs: list[Run], user) -> list[Run]:
    """Sets `.readable` on each run: whether the user may open it (a member of its project, or staff)."""
    roles = roles_of(user)
    for run in runs:
        run.readable = role_in(roles, run.project_id) is not None
    return runs
