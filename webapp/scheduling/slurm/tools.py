"""Slurm's own tools, as the slurm queue's worker on the login node calls them: `sinfo` for the
partitions, `sbatch` to submit, `scontrol` to follow and requeue, `scancel` to cancel, `squeue` to find a
job by name. Nothing here parses more than these commands print with the formats asked for, and nothing
imports Django: the callers decide what an answer means for a run.

Two failures are told apart, because they mean different things to a run: `SlurmUnreachable` (the
controller does not answer, or the tools are missing: the run waits, nothing is lost) and `SlurmRefused`
(Slurm answered no, e.g. an account sbatch does not know: the run fails with Slurm's words).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

COMMAND_TIMEOUT_S = 30
# What Slurm's clients print when slurmctld cannot be reached (src/api and src/common of Slurm 22-24).
UNREACHABLE = re.compile(r"Unable to contact slurm controller|Socket timed out|Connection refused|"
                         r"Zero Bytes were transmitted|Communication connection failure|Unable to establish",
                         re.IGNORECASE)


class SlurmUnreachable(Exception):
    """The controller did not answer (or Slurm's tools are not installed here)."""


class SlurmRefused(Exception):
    """Slurm answered and refused; the message is Slurm's own."""


def run_tool(*argv: str) -> str:
    """The tool's standard output; SlurmUnreachable or SlurmRefused (with its message) otherwise."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SlurmUnreachable(f"{argv[0]} is not installed on this worker (Slurm's client tools are needed "
                               "on the machine that consumes the slurm queue)") from None
    except subprocess.TimeoutExpired:
        raise SlurmUnreachable(f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S} s") from None
    if done.returncode != 0:
        message = (done.stderr.strip() or done.stdout.strip() or f"{argv[0]} exited with {done.returncode}")
        message = re.sub(r"^(sbatch|scontrol|scancel|squeue|sinfo): error: ", "", message, flags=re.MULTILINE)
        if UNREACHABLE.search(message):
            raise SlurmUnreachable(message)
        raise SlurmRefused(message)
    return done.stdout


@dataclass(frozen=True)
class Partition:
    """One partition as `sinfo` reports it: GPUs per node from its gres (0: none), nodes, idle nodes, the
    time limit in minutes (None: unlimited)."""

    name: str
    gpus_per_node: int
    nodes: int
    idle_nodes: int
    time_limit_min: int | None
    gres: str
    up: bool = True  # the partition's own state (sinfo %a): a down one schedules nothing

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def time_label(self) -> str:
        if self.time_limit_min is None:
            return "no time limit"
        hours, minutes = divmod(self.time_limit_min, 60)
        return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def time_minutes(text: str) -> int | None:
    """Slurm's time in whole minutes, rounded up: "infinite" (None), "45" (minutes), "30:00" (MM:SS),
    "1:00:00" (HH:MM:SS), and with days "2-12" (D-HH), "2-12:30" (D-HH:MM), "2-12:30:00"."""
    text = text.strip()
    if text.lower() in ("infinite", "unlimited", "n/a", ""):
        return None
    if "-" in text:
        day_text, rest = text.split("-", 1)
        parts = [int(p) for p in rest.split(":")] + [0, 0]
        hours, minutes, seconds = parts[0], parts[1], parts[2]
        days = int(day_text)
    else:
        days = 0
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts[-3], parts[-2], parts[-1]
    return days * 24 * 60 + hours * 60 + minutes + (1 if seconds else 0)


def gpu_count(gres: str) -> int:
    """GPUs per node in a gres string ("gpu:2", "gpu:h100:8(S:0-1)", "(null)"): 0 without GPUs."""
    total = 0
    for item in gres.split(","):
        match = re.match(r"gpu(?::[^:(]+)?:(\d+)", item.strip())
        if match:
            total += int(match.group(1))
    return total


def partitions() -> dict[str, Partition]:
    """Every partition sinfo reports, by name (one line per partition and node state, summed here)."""
    out = run_tool("sinfo", "--noheader", "--all", "--format=%R|%l|%G|%t|%D|%a")
    seen: dict[str, dict] = {}
    for line in out.splitlines():
        if not line.strip():
            continue
        name, limit, gres, state, count, available = line.split("|")
        entry = seen.setdefault(name, {"limit": limit, "gres": gres, "nodes": 0, "idle": 0, "gpus": 0,
                                       "up": available.strip().lower() == "up"})
        entry["nodes"] += int(count)
        entry["gpus"] = max(entry["gpus"], gpu_count(gres))
        if entry["gpus"] and gpu_count(gres) == entry["gpus"]:
            entry["gres"] = gres
        if entry["up"] and state.rstrip("*~#!%$@^-") == "idle":
            entry["idle"] += int(count)
    return {name: Partition(name, e["gpus"], e["nodes"], e["idle"], time_minutes(e["limit"]),
                            "" if e["gres"] in ("(null)", "") else e["gres"], up=e["up"])
            for name, e in seen.items()}


def submit(script_path: str, *, workdir: str) -> str:
    """`sbatch` of the script; the job id it answers."""
    out = run_tool("sbatch", "--parsable", f"--chdir={workdir}", script_path)
    return out.strip().split(";")[0]


def job(job_id: str) -> dict[str, str] | None:
    """`scontrol show job` as key -> value (JobState, Reason, NodeList, Restarts, ExitCode...); None
    when Slurm no longer knows the job (it forgets ended jobs after MinJobAge)."""
    try:
        out = run_tool("scontrol", "--oneliner", "show", "job", job_id)
    except SlurmRefused as refused:
        if "Invalid job id" in str(refused):
            return None
        raise
    fields: dict[str, str] = {}
    for token in out.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields or None


def jobs_named(name: str) -> list[str]:
    """The ids of the jobs Slurm holds with this name (any state it still lists)."""
    out = run_tool("squeue", "--noheader", "--states=all", f"--name={name}", "--format=%i")
    return [line.strip() for line in out.splitlines() if line.strip()]


def cancel(job_id: str) -> None:
    run_tool("scancel", job_id)
