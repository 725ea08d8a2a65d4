"""What `cohort.trl.CohortCallback` adds to a TRL GRPOTrainer step, streaming to a real server.

Two copies of the same training in this process, in lockstep: TRL's `GRPOTrainer` on the real
SmolLM2-135M-Instruct, on the CPU, on Cohort's `toy_format` task (examples/trl_toy_format.py: the
task's SmolLM2 settings, fewer prompts and tokens so the run takes minutes), the same seed, so the
same prompts and samples; one without the callback (A), one with it (B). They take turns a step at a
time (A's step 1, B's step 1, A's step 2, ...), so a machine that slows down slows both alike; each
keeps its own random state across turns, so both draw the same samples (checked: the script prints
whether both copies generated the same tokens every step). With the callback, every step's metrics
and completions (prompt, completion, both rewards, advantage, group) go to daphne serving the real app on a throwaway PostgreSQL database (`cohort_bench_trl` on
DATABASE_URL's server) through the SDK's background sender, which runs on while the other copy
trains: the server and the sender share the two cores with the training, as on a laptop.

A step's time runs from the moment its trainer gets the turn at `on_step_begin` to its next
`on_step_begin`: generation, rewards, advantages, the update, every callback of the step and its
logging (the Cohort callback's included). The first --warmup steps are dropped; the ratio is the
median step with the callback over the median step without it. Target: at most 1.02.

    .venv/bin/python benchmarks/trl_callback.py [--steps 20] [--warmup 2] [--prompts 2] [--num-generations 8]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from benchmarks.servers import close_django_connections, daphne, django_setup, throwaway_database  # noqa: E402

BENCH_DATABASE = "cohort_bench_trl"
TARGET_RATIO = 1.02


class Lockstep:
    """Two trainers, one step at a time each: `take(arm)` blocks until it is `arm`'s turn."""

    def __init__(self, arms=("A", "B")):
        self.arms = arms
        self.turn = arms[0]
        self.finished: set[str] = set()
        self.condition = threading.Condition()

    def take(self, arm: str) -> None:
        with self.condition:
            self.condition.wait_for(lambda: self.turn == arm or self._other(arm) in self.finished)

    def give(self, arm: str, *, finished: bool = False) -> None:
        with self.condition:
            if finished:
                self.finished.add(arm)
            self.turn = self._other(arm)
            self.condition.notify_all()

    def _other(self, arm: str) -> str:
        return self.arms[1 - self.arms.index(arm)]


def _rng_state() -> tuple:
    import numpy as np
    import torch

    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _set_rng_state(state: tuple) -> None:
    import numpy as np
    import torch

    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])


def step_clock(lockstep: Lockstep, arm: str, times: list[float]):
    """A callback that times each of the trainer's steps while it holds the turn. The two copies share
    the process's random generators (sampling, LoRA dropout), so each keeps its own state across turns:
    both start from the seed and draw the same samples, as if each ran alone."""
    from transformers import TrainerCallback, set_seed

    class Clock(TrainerCallback):
        started: float | None = None
        rng: tuple | None = None

        def on_train_begin(self, args, state, control, **kwargs):
            lockstep.take(arm)
            set_seed(args.seed)
            self.started = time.perf_counter()

        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 0:
                return  # the turn is held since on_train_begin
            times.append(time.perf_counter() - self.started)
            self.rng = _rng_state()
            lockstep.give(arm)
            lockstep.take(arm)
            _set_rng_state(self.rng)
            self.started = time.perf_counter()

        def on_train_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter() - self.started)
            lockstep.give(arm, finished=True)

    return Clock()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a local model folder (default: the built SmolLM2)")
    parser.add_argument("--steps", type=int, default=20, help="steps of each copy")
    parser.add_argument("--warmup", type=int, default=2, help="first steps of each copy not counted")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the server shares the cores)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from trl_toy_format import make_trainer

    from trainer.models import ensure_smollm2

    model = args.model or str(ensure_smollm2())
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/9")
    with throwaway_database(BENCH_DATABASE) as database_url, tempfile.TemporaryDirectory() as work:
        try:
            django_setup(database_url)
            from django.contrib.auth import get_user_model
            from transformers import set_seed

            from cohort.trl import CohortCallback
            from webapp.api.services import token_create
            from webapp.runs.models import StepMetric

            user = get_user_model().objects.create(username="bench-trl")
            token = token_create(user=user, name="bench")[1]
            env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings", PYTHONUNBUFFERED="1")
            times: dict[str, list[float]] = {"A": [], "B": []}
            with daphne(env) as port:
                trainers = {}
                for arm in "AB":
                    set_seed(0)  # the LoRA weights are drawn before the Trainer seeds itself: the same for both
                    trainers[arm] = make_trainer(model, f"{work}/{arm}", steps=args.steps, seed=0,
                                                 num_generations=args.num_generations, prompts_per_step=args.prompts,
                                                 max_new_tokens=args.max_new_tokens)
                lockstep = Lockstep()
                for arm, trainer in trainers.items():
                    trainer.callback_handler.callbacks.insert(0, step_clock(lockstep, arm, times[arm]))
                callback = CohortCallback(trainers["B"], url=f"http://127.0.0.1:{port}", token=token,
                                          task="toy_format", name="benchmark: trl with the callback",
                                          dir=f"{work}/cohort-runs")
                trainers["B"].add_callback(callback)
                threads = [threading.Thread(target=t.train, name=f"train-{arm}") for arm, t in trainers.items()]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                runs = [callback.run.id]
                tokens = {arm: [h["num_tokens"] for h in t.state.log_history if "num_tokens" in h]
                          for arm, t in trainers.items()}
            stored = StepMetric.objects.filter(run_id__in=runs).count()
        finally:
            close_django_connections()

    times = {arm: measured[args.warmup:] for arm, measured in times.items()}
    without, with_callback = statistics.median(times["A"]), statistics.median(times["B"])
    ratio = with_callback / without
    print(f"{len(times['A'])} steps each way, taking turns ({args.warmup} warm-up steps dropped); "
          f"{stored} of {args.steps} steps stored by the server; the same tokens generated every step: "
          f"{'yes' if tokens['A'] == tokens['B'] else 'NO'}")
    print(f"median step: {without:.3f} s without, {with_callback:.3f} s with the callback; "
          f"means {statistics.fmean(times['A']):.3f} s and {statistics.fmean(times['B']):.3f} s")
    print(f"ratio {ratio:.4f} (target <= {TARGET_RATIO}): {'met' if ratio <= TARGET_RATIO else 'NOT met'}")


if __name__ == "__main__":
    main()
