"""The run page in a real browser while a run streams: is the page's main thread free, and does
Cancel answer at once?

One sitting, headless Chromium (Debian's, driven by Playwright), against a throwaway embedded stack
(`python -m webapp.stack up`: daphne, a Celery worker, embedded Redis, SQLite):

1. **A toy run at its full speed**: the built-in `toy` task on the tiny local model, queued through
   the API and trained by the stack's worker (several steps a second on a laptop CPU).
2. **An SDK run at 10 steps a second**: `cohort.init` in a thread of this process logging the 56
   metric keys of a three-module run every 100 ms.

For each, the run page is open for `--seconds` (60) while steps arrive. It prints the main thread's
busy share over that window (Chromium's own task time, CDP `Performance.getMetrics` TaskDuration,
against the wall clock), the long tasks (over 50 ms) the page reported, and the steps the page drew.
Then it clicks the Reward chart's full-width button and prints the time until the chart is wide, and
for the toy run clicks **Cancel run** and prints the time from the click to the server saying
`cancelling` (read from the API; an SDK run has no Cancel). Targets: busy share under 30%, Cancel
under 1 s.

`--repo DIR` serves the stack from another checkout (a clone of an earlier commit), so the page of
before a change is measured the same way: ``git worktree add /tmp/before REV`` and run with
``--repo /tmp/before``.

Run: ``.venv/bin/python benchmarks/browser_pages.py [--seconds 60] [--repo DIR] [--only toy|sdk]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.dashboard import LoadSampler, machine  # noqa: E402
from benchmarks.servers import Stack, wait_until  # noqa: E402

USER, PASSWORD = "bench", "bench-password-1"
CHROMIUM = os.environ.get("COHORT_CHROMIUM", "/usr/bin/chromium")
LONG_TASK_OBSERVER = """
window.__longTasks = [];
new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__longTasks.push(e.duration); })
  .observe({ type: "longtask", buffered: true });
