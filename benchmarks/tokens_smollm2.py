"""A real SmolLM2-135M-Instruct run on `toy_format`, read token by token: the embedded stack (daphne, a
Celery worker, Redis, SQLite) trains it with `token_details = all`, then this prints each step's token
metrics and takes the manual's screenshots (docs/how-to/tokens.md): the inspector coloured by entropy with a
fork's alternatives open, and the step's forks table.

    python benchmarks/tokens_smollm2.py --var-dir /tmp/tokens-smollm2            # train, report, screenshot
    python benchmarks/tokens_smollm2.py --var-dir /tmp/tokens-smollm2 --report   # the same folder, no training

The model comes from the model cache `make model` fills (~/.cache/cohort).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.servers import ROOT, Stack, wait_until  # noqa: E402

STEPS = 4
SCREENSHOTS = ROOT / "docs" / "screenshots"
PASSWORD = "tokens-screenshot"

CREATE = """
from django.contrib.auth import get_user_model
from webapp.runs.launch.check import launch_check
from webapp.runs.launch.defaults import config_defaults
from webapp.runs.models import Task
from webapp.runs.services import run_create
user = get_user_model().objects.create_superuser("researcher", password="{password}")
task = Task.objects.get(name="toy_format")
values = config_defaults(task, model="builtin:smollm2-135m-instruct")
values.update(steps={steps}, eval_every=0, checkpoint_every=0, learning_rate=2e-4, token_details="all")
run = run_create(launch_check(user, task=task, values=values), name="SmolLM2 toy_format, token by token")
print("RUN=" + str(run.pk))
"""

REPORT = """
import json
from webapp.runs.models import Run
from webapp.runs.inspector.token_reads import step_forks
run = Run.objects.get(pk={run})
steps = [(s.step, {{k: v for k, v in s.metrics.items() if k.startswith("tokens/") or k == "reward/mean"}})
         for s in run.step_metrics.order_by("step")]
forks = []
if run.state == "succeeded":
    for step, _ in steps:
        for f in step_forks(run, run.attempt, step, limit=400):
            forks.append({{"step": step, "example": f.example_id, "rollout": f.rollout, "position": f.position,
                          "token": f.token, "entropy": f.entropy, "chosen": f.chosen, "alternatives": f.alternatives}})
print("JSON=" + json.dumps({{"state": run.state, "attempt": run.attempt, "steps": steps, "forks": forks}}))
"""


def pick_fork(forks: list[dict]) -> dict:
    """A fork worth a picture: in the last step, a word chosen among the alternatives the policy weighed
    (the highest-entropy forks of a small model are often a rare token sampled from a flat tail)."""
    last = max(f["step"] for f in forks)
    weighed = [f for f in forks if f["step"] == last and f["chosen"].strip().isalpha()
               and f["chosen"] in [a[0] for a in f["alternatives"][:3]]]
    return max(weighed or forks, key=lambda f: f["entropy"])


def screenshot(stack: Stack, run_id: int, attempt: int, fork: dict) -> None:
    from urllib.parse import urlencode

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium")
        page = browser.new_page(viewport={"width": 1360, "height": 1000})
        page.goto(f"{stack.url}/login/")
        page.fill("input[name=username]", "researcher")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit], input[type=submit]")
        page.wait_for_url(lambda url: "/login/" not in url)
        # The inspector at the fork, as a row of the step's forks table links to it (webapp/runs/inspector/token_cells.py).
        query = urlencode({"example": fork["example"], "attempt": attempt, "rollout": fork["rollout"],
                           "call": fork["position"], "token": fork["token"]})
        page.goto(f"{stack.url}/runs/{run_id}/steps/{fork['step']}/trajectories?{query}")
        page.wait_for_selector("#token-tip:visible")
        page.screenshot(path=str(SCREENSHOTS / "tokens-inspector-smollm2.png"), full_page=True)
        page.goto(f"{stack.url}/runs/{run_id}/steps/{fork['step']}/")
        page.click("#forks-section > summary")  # the table is folded below the groups
        page.wait_for_selector("#token-forks")
        page.locator("#forks-section").screenshot(path=str(SCREENSHOTS / "tokens-forks-smollm2.png"))
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--var-dir", type=Path, required=True)
    parser.add_argument("--report", action="store_true", help="only report and screenshot an earlier run")
    args = parser.parse_args()
    stack = Stack(args.var_dir, Path.home() / ".cache" / "cohort", env={"COHORT_WORKER_CONCURRENCY": "1"})
    stack.start()
    try:
        marker = args.var_dir / "run.id"
        if not args.report:
            out = stack.manage_shell(CREATE.format(steps=STEPS, password=PASSWORD))
            marker.write_text(next(line[4:] for line in out.splitlines() if line.startswith("RUN=")))
        run_id = int(marker.read_text())
        started = time.monotonic()

        def report():
            out = stack.manage_shell(REPORT.format(run=run_id))
            return json.loads(next(line[5:] for line in out.splitlines() if line.startswith("JSON=")))

        found = wait_until(lambda: (r := report())["state"] in ("succeeded", "failed", "cancelled") and r, 3600,
                           "the run", every_s=15)
        print(f"run {run_id}: {found['state']} in {(time.monotonic() - started) / 60:.1f} min")
        for step, metrics in found["steps"]:
            print(f"  step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()) if v is not None))
        if found["state"] != "succeeded" or not found["forks"]:
            print(stack.tail())
            return 1
        fork = pick_fork(found["forks"])
        print(f"fork shown: step {fork['step']}, example {fork['example']}, rollout {fork['rollout']}, token {fork['token']} "
              f"{fork['chosen']!r} (entropy {fork['entropy']:.3f}); alternatives {fork['alternatives']}")
        screenshot(stack, run_id, found["attempt"], fork)
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
