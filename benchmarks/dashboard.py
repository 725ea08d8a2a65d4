"""For benchmarks that show the whole product: `screenshot` logs in and saves a page's element;
`LoadSampler` and `machine` say what the numbers were measured on. The throwaway dashboard itself
(`Stack`) lives in benchmarks/servers.py. Used by benchmarks/cohort_vs_trl.py.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import threading
from pathlib import Path


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