"""


def api(stack: Stack, token: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(stack.url + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                                     method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def sdk_metrics(step: int, rng: random.Random) -> dict[str, float]:
    from benchmarks.run_data import step_metrics

    return step_metrics(step, rng)


class SdkRun(threading.Thread):
    """An SDK run logging a step every `every_s` until stopped (or cancelled from the page)."""

    def __init__(self, url: str, token: str, every_s: float):
        super().__init__(daemon=True)
        self.url, self.token, self.every_s = url, token, every_s
        self.run_id: int | None = None
        self.ready = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        import cohort

        os.environ.update(COHORT_URL=self.url, COHORT_TOKEN=self.token)
        rng = random.Random(0)
        with cohort.init(task="bench_sdk", name="sdk at 10 steps/s", config={"lr": 1e-5}) as run:
            self.run_id = int(run.id)
            self.ready.set()
            step, next_at = 0, time.monotonic()
            while not self.stop.is_set():
                step += 1
                run.log(sdk_metrics(step, rng), step=step)
                next_at += self.every_s
                self.stop.wait(max(0.0, next_at - time.monotonic()))


def watch(page, stack: Stack, token: str, run_id: int, seconds: float) -> dict:
    """Opens the run page, measures `seconds` of it, then clicks Cancel and times the server's answer."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    page.goto(f"{stack.url}/runs/{run_id}/")
    page.wait_for_function("() => window.cohortRun && document.querySelectorAll('.chart').length > 0", timeout=120_000)

    def task_seconds() -> float:
        return next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] == "TaskDuration")

    page.evaluate("() => { window.__longTasks = []; }")
    steps_before = api(stack, token, f"/api/runs/{run_id}/")["summary"]["current_step"]
    busy_before, wall_before = task_seconds(), time.monotonic()
    time.sleep(seconds)  # the page works while we wait: this is the measured window, not a guess
    busy_after, wall_after = task_seconds(), time.monotonic()
    steps_after = api(stack, token, f"/api/runs/{run_id}/")["summary"]["current_step"]
    long_tasks = page.evaluate("() => window.__longTasks")
    drawn = page.evaluate("() => Number(document.querySelector('#chart-reward')?.dataset.points || 0)")
    # A button of the page's own: the Reward chart's full-width toggle, clicked while steps arrive.
    clicked = time.monotonic()
    page.click("#chart-reward .chart-expand", timeout=300_000)
    page.wait_for_selector("#chart-reward[data-wide='true']", timeout=300_000)
    expand_s = time.monotonic() - clicked
    cancel_s = None
    if page.locator("#cancel-form:not([hidden]) button").count():  # a run of Cohort's worker (an SDK run has none)
        clicked = time.monotonic()
        page.click("#cancel-form button", timeout=300_000)
        wait_until(lambda: api(stack, token, f"/api/runs/{run_id}/")["state"] in ("cancelling", "cancelled"),
                   300, "the run never said cancelling", every_s=0.05)
        cancel_s = time.monotonic() - clicked
    return {"busy_share": (busy_after - busy_before) / (wall_after - wall_before),
            "long_tasks": len(long_tasks), "long_task_s": sum(long_tasks) / 1000.0,
            "steps_per_s": (steps_after - steps_before) / (wall_after - wall_before),
            "reward_points_drawn": drawn, "expand_s": expand_s, "cancel_s": cancel_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose stack serves the page")
    parser.add_argument("--only", choices=("toy", "sdk"), default=None)
    parser.add_argument("--sdk-every", type=float, default=0.1, help="seconds between the SDK run's steps")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    print(f"Machine: {machine()}; serving {args.repo}")
    with tempfile.TemporaryDirectory(prefix="cohort-bench-browser-") as tmp:
        stack = Stack(Path(tmp) / "var", Path.home() / ".cache" / "cohort", root=args.repo,
                      env={"COHORT_WORKER_CONCURRENCY": "1"})
        stack.start()
        try:
            token = stack.user_and_token(USER, PASSWORD)
            stack.manage_shell("from webapp.runs.launch.catalog import builtin_tasks_sync; builtin_tasks_sync()")
            results = {}
            with sync_playwright() as p, LoadSampler() as load:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                context.add_init_script(LONG_TASK_OBSERVER)
                page = context.new_page()
                page.goto(f"{stack.url}/login/")
                page.fill("input[name=username]", USER)
                page.fill("input[name=password]", PASSWORD)
                page.click("button[type=submit]")
                page.wait_for_load_state()
                if args.only in (None, "toy"):
                    run = api(stack, token, "/api/runs/", {"task": "toy", "name": "toy at full speed",
                                                           "config": {"steps": 5000}})
                    wait_until(lambda: api(stack, token, f"/api/runs/{run['id']}/")["summary"]["current_step"] >= 5, 300,
                               "the toy run never trained", every_s=0.5)
                    results["toy run, full speed"] = watch(page, stack, token, run["id"], args.seconds)
                if args.only in (None, "sdk"):
                    sdk = SdkRun(stack.url, token, args.sdk_every)
                    sdk.start()
                    sdk.ready.wait(120)
                    wait_until(lambda: api(stack, token, f"/api/runs/{sdk.run_id}/")["summary"]["current_step"] >= 5, 120,
                               "the SDK run stored nothing", every_s=0.2)
                    results[f"SDK run, {1 / args.sdk_every:.0f} steps/s"] = watch(page, stack, token, sdk.run_id,
                                                                                 args.seconds)
                    sdk.stop.set()
                    sdk.join(60)
                browser.close()
        finally:
            stack.stop()
    print(f"\n{'case':28} {'busy':>6} {'long tasks':>11} {'in long':>8} {'steps/s':>8} {'drawn':>6} {'expand':>8} "
          f"{'cancel':>8}")
    for name, r in results.items():
        cancel = "-" if r["cancel_s"] is None else f"{r['cancel_s']:.2f}s"
        print(f"{name:28} {r['busy_share']:6.0%} {r['long_tasks']:11d} {r['long_task_s']:7.1f}s {r['steps_per_s']:8.1f} "
              f"{r['reward_points_drawn']:6d} {r['expand_s']:7.2f}s {cancel:>8}")
    print(f"targets: busy share < 30%, cancel < 1 s; load average {load.mean:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
