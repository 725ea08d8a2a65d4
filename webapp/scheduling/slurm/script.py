"""The batch script of a run's Slurm job, rendered from the run's config and the server's
`COHORT_SLURM_*` settings, and shown on the run page as it was submitted.

What it asks Slurm for: one task per process (`num_processes`), on a partition with GPUs one GPU per
task (`--gres=gpu:K` per node, as few nodes as hold them), CPUs and memory per task, the time limit and
the account. `--requeue` and `--signal=B:USR1@S`: a preempted or time-limited job comes back as the
run's next attempt, and S seconds before the limit the job is told to checkpoint and stop
(`cohort.slurm_job`). `--export=NONE`: the job sees none of the login node's environment (its database or
Redis settings above all); what it needs is written into the script, and it reaches Cohort through
`COHORT_SLURM_SERVER_URL` alone, with a token that posts this one run's events.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path

TOKEN_FILE = "job-token"
SCRIPT_FILE = "job.sbatch"
OUTPUT_FILE = "slurm-%j.out"


@dataclass(frozen=True)
class JobShape:
    """What one job of the run asks for: `tasks` processes on `nodes` nodes, `gpus_per_node` each."""

    tasks: int
    nodes: int
    gpus_per_node: int


def job_shape(processes: int, partition_gpus_per_node: int) -> JobShape:
    """One task per process; on a GPU partition one GPU each, on as few nodes as hold them."""
    processes = max(1, processes)
    if partition_gpus_per_node <= 0:
        return JobShape(tasks=processes, nodes=1, gpus_per_node=0)
    nodes = math.ceil(processes / partition_gpus_per_node)
    return JobShape(tasks=processes, nodes=nodes, gpus_per_node=math.ceil(processes / nodes))


def sbatch_option_lines(text: str) -> list[str]:
    """The admin's extra options, one per line, each made a `#SBATCH` line (blank lines dropped)."""
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            lines.append(line if line.startswith("#SBATCH") else f"#SBATCH {line}")
    return lines


def batch_script(*, run_id: int, attempt: int, partition: str, time_limit_min: int, shape: JobShape, run_dir: Path,
                 account: str, extra_sbatch: str, setup: str, python: str, server_url: str, signal_s: int,
                 cpus_per_task: int, mem_per_task_mb: int, environment: dict[str, str]) -> str:
    """The whole script; `environment`: variables the trainer needs (the model cache), exported by it."""
    options = [
        f"--job-name=cohort-run-{run_id}",
        f"--partition={partition}",
        f"--time={time_limit_min}",
        f"--ntasks={shape.tasks}",
        f"--nodes={shape.nodes}",
        f"--cpus-per-task={max(1, cpus_per_task)}",
        f"--output={run_dir / OUTPUT_FILE}",
        "--requeue",
        f"--signal=B:USR1@{max(1, signal_s)}",
        "--export=NONE",
    ]
    if shape.gpus_per_node:
        options.insert(5, f"--gres=gpu:{shape.gpus_per_node}")
    if mem_per_task_mb:
        options.append(f"--mem-per-cpu={max(1, mem_per_task_mb // max(1, cpus_per_task))}")
    if account:
        options.append(f"--account={account}")
    lines = ["#!/bin/bash", f"# Cohort run {run_id}: rendered by Cohort from the run's config; its events go to "
             f"{server_url or '(COHORT_SLURM_SERVER_URL is not set)'}."]
    lines += [f"#SBATCH {option}" for option in options]
    lines += sbatch_option_lines(extra_sbatch)
    lines.append("")
    if setup.strip():
        lines += ["# The site's setup (COHORT_SLURM_SETUP)", *setup.strip().splitlines(), ""]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(environment.items())]
    lines += [
        # The trainer checkpoints at its next step boundary on a preemption's SIGTERM too.
        "export COHORT_SUSPEND_ON_SIGNALS=TERM",
        f"exec {shlex.quote(python)} -m cohort.slurm_job --server {shlex.quote(server_url)} --run {run_id} --attempt {attempt} "
        f"--run-dir {shlex.quote(str(run_dir))} --token-file {shlex.quote(str(run_dir / TOKEN_FILE))}",
        "",
    ]
    return "\n".join(lines)
