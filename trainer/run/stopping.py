"""How a run is asked to end early, read by the CLI, the launcher and the loop (and the processes that
drive them: the worker's supervisor, a Slurm job): a file in the run folder, checked at each step
boundary. `STOP` cancels; `SUSPEND` checkpoints and exits with SUSPENDED_EXIT, so whoever started the
run (a Slurm job) continues it later as its next attempt. Names only: this module imports nothing."""

STOP_FILE = "STOP"
SUSPEND_FILE = "SUSPEND"
SUSPEND_SIGNALS_ENV = "COHORT_SUSPEND_ON_SIGNALS"
SUSPENDED_EXIT = 3  # neither success nor failure: a batch script requeues the job on it
