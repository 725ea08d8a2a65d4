"""A throwaway Cohort dashboard for benchmarks that need the whole product: `Stack` runs
`python -m webapp.stack up` (SQLite, embedded Redis, daphne, a Celery worker) on its own COHORT_VAR_DIR
and a free port, makes users and tokens in its database, and stops everything it started; `screenshot`
logs in and saves a page's element; `LoadSampler` and `machine` say what the numbers were measured on.
Used by benchmarks/cohort_vs_trl.py.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webapp.stack import free_local_port  # noqa: E402

PYTHON = sys.executable
READY = "Cohort is running at"  # what `webapp.stack up` prints once its health wait passed


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores} CPU cores ({model or platform.processor() or platform.machine()}), no GPU used"


class LoadSampler:
    """The 1-minute load average, sampled every few seconds while a training runs: on a shared machine
    it says how much else ran beside it (2.0 on 2 cores: the training alone would fill them)."""

    def __init__(self, every_s: float = 5.0):
        self.every_s, self.samples = every_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self.every_s)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


class Stack:
    """`python -m webapp.stack up` on a throwaway COHORT_VAR_DIR and a free port, in a process group of
    its own; `manage()` runs Django code against its database."""

    def __init__(self, var_dir: Path, model_cache: Path):
        self.var_dir = var_dir
        self.port = free_local_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
        self.env.update(COHORT_VAR_DIR=str(var_dir), COHORT_PORT=str(self.port), COHORT_MODEL_CACHE=str(model_cache),
                        PYTHONUNBUFFERED="1")
        self.log = var_dir / "stack.log"
        self.process: subprocess.Popen | None = None
        self.pgids: list[int] = []

    def start(self, timeout_s: float = 300.0) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen([PYTHON, "-m", "webapp.stack", "up"], cwd=ROOT, env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if READY in self.log.read_text(errors="replace"):
                pids = self.var_dir / "stack.pids"
                self.pgids = [int(p) for p in pids.read_text().split()] if pids.exists() else []
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"the stack exited with {self.process.returncode}:\n{self._tail()}")
            time.sleep(0.5)
        raise RuntimeError(f"the stack did not say it was running within {timeout_s:.0f} s:\n{self._tail()}")

    def _tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def manage_shell(self, code: str, extra_env: dict[str, str] | None = None) -> str:
        done = subprocess.run([PYTHON, "manage.py", "shell", "-c", code], cwd=ROOT, env={**self.env, **(extra_env or {})},
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"manage.py shell failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def user_and_token(self, username: str, password: str) -> str:
        """A new user of the stack's database and a new API token for it; returns the token's key."""
        code = ("import os\n"
                "from django.contrib.auth import get_user_model\n"
                "from webapp.api.services import token_create\n"
                "user = get_user_model().objects.create_user(os.environ['BENCH_USER'], password=os.environ['BENCH_PASSWORD'])\n"
                "print('KEY=' + token_create(user=user, name='cohort_vs_trl')[1])\n")
        out = self.manage_shell(code, {"BENCH_USER": username, "BENCH_PASSWORD": password})
        return next(line[4:] for line in out.splitlines() if line.startswith("KEY="))

    def step_times(self, run_id: int) -> list[float]:
        """The stored steps' `StepMetric.created_at` (epoch seconds) in step order, the newest attempt's."""
        code = ("import json\n"
                "from webapp.runs.models import StepMetric\n"
                f"rows = StepMetric.objects.filter(run_id={int(run_id)}).order_by('step', 'attempt')\n"
                "print('JSON=' + json.dumps({r.step: r.created_at.timestamp() for r in rows}))\n")
        out = self.manage_shell(code)
        by_step = json.loads(next(line[5:] for line in out.splitlines() if line.startswith("JSON=")))
        return [by_step[k] for k in sorted(by_step, key=int)]

    def stop(self) -> None:
        """SIGINT to the stack's group (Ctrl-C); the stack stops its children. Then any group it
        recorded that is still there is killed."""
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        for pgid in self.pgids:
            for _ in range(20):
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.5)
            else:
                print(f"process group {pgid} outlived the stack; killing it", file=sys.stderr)
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def screenshot(url: str, username: str, password: str, page_url: str, path: Path, *, ready: str,
               selector: str) -> None:
    """Logs in to the dashboard at `url`, opens `page_url`, waits until the JavaScript expression `ready`
    holds, and saves the element `selector` to `path`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=os.environ.get("COHORT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"])
        try:
            page = browser.new_context(viewport={"width": 1360, "height": 900}, device_scale_factor=1).new_page()
            page.goto(f"{url}/login/")
            page.fill("#id_username", username)
            page.fill("#id_password", password)
            page.click("button[type=submit]")
            page.wait_for_url(f"{url}/", timeout=60_000)
            page.goto(page_url)
            page.wait_for_function(ready, timeout=60_000)
            page.wait_for_timeout(1000)  # Plotly's last layout pass
            path.parent.mkdir(parents=True, exist_ok=True)
            element = page.locator(selector)
            element.scroll_into_view_if_needed()
            element.screenshot(path=str(path), animations="disabled", timeout=120_000)
        finally:
            browser.close()
