"""Real SmolLM2-135M-Instruct runs for the manual's comparison pages (docs/how-to/compare-answers.md and
docs/how-to/module-credit.md): the embedded stack (daphne, a Celery worker, Redis, SQLite) trains GRPO and
GDPO on `toy_format` (same seed, same batch) and MMGRPO on `word_math` (two DSPy modules, extract then
solve); then this prints what the part-ways table and the credit section say and takes the screenshots:
the examples where the two toy runs part, one example across both runs with its diffs, the word_math
run's credit, and a replay of one call of the GDPO run.

    python benchmarks/compare_answers_smollm2.py --var-dir /tmp/compare-smollm2            # train, report, screenshot
    python benchmarks/compare_answers_smollm2.py --var-dir /tmp/compare-smollm2 --report   # the same folder, no training

The model comes from the model cache `make model` fills (~/.cache/cohort). (SmolLM2-135M writes no
queries the HotpotQA search system parses, so every MHGPO rollout there ends at its first module:
word_math is the multi-module program it partly solves.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.servers import ROOT, Stack, wait_until  # noqa: E402

SCREENSHOTS = ROOT / "docs" / "screenshots"
PASSWORD = "compare-screenshot"
SMOLLM2 = "builtin:smollm2-135m-instruct"
TOY_STEPS = 10
WORD_MATH_STEPS = 6

SETUP = """
from django.contrib.auth import get_user_model
get_user_model().objects.create_superuser("researcher", password="{password}")
"""

CREATE = """
from django.contrib.auth import get_user_model
from webapp.runs.launch.check import launch_check
from webapp.runs.launch.defaults import config_defaults
from webapp.runs.models import Task
from webapp.runs.services import run_create
user = get_user_model().objects.get(username="researcher")
toy = Task.objects.get(name="toy_format")
ids = []
for estimator in ("grpo", "gdpo"):
    values = config_defaults(toy, model="{model}")
    values.update(steps={toy_steps}, eval_every=0, checkpoint_every=0, learning_rate=2e-4, seed=1, estimator=estimator)
    ids.append(run_create(launch_check(user, task=toy, values=values), name=f"SmolLM2 toy_format, {{estimator.upper()}}").pk)
word_math = Task.objects.get(name="word_math")
values = config_defaults(word_math)
values.update(steps={word_math_steps}, eval_every=0, checkpoint_every=2, prompt_optimizer="none", seed=1)
ids.append(run_create(launch_check(user, task=word_math, values=values), name="SmolLM2 word_math, MMGRPO").pk)
print("RUNS=" + ",".join(map(str, ids)))
"""

REPORT = """
import json
from webapp.runs.models import Run
runs = [Run.objects.get(pk=pk) for pk in ({runs})]
print("JSON=" + json.dumps([{{"id": r.pk, "state": r.state, "error": r.error[-400:], "steps": r.current_step,
    "rewards": [round(m.metrics.get("reward/mean") or 0.0, 3) for m in r.step_metrics.order_by("step")]}} for r in runs]))
"""

ENDED = ("succeeded", "failed", "cancelled")


def log_in(page, url: str) -> None:
    page.goto(f"{url}/login/")
    page.fill("#id_username", "researcher")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/login/" not in u)


CALL = """
from webapp.runs.models import ModuleCall, Run
run = Run.objects.get(pk={run})
call = ModuleCall.objects.filter(rollout__run=run, rollout__step=run.current_step).order_by("rollout__index").first()
print("CALL=" + str(call.pk))
"""


def screenshots(stack: Stack, grpo: int, gdpo: int, word_math: int) -> None:
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    call = next(line[5:] for line in stack.manage_shell(CALL.format(run=gdpo)).splitlines() if line.startswith("CALL="))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium")
        page = browser.new_page(viewport={"width": 1360, "height": 1000})
        log_in(page, stack.url)
        page.goto(f"{stack.url}/runs/examples/partways?a={grpo}&b={gdpo}")
        page.wait_for_selector("#partways")
        page.screenshot(path=str(SCREENSHOTS / "examples-partways-smollm2.png"), full_page=True)
        print("part ways:", page.locator("main").inner_text()[:1500])
        page.locator("#partways a[href*='/runs/examples/across']").first.click()
        page.wait_for_selector("#across")
        page.eval_on_selector_all("#across details", "all => all.forEach(d => d.open = true)")  # the diffs shown
        page.screenshot(path=str(SCREENSHOTS / "examples-across-smollm2.png"))
        print("across:", page.url)
        page.goto(f"{stack.url}/runs/{word_math}/")
        section = page.locator("#credit-section")
        page.wait_for_selector("#credit-table, #credit-note, #credit-error")
        section.scroll_into_view_if_needed()
        section.screenshot(path=str(SCREENSHOTS / "module-credit-smollm2.png"))
        print("credit:", section.inner_text()[:1500])
        # A replay of the GDPO run's first call at its last step: the cost first, then the alternatives.
        page.goto(f"{stack.url}/runs/{gdpo}/calls/{call}/replay")
        page.wait_for_selector("#replay-cost")
        print("replay cost:", page.locator("#replay-cost").inner_text())
        page.click("#replay-start")
        # The newest replay comes first on the call's page, which refreshes itself until it ends.
        page.wait_for_function("['succeeded', 'failed'].includes(document.querySelector('section.replay')?.dataset.state)",
                               timeout=900_000)
        page.screenshot(path=str(SCREENSHOTS / "replay-module-smollm2.png"), full_page=True)
        print("replay:", page.locator("main").inner_text()[:1500])
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--var-dir", type=Path, required=True)
    parser.add_argument("--report", action="store_true", help="only report and screenshot the earlier runs")
    args = parser.parse_args()
    stack = Stack(args.var_dir, Path.home() / ".cache" / "cohort", env={"COHORT_WORKER_CONCURRENCY": "1"})
    stack.start()
    try:
        marker = args.var_dir / "runs.ids"
        if not args.report:
            stack.manage_shell(SETUP.format(password=PASSWORD))
            out = stack.manage_shell(CREATE.format(password=PASSWORD, model=SMOLLM2, toy_steps=TOY_STEPS,
                                                   word_math_steps=WORD_MATH_STEPS))
            marker.write_text(next(line[5:] for line in out.splitlines() if line.startswith("RUNS=")))
        ids = [int(i) for i in marker.read_text().split(",")]
        started = time.monotonic()

        def report():
            out = stack.manage_shell(REPORT.format(runs=",".join(map(str, ids)) + ","))
            return json.loads(next(line[5:] for line in out.splitlines() if line.startswith("JSON=")))

        def ended():
            runs = report()
            return runs if all(r["state"] in ENDED for r in runs) else None

        found = wait_until(ended, 5400, "the runs", every_s=15)
        print(f"runs ended within {(time.monotonic() - started) / 60:.1f} min")
        for run in found:
            print(f"  run {run['id']}: {run['state']} at step {run['steps']}, reward/mean per step {run['rewards']}"
                  + (f"\n    {run['error']}" if run["error"] else ""))
        if any(r["state"] != "succeeded" for r in found):
            print(stack.tail())
            return 1
        screenshots(stack, *ids)
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
