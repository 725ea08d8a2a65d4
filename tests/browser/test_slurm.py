"""Slurm in a real browser: the launch form's Where choice lists the partitions as sinfo reports them, a
time over a partition's limit is refused beside its field, and the run page shows its job: a pending
job's reason in Slurm's words as the tick reads it (live, without a reload) and the batch script."""

import pytest

from tests.browser.session import PASSWORD, log_in, off_playwright_thread
from tests.conftest import asgi_server_process, free_port, service_env, wait_for
from tests.slurm_cluster import SlurmCluster, require_slurm
from tests.webapp.scheduling.slurm.conftest import EXTRA
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Run
from webapp.scheduling.models import SlurmJob
from webapp.scheduling.slurm import placement
from webapp.scheduling.slurm.services import slurm_tick


def tick() -> None:
    """The slurm queue's tick, off Playwright's event loop (its notices go through async_to_sync)."""
    off_playwright_thread(slurm_tick)


NEUTRAL = ("the Where choice and the run page's Slurm panel in a real browser; the placement check and the tick's "
           "queries are tested on both backends by tests/webapp/scheduling/slurm/")
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def test_the_where_choice_a_pending_jobs_reason_and_its_batch_script(page, screenshot, asgi_server, make_user,
                                                                    settings, tmp_path, monkeypatch):
    require_slurm()
    with SlurmCluster(nodes=1, extra_conf=EXTRA) as cluster:
        port = free_port()
        slurm = {"COHORT_SLURM_PARTITIONS": "cpu,gpu,closed", "COHORT_SLURM_RUNS_DIR": str(tmp_path / "slurm-runs"),
                 "COHORT_SLURM_SERVER_URL": f"http://127.0.0.1:{port}", "COHORT_SLURM_POLL_S": "3600"}
        for name, value in {**slurm, **cluster.environ}.items():
            if name.startswith("COHORT_") or name in ("SLURM_CONF", "PATH"):
                monkeypatch.setenv(name, value)
        settings.COHORT_SLURM_PARTITIONS = ["cpu", "gpu", "closed"]
        settings.COHORT_SLURM_RUNS_DIR = tmp_path / "slurm-runs"
        settings.COHORT_SLURM_SERVER_URL = slurm["COHORT_SLURM_SERVER_URL"]
        placement.forget_partitions()
        env = service_env(**slurm, SLURM_CONF=cluster.environ["SLURM_CONF"], PATH=cluster.environ["PATH"])
        with asgi_server_process(tmp_path / "daphne.log", env, port=port) as url:
            catalog_sync()
            make_user("alice", password=PASSWORD)
            log_in(page, url, "alice")
            page.goto(f"{url}/runs/new")
            options = page.locator("#id_partition option").all_inner_texts()
            assert options[0] == "This server's workers"
            assert "gpu: gpu:2 per node, 1 of 1 node free, 30 min" in options
            assert any(o.startswith("closed: ") for o in options)
            page.select_option("#id_partition", "gpu")
            page.fill("#id_time_limit", "45")
            page.fill("#id_steps", "3")
            page.click("text=Launch run")
            assert "over partition gpu's limit (sinfo) of 30 minutes" in page.inner_text("#error-time_limit")
            screenshot("slurm-launch-time-refused")
            assert not Run.objects.exists()

            page.select_option("#id_partition", "closed")  # down: its job waits, PENDING (PartitionDown)
            page.fill("#id_time_limit", "20")
            page.click("text=Launch run")
            page.wait_for_url(f"{url}/runs/*/")
            run = Run.objects.get()
            assert run.partition == "closed"
            assert page.inner_text("#slurm-job-id") == "not submitted yet"
            page.wait_for_function("document.getElementById('live-status').textContent === 'Live.'")
            tick()
            job = SlurmJob.objects.get(run=run)
            assert job.job_id and job.state == "PENDING"
            page.wait_for_function("document.querySelector('#slurm-state').textContent === 'PENDING'")
            # Slurm names the reason once its scheduler has looked at the job; the tick reads it, the page hears it.
            wait_for(lambda: (tick(), SlurmJob.objects.get(run=run).reason)[1] == "PartitionDown", 30,
                     "Slurm's reason for the pending job")
            page.wait_for_function("document.querySelector('#slurm-reason').textContent === 'PartitionDown'")
            page.reload()
            assert page.inner_text("#slurm-job-id") == job.job_id
            assert page.inner_text("#run-state").strip().lower().startswith("queued")
            page.click("#slurm-script-box summary")
            script = page.inner_text("#slurm-script")
            assert "#SBATCH --partition=closed" in script and "#SBATCH --time=20" in script
            assert "cohort.slurm_job" in script
            screenshot("slurm-run-pending")
            cluster.run("scancel", job.job_id)
