"""The MMGRPO paper's Table 1 on this machine: an Experiment (webapp/experiments) of Cohort's two-module
DSPy program `word_math` (extract the calculation, then reply with the number) with the real
SmolLM2-135M-Instruct, through a running Cohort (its worker trains the runs).

    COHORT_VAR_DIR=/tmp/bt make run &                                  # or any running stack
    COHORT_VAR_DIR=/tmp/bt .venv/bin/python -m benchmarks.better_together --seeds 3 --wait

It queues the experiment with the task's suggested settings (the launch form's defaults), as the
launch form's "Launch experiment" button does, and with --wait prints, when every run ended, the table
in the layout of the paper's Table 1: each arm's dev score per seed (the sum of the format and
correctness rewards, 0 to 2), the mean and the sample standard deviation, each reward's mean apart,
the gain over the unadapted program, and the runs' wall time and rollouts.

--task hotpot-bettertogether runs the example plugin's HotpotQA program instead (it imports HotpotQA
from ../shared/data once).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import django

TASKS = ("word_math", "hotpot-bettertogether")
OWNER_PASSWORD = "bench-password-1"  # the throwaway benchmark user's, for the screenshot's login


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=TASKS, default="word_math")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, help="MMGRPO steps per run (default: the task's suggestion)")
    parser.add_argument("--trials", type=int, help="phase 1's budget, prompt_optimizer_trials (default: the task's)")
    parser.add_argument("--eval-size", type=int, help="dev examples every arm is scored on (default: the task's)")
    parser.add_argument("--owner", default="bench")
    parser.add_argument("--wait", action="store_true", help="wait for every run and print the table")
    parser.add_argument("--experiment", type=int, help="print the table of this experiment instead of queueing one")
    parser.add_argument("--screenshot", type=Path, help="then save the Experiment page (logged in as --owner) here")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running dashboard, for --screenshot")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    django.setup()
    from webapp.experiments.models import Experiment

    if args.experiment:
        experiment = Experiment.objects.get(pk=args.experiment)
    else:
        experiment = queue(args)
        print(f"experiment {experiment.pk}: /experiments/{experiment.pk}/ ({2 * args.seeds} runs queued)", flush=True)
    if args.wait or args.experiment:
        print_table(experiment, started=time.monotonic())
    if args.screenshot:
        from benchmarks.dashboard import screenshot

        screenshot(args.url, args.owner, OWNER_PASSWORD, f"{args.url}/experiments/{experiment.pk}/", args.screenshot,
                   ready="document.querySelector('#experiment-table') !== null", selector="main")
        print(f"saved {args.screenshot}")
    return 0


def queue(args):
    from django.contrib.auth import get_user_model

    from webapp.experiments.services import experiment_create
    from webapp.runs.launch.catalog import catalog_sync
    from webapp.runs.launch.check import launch_check
    from webapp.runs.launch.defaults import config_defaults

    catalog_sync()
    task = _hotpot_task() if args.task == "hotpot-bettertogether" else _builtin_task(args.task)
    owner, created = get_user_model().objects.get_or_create(username=args.owner, defaults={"is_staff": True})
    if created:
        owner.set_password(OWNER_PASSWORD)
        owner.save()
    values = config_defaults(task)
    if args.task == "hotpot-bettertogether":
        values.update(model="builtin:smollm2-135m-instruct", steps=6, eval_size=16, prompt_optimizer="mipro_light",
                      prompt_optimizer_trials=3, max_new_tokens=24, max_context_length=1536, micro_batch_size=2)
    for field, value in (("steps", args.steps), ("prompt_optimizer_trials", args.trials),
                         ("eval_size", args.eval_size)):
        if value is not None:
            values[field] = value
    values.update(eval_every=values["steps"], checkpoint_every=values["steps"])
    base = launch_check(owner, task=task, values=values)
    return experiment_create(base, seeds=args.seeds,
                             name=f"{task.title}, SmolLM2-135M ({args.seeds} seeds, {base.config.steps} steps)")


def _builtin_task(name: str):
    from webapp.runs.models import Task

    return Task.objects.get(name=name)


def _hotpot_task():
    from django.core.management import call_command

    from trainer.programs import program_info
    from webapp.datasets.models import Dataset
    from webapp.runs.models import Program, Task

    if not Dataset.objects.filter(name__in=["hotpotqa", "hotpotqa-corpus"], version__gt=0).count() == 2:
        call_command("import_builtin_datasets", only=["hotpotqa", "hotpotqa-corpus"])
    task, _ = Task.objects.get_or_create(name="hotpot-bettertogether", defaults={
        "title": "HotpotQA, two-module DSPy program (example plugin)", "program": Program.objects.get(name="hotpot_qa"),
        "dataset": Dataset.objects.get(name="hotpotqa"), "corpus": Dataset.objects.get(name="hotpotqa-corpus"),
        "rewards": program_info("hotpot_qa")["default_rewards"]})
    return task


def _cell(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "—"


def print_table(experiment, *, started: float) -> None:
    from webapp.experiments.selectors import experiment_table
    from webapp.experiments.services import experiment_runs

    while any(run.is_active for run in experiment_runs(experiment)):
        time.sleep(10)  # a benchmark waiting for real runs to end, not a test deciding when steps happen
    seeds, rows = experiment_table(experiment)
    reward_names = sorted({name for row in rows for name in row.rewards})
    baseline = rows[0].mean
    print(f"\n| arm | {' | '.join(f'seed {s}' for s in seeds)} | mean | sd | "
          f"{' | '.join(reward_names)} | vs unadapted |")
    print("|---" * (len(seeds) + 4 + len(reward_names)) + "|")
    for row in rows:
        cells = [_cell(c.value if c else None) for c in row.cells]
        rewards = [_cell(row.rewards.get(name)) for name in reward_names]
        gain = f"{row.mean - baseline:+.3f}" if row.mean is not None and baseline is not None else "—"
        print(f"| {row.title} | {' | '.join(cells)} | {_cell(row.mean)} | {_cell(row.spread)} | "
              f"{' | '.join(rewards)} | {gain} |")
    took = []
    for run in experiment_runs(experiment):
        seconds = (run.finished_at - run.started_at).total_seconds() if run.finished_at and run.started_at else None
        took.append(seconds)
        rollouts = run.config.get("steps", 0) * run.config.get("examples_per_step", 0) * run.config.get(
            "rollouts_per_example", 0)
        print(f"run {run.pk} ({run.state}): {run.name}, {rollouts} training rollouts"
              + (f", {seconds:.0f} s" if seconds is not None else ""))
    done = [t for t in took if t is not None]
    if done:
        print(f"runs: {sum(done):.0f} s in all, median {statistics.median(done):.0f} s")
    print(f"all runs ended after {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
