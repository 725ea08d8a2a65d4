"""Starting a run's N rank processes through torch's own launcher (`torch.distributed.run`).

The process that `python -m trainer train` started (the CLI, or the worker's supervised subprocess)
becomes the launcher: it runs torchrun's `run` in-process with `--standalone` (a rendezvous on a free
local port, so several runs on one host never collide) and N copies of the same `train` command,
which see WORLD_SIZE / RANK in their environment and train as ranks (`trainer.policy.distributed`).
Signals keep their meaning: SIGTERM to the launcher stops every rank (torchrun forwards it) and the
launcher then dies of the same signal, so the worker records the run as interrupted, as it does a
single process; SIGKILL to the launcher kills the ranks through their parent-death signal.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from trainer.policy.distributed import LAUNCHER_PID_ENV, RANK_ERRORS_DIR, rank_errors
from trainer.run.reporting import read_events


def launch_ranks(num_processes: int, rank_argv: list[str], run_dir: Path) -> int:
    """Runs `python -m trainer <rank_argv>` as `num_processes` ranks; returns the exit status (0 when
    every rank succeeded). When ranks failed before rank 0 could say so, the event log gets the
    failed status with each failing rank's error."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    shutil.rmtree(run_dir / RANK_ERRORS_DIR, ignore_errors=True)
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    args = get_args_parser().parse_args(
        ["--standalone", f"--nproc-per-node={num_processes}", "--max-restarts=0", "--module", "trainer",
         *rank_argv])
    try:
        run(args)
    except SignalException as exc:
        # The ranks are stopped; die of the same signal, as a single training process would.
        signal.signal(exc.sigval, signal.SIG_DFL)
        os.kill(os.getpid(), exc.sigval)
        raise
    except ChildFailedError as exc:
        record_failure(run_dir, [_describe(rank, failure) for rank, failure in sorted(exc.failures.items())])
        return 1
    return 0


def _describe(rank: int, failure) -> str:
    if failure.exitcode < 0:
        return f"rank {rank} was killed by {failure.signal_name()}"
    return f"rank {rank} exited with code {failure.exitcode}"


def record_failure(run_dir: Path, exits: list[str]) -> None:
    """Appends a failed status when the log's last status is 'running': a rank other than 0 failed (or
    was killed, by the OOM killer for instance) and rank 0 was stopped while it waited for it."""
    from trainer.run.reporting import JsonlReporter

    events_path = run_dir / "events.jsonl"
    events = read_events(events_path) if events_path.exists() else []
    statuses = [e for e in events if e.get("type") == "status"]
    if statuses and statuses[-1].get("state") != "running":
        return
    attempt = statuses[-1].get("attempt", 1) if statuses else 1
    step = max((e["step"] for e in events if e.get("type") == "step" and e.get("attempt") == attempt),
               default=statuses[-1].get("step", 0) if statuses else 0)
    # The ranks' own errors first (what raised), then how each process ended.
    errors = [*rank_errors(run_dir), *exits] or ["a rank process failed (its output is in this run's log)"]
    JsonlReporter(events_path).status("failed", attempt=attempt, step=step, error="; ".join(errors))
