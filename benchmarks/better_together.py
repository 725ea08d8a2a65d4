"""The MMGRPO paper's Table 1 on this machine: an Experiment (webapp/experiments) of the example
plugin's two-module DSPy program (cohort-hotpot's `hotpot_qa`: query, BM25, answer) on HotpotQA, with
the real SmolLM2-135M-Instruct, through a running Cohort (its worker trains the runs).

    COHORT_VAR_DIR=/tmp/bt make run &                        # or any running stack
    COHORT_VAR_DIR=/tmp/bt .venv/bin/python -m benchmarks.better_together --seeds 2 --steps 6 --wait

It imports the HotpotQA rows and corpus from ../shared/data (once), defines the task, queues the
experiment as the launch form's button does, and with --wait prints the table when every run ended:
each arm's dev score per seed, the mean and the sample standard deviation, and the runs' wall time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import django


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--trials", type=int, default=3, help="phase 1's budget (prompt_optimizer_trials)")
    parser.add_argument("--eval-size", type=int, default=16, help="dev examples every arm is scored on")
    parser.add_argument("--micro-batch-size", type=int, default=2, help="rows per forward pass of an update")
    parser.add_argument("--owner", default="bench")
    parser.add_argument("--wait", action="store_true", help="wait for every run and print the table")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from trainer.config import RunConfig
    from trainer.programs import program_info
    from webapp.datasets.models import Dataset
    from webapp.experiments.services import experiment_create
    from webapp.runs.catalog import programs_sync
    from webapp.runs.launch import config_defaults
    from webapp.runs.models import Program, Task

    programs_sync()
    if not Dataset.objects.filter(name__in=["hotpotqa", "hotpotqa-corpus"], version__gt=0).count() == 2:
        call_command("import_builtin_datasets", only=["hotpotqa", "hotpotqa-corpus"])
    task, _ = Task.objects.get_or_create(name="hotpot-bettertogether", defaults={
        "title": "HotpotQA, two-module DSPy program (example plugin)", "program": Program.objects.get(name="hotpot_qa"),
        "dataset": Dataset.objects.get(name="hotpotqa"), "corpus": Dataset.objects.get(name="hotpotqa-corpus"),
        "rewards": program_info("hotpot_qa")["default_rewards"]})
    owner, created = get_user_model().objects.get_or_create(username=args.owner, defaults={"is_staff": True})
    if created:
        owner.set_password("bench-password-1")
        owner.save()
    values = config_defaults(task)
    values.update(model="builtin:smollm2-135m-instruct", steps=args.steps, eval_size=args.eval_size,
                  eval_every=args.steps, checkpoint_every=args.steps, prompt_optimizer="mipro_light",
                  prompt_optimizer_trials=args.trials, max_new_tokens=24, max_context_length=1536,
                  micro_batch_size=args.micro_batch_size)
    config = RunConfig.from_dict(values)
    experiment = experiment_create(owner=owner, task=task, config=config, seeds=args.seeds,
                                   name=f"BetterTogether on HotpotQA, SmolLM2 ({args.seeds} seeds, {args.steps} steps)")
    print(f"experiment {experiment.pk}: /experiments/{experiment.pk}/ ({2 * args.seeds} runs queued)", flush=True)
    if args.wait:
        print_table(experiment, started=time.monotonic())
    return 0


def print_table(experiment, *, started: float) -> None:
    from webapp.experiments.selectors import experiment_table
    from webapp.experiments.services import experiment_runs

    while any(run.is_active for run in experiment_runs(experiment)):
        time.sleep(10)
    seeds, rows = experiment_table(experiment)
    print(f"\n| arm | {' | '.join(f'seed {s}' for s in seeds)} | mean | sd |")
    print("|---" * (len(seeds) + 3) + "|")
    for row in rows:
        cells = [f"{c.value:.3f}" if c and c.value is not None else "—" for c in row.cells]
        mean = f"{row.mean:.3f}" if row.mean is not None else "—"
        spread = f"{row.spread:.3f}" if row.spread is not None else "—"
        print(f"| {row.title} | {' | '.join(cells)} | {mean} | {spread} |")
    for run in experiment_runs(experiment):
        took = (run.finished_at - run.started_at).total_seconds() if run.finished_at and run.started_at else None
        print(f"run {run.pk} ({run.state}): {run.name}" + (f", {took:.0f} s" if took is not None else ""))
    print(f"all runs ended after {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
