"""Stream a run into Cohort from any trainer, with the habits of wandb and trackio::

    import cohort
    with cohort.init(task="my-task", config=config) as run:     # COHORT_URL, COHORT_TOKEN
        for step in range(steps):
            ...
            run.log({"loss": loss, "reward/mean": reward}, step=step)
            run.log_rollouts(step, [{"prompt": p, "completion": c, "reward": r, "group": g} ...])

The modules: `run` (init, Run: what the loop calls), `values` (what a value may be), `spool` (the run
folder every step is written to first), `sender` (the background upload), `upload` (the protocol,
shared with `cohort sync`), `sync` (`cohort sync`), `exit_hook` (finishing a forgotten run at exit).
Standard library only: it must install and import anywhere a trainer runs.
"""

from cohort.sdk.run import CohortWarning, Run, init

__all__ = ["CohortWarning", "Run", "init"]
