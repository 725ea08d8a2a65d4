"""Starting a run's N rank processes through torch's own launcher (`torch.distributed.run`).

The process that `python -m trainer train` started (the CLI, or the worker's supervised subprocess)
becomes the launcher: it runs torchrun's `run` in-process with `--standalone` (a rendezvous on a free
local port, so several runs on one host never collide) and N copies of the same `train` command,
which see WORLD_SIZE / RANK in their environment and train as ranks (`trainer.policy.distributed`).
Signals keep their meaning: SIGTERM to the launcher stops every rank (torchrun forwards it) and the
launcher then dies of the same signal, so the worker records the run as interrupted, as it does a
single process; SIGKILL to the launcher kills the ranks through their parent-death signal. The
signals COHORT_SUSPEND_ON_SIGNALS names are the exception: torchrun leaves them to the launcher's
own handler, which asks the run to suspend (trainer.run.cli), and the ranks' common exit code 3
becomes the launcher's.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path

from trainer.policy.distributed import LAUNCHER_PID_ENV, RANK_ERRORS_DIR, rank_errors
from trainer.run.reporting import read_events
from trainer.run.stopping import SUSPENDED_EXIT

TORCHRUN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")  # its --signals-to-handle default


def launch_ranks(num_processes: int, rank_argv: list[str], run_dir: Path,
                 suspend_signals: Sequence[signal.Signals] = ()) -> int:
    """Runs `python -m trainer <rank_argv>` as `num_processes` ranks; returns the exit status (0 when
    every rank succeeded, SUSPENDED_EXIT when they suspended). When ranks failed before rank 0 could
    say so, the event log gets the failed status with each failing rank's error. `suspend_signals`:
    the signals the caller handles to suspend the run, which torchrun must not handle itself."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    shutil.rmtree(run_dir / RANK_ERRORS_DIR, ignore_errors=True)
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    # torchrun installs its handlers when it starts the ranks, over the launcher's suspend handler.
    forwarded = [name for name in TORCHRUN_SIGNALS if signal.Signals[name] not in suspend_signals]
    handled = [f"--signals-to-handle={','.join(forwarded)}"] if len(forwarded) < len(TORCHRUN_SIGNALS) else []
    args = get_args_parser().parse_args(
        ["--standalone", f"--nproc-per-node={num_processes}", "--max-restarts=0", *handled, "--module", "trainer",
         *rank_argv])
    try:
        run(args)
    except SignalException as exc:
        # The ranks are stopped; die of the same signal, as a single training process would.
        signal.signal(exc.sigval, signal.SIG_DFL)
        os.kill(os.getpid(), exc.sigval)
        raise
    except ChildFailedError as exc:
        if _suspended(exc.failures, run_dir):
            return SUSPENDED_EXIT
        record_failure(run_dir, [_describe(rank, failure) for rank, failure in sorted(exc.failures.items())])
        return 1
    return 0


def _suspended(failures: dict, run_dir: Path) -> bool:
    """Whether the ranks ended by suspending. torchrun counts exit 3 as a failure and stops the other
    ranks with SIGTERM as soon as one exits, so a rank still leaving the process may die of that; by then
    rank 0 has recorded the suspend in the log (the ranks leave the loop together after it)."""
    codes = {failure.exitcode for failure in failures.values()}
    if codes == {SUSPENDED_EXIT}:
        return True
    if SUSPENDED_EXIT not in codes or not codes <= {SUSPENDED_EXIT, -signal.SIGTERM}:
        return False
    events_path = run_dir / "events.jsonl"
    statuses = [e for e in read_events(events_path) if e.get("type") == "status"] if events_path.exists() else []
    return bool(statuses) and statuses[-1].get("state") == "suspended"


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
