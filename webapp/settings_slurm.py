"""Slurm's settings (webapp/scheduling/slurm, docs/how-to/slurm.md), which `webapp.settings` takes in whole:
the partitions the launch form offers, the job's template and the cluster's shared folder.

Empty COHORT_SLURM_PARTITIONS: Slurm is off (the form has no Where choice). A worker on the login node
consumes the `slurm` queue; it submits with sbatch, follows with scontrol and cancels with scancel."""

import sys

import environ

from webapp.paths import VAR_DIR

env = environ.Env()

COHORT_SLURM_PARTITIONS = env.list("COHORT_SLURM_PARTITIONS", default=[])
COHORT_SLURM_ACCOUNT = env.str("COHORT_SLURM_ACCOUNT", default="")
COHORT_SLURM_DEFAULT_TIME_MIN = env.int("COHORT_SLURM_DEFAULT_TIME_MIN", default=60)
COHORT_SLURM_MAX_TIME_MIN = env.int("COHORT_SLURM_MAX_TIME_MIN", default=24 * 60)
# Extra `#SBATCH` lines (one option per line, with or without the `#SBATCH` prefix) and the setup lines
# the job runs before the trainer (module loads, a venv's activation); newlines as `\n` in the variable.
COHORT_SLURM_SBATCH_LINES = env.str("COHORT_SLURM_SBATCH_LINES", default="").replace("\\n", "\n")
COHORT_SLURM_SETUP = env.str("COHORT_SLURM_SETUP", default="").replace("\\n", "\n")
# The cluster's shared filesystem, seen at the same path by the login node and every compute node: each
# run's config, data, event log, checkpoints and adapter go to run-<id>/ there.
COHORT_SLURM_RUNS_DIR = env.path("COHORT_SLURM_RUNS_DIR", default=str(VAR_DIR / "slurm-runs"))
# The URL a compute node reaches this server at (its only connection to Cohort); the Python there.
COHORT_SLURM_SERVER_URL = env.str("COHORT_SLURM_SERVER_URL", default="")
COHORT_SLURM_PYTHON = env.str("COHORT_SLURM_PYTHON", default=sys.executable)
# How often the slurm queue's tick reads the jobs (seconds), and how long before its time limit a job is
# told to checkpoint and stop (seconds; Slurm's `--signal`).
COHORT_SLURM_POLL_S = env.float("COHORT_SLURM_POLL_S", default=10.0)
COHORT_SLURM_SIGNAL_S = env.int("COHORT_SLURM_SIGNAL_S", default=300)
# CPUs and memory (MB) per GPU, or per process on a partition without GPUs.
COHORT_SLURM_CPUS_PER_PROCESS = env.int("COHORT_SLURM_CPUS_PER_PROCESS", default=1)
COHORT_SLURM_MEM_PER_PROCESS_MB = env.int("COHORT_SLURM_MEM_PER_PROCESS_MB", default=0)

# What `from webapp.settings_slurm import *` takes: the settings, not this module's own names.
__all__ = [name for name in dir() if name.startswith("COHORT_SLURM_")]
