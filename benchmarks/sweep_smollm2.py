"""A real sweep of SmolLM2-135M-Instruct on `toy_format`, through Cohort: the embedded stack (daphne, a
Celery worker, Redis, SQLite) trains a grid over the learning rate with two seeds per configuration,
then prints each configuration's objective over its seeds and takes the sweep page's screenshot for
the manual (docs/how-to/sweeps.md).

    python benchmarks/sweep_smollm2.py --var-dir /tmp/sweep-smollm2            # train, report, screenshot
    python benchmarks/sweep_smollm2.py --var-dir /tmp/sweep-smollm2 --report   # the same folder, no training

Two CPU cores train the four runs one after another (the worker's concurrency is 1 here). The model
comes from the model cache `make model` fills (~/.cache/cohort).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.servers import ROOT, Stack, wait_until  # noqa: E402

LEARNING_RATES = [2e-5, 2e-4]
SEEDS = 2
STEPS = 12
SCREENSHOTS = ROOT / "docs" / "screenshots"

CREATE = """
import json
from django.contrib.auth import get_user_model
from webapp.runs.launch.check import launch_check
from webapp.runs.launch.defaults import config_defaults
from webapp.runs.models import Task
from webapp.sweeps.plan import SweepSpec
from webapp.sweeps.services import sweep_create
user = get_user_model().objects.create_superuser("researcher", password="sweep-screenshot")
task = Task.objects.get(name="toy_format")
values = config_defaults(task, model="builtin:smollm2-135m-instruct")
values.update(steps={steps}, eval_every=0, checkpoint_every=0)
spec = SweepSpec(space={{"learning_rate": {rates}}}, method="grid", seeds={seeds}, parallel=1)
sweep = sweep_create(launch_check(user, task=task, values=values), spec=spec, name="SmolLM2 toy_format: learning rate x 2 seeds")
print("SWEEP=" + str(sweep.pk))
"""

REPORT = """
import json
from webapp.sweeps.models import Sweep
sweep = Sweep.objects.get(pk={sweep})
rows = []
for trial in sweep.trials.prefetch_related("members__run"):
    runs = [m.run for m in trial.members.all()]
    rows.append({{"trial": trial.number, "params": trial.params, "state": trial.state, "value": trial.value,
                 "seeds": [r.last_reward for r in runs], "first": [(r.step_metrics.order_by("step").values_list("metrics", flat=True).first() or {{}}).get("reward/mean") for r in runs],
                 "minutes": [round((r.finished_at - r.started_at).total_seconds() / 60, 1) for r in runs if r.finished_at and r.started_at]}})
print("JSON=" + json.dumps({{"state": sweep.state, "objective": sweep.objective, "trials": rows}}))
"""


def screenshot(stack: Stack, sweep_id: int) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium")
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(f"{stack.url}/login/")
        page.fill("input[name=username]", "researcher")
        page.fill("input[name=password]", "sweep-screenshot")
        page.click("button[type=submit], input[type=submit]")
        page.wait_for_url(lambda url: "/login/" not in url)
        page.goto(f"{stack.url}/sweeps/{sweep_id}/")
        page.wait_for_selector(".js-plotly-plot")
        page.screenshot(path=str(SCREENSHOTS / "sweep-smollm2.png"), full_page=True)
        # The same runs on the compare page: one band per learning rate over its two seeds.
        page.goto(f"{stack.url}/runs/compare?sweep={sweep_id}&metrics=reward/mean")
        page.wait_for_selector(".js-plotly-plot")
        page.screenshot(path=str(SCREENSHOTS / "compare-seed-bands.png"), full_page=True)
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--var-dir", type=Path, required=True)
    parser.add_argument("--report", action="store_true", help="only report and screenshot an earlier sweep")
    args = parser.parse_args()
    stack = Stack(args.var_dir, Path.home() / ".cache" / "cohort", env={"COHORT_WORKER_CONCURRENCY": "1"})
    stack.start()
    try:
        marker = args.var_dir / "sweep.id"
        if not args.report:
            out = stack.manage_shell(CREATE.format(steps=STEPS, rates=json.dumps(LEARNING_RATES), seeds=SEEDS))
            marker.write_text(next(line[6:] for line in out.splitlines() if line.startswith("SWEEP=")))
        sweep_id = int(marker.read_text())
        started = time.monotonic()

        def report():
            out = stack.manage_shell(REPORT.format(sweep=sweep_id))
            return json.loads(next(line[5:] for line in out.splitlines() if line.startswith("JSON=")))

        found = wait_until(lambda: (r := report())["state"] != "running" and r, 4 * 3600, "the sweep", every_s=20)
        print(f"sweep {sweep_id}: {found['state']} in {(time.monotonic() - started) / 60:.1f} min; objective: last {found['objective']}")
        for row in found["trials"]:
            print(f"  trial {row['trial']} {row['params']}: {row['state']}, objective {row['value']} "
                  f"(seeds' last: {row['seeds']}, first step: {row['first']}, minutes: {row['minutes']})")
        screenshot(stack, sweep_id)
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
