"""The slurm queue's tick (workers.tasks.slurm_tick_task, on the login node): every run placed on a
partition is submitted with `sbatch`, followed with `scontrol` and cancelled with `scancel`, and Slurm's
words become the run's state.

- queued, no job (or its last job ended): render the script, write the run's config and job token to
  its folder on the shared filesystem, submit. sbatch refusing (a wrong account) fails the run with
  Slurm's message; Slurm unreachable leaves it queued with that reason.
- PENDING: the run stays queued with Slurm's reason. A running run whose job is pending again was
  requeued (preemption, a time limit, `scontrol requeue`): it is interrupted and queued, and its job
  resumes it from the newest checkpoint as the next attempt.
- RUNNING: the run is running on the job's nodes. A cancel writes the trainer's STOP file (so it ends
  `cancelled` at its step boundary) and sends `scancel`; the run shows `cancelling` until Slurm says
  the job ended.
- Ended: whatever the job could not post is read from the event log on the shared filesystem (the
  ingest is idempotent). The trainer's final status settles the run; otherwise Slurm's state does, in
  Slurm's words: a time limit, a preemption or a lost node after progress submit the run again as its
  next attempt, before any progress they leave it interrupted; any other end fails it.

The job's token, which posts this one run's events, is revoked when the run ends. The tick writes
nothing Slurm did not say: an unreachable controller changes no run and is shown as the reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trainer.config import RunConfig
from trainer.run.stopping import STOP_FILE
from webapp.limits.model_allowlist import trainer_environment
from webapp.runs.ingest.trainer_events import trainer_events_record
from webapp.runs.live.notices import notice_send
from webapp.runs.models import InvalidTransition, Run
from webapp.runs.services import run_directory, run_finish, run_training_config
from webapp.scheduling.models import SlurmJob
from webapp.scheduling.slurm import jobs, placement, tools
from webapp.scheduling.slurm.script import SCRIPT_FILE, TOKEN_FILE, batch_script, job_shape

log = logging.getLogger(__name__)

FINAL = frozenset({Run.State.SUCCEEDED, Run.State.FAILED, Run.State.CANCELLED, Run.State.PRUNED})
TRAINER_FINAL = {"succeeded": Run.State.SUCCEEDED, "failed": Run.State.FAILED, "cancelled": Run.State.CANCELLED}


def token_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def job_for_token(run_id: int, key: str) -> SlurmJob | None:
    """The job whose token `key` is, for run `run_id`, while the token is not revoked."""
    if not key:
        return None
    return SlurmJob.objects.select_related("run").filter(run_id=run_id, token_hash=token_hash(key)).first()


def token_revoke(job: SlurmJob) -> None:
    SlurmJob.objects.filter(pk=job.pk).update(token_hash="")
    job.token_hash = ""


def slurm_runs():
    """The runs the tick looks after: active ones on a partition, and ended ones whose job still lives."""
    active = Run.objects.filter(partition__gt="", state__in=Run.ACTIVE_STATES)
    lingering = Run.objects.filter(partition__gt="", slurm_job__ended_at__isnull=True).exclude(slurm_job__job_id="")
    return (active | lingering).distinct().order_by("pk")


def slurm_tick() -> dict[str, int]:
    """One look at every Slurm run; how many were submitted and followed."""
    submitted = followed = 0
    for run in slurm_runs():
        job, _ = SlurmJob.objects.get_or_create(run=run)
        try:
            if run.state == Run.State.QUEUED and (not job.job_id or job.ended):
                submitted += job_submit(run, job)
            elif job.job_id and not job.ended:
                job_follow(run, job)
                followed += 1
        except tools.SlurmUnreachable as exc:
            _note(job, f"Slurm is unreachable: {exc}. The run waits as it is, and goes on when Slurm answers.")
        except tools.SlurmRefused as exc:  # scontrol or scancel said no: kept on the run, the next tick asks again
            _note(job, f"Slurm answered: {exc}")
            log.warning("Slurm refused a request about run %s: %s", run.pk, exc)
    return {"submitted": submitted, "followed": followed}


def _note(job: SlurmJob, message: str, **changes) -> None:
    """Keeps what changed on the job's row and tells the run's pages when anything did."""
    changes["message"] = message
    if all(getattr(job, name) == value for name, value in changes.items()):
        return
    SlurmJob.objects.filter(pk=job.pk).update(**changes)
    for name, value in changes.items():
        setattr(job, name, value)
    notice_send(job.run_id, slurm_notice(job))


def slurm_notice(job: SlurmJob) -> dict:
    """The run page's `slurm` notice: the job as the tick last read it."""
    return {"type": "slurm", "run": job.run_id, "job_id": job.job_id, "state": job.state, "reason": job.reason,
            "nodes": job.nodes, "restarts": job.restarts, "message": job.message}


# --- the job's posts (views.py) ---------------------------------------------------------------
def job_statuses_apply(run: Run, events: list[dict]) -> None:
    """The trainer's statuses move the run: `running` starts its attempt (the job may start before the
    tick saw it run), a final status ends it; `suspended` waits for Slurm's requeue."""
    for event in events:
        if event["type"] != "status":
            continue
        state = event.get("state")
        run.refresh_from_db()
        if run.state in FINAL:
            return
        if state == "running":
            attempt = max(run.attempt, int(event.get("attempt", 1)))
            if run.state == Run.State.QUEUED:
                now = timezone.now()
                run.transition(Run.State.RUNNING, attempt=attempt, heartbeat_at=now, started_at=run.started_at or now)
            else:
                Run.objects.filter(pk=run.pk).update(attempt=attempt)  # a requeued job's next attempt
        elif state in TRAINER_FINAL:
            if run.state == Run.State.CANCELLING:  # cancelling until Slurm says the job ended (the tick)
                continue
            if run.state == Run.State.QUEUED:
                run.transition(Run.State.RUNNING, started_at=run.started_at or timezone.now())
            error = event.get("error") if isinstance(event.get("error"), str) else ""
            try:
                run_finish(run, TRAINER_FINAL[state], error=error or "")
            except InvalidTransition:
                pass


# --- submitting ---------------------------------------------------------------------------------
def job_script(run: Run, run_dir: Path) -> str:
    config = RunConfig.from_dict(run.config)
    found = placement.cluster_partitions()
    partition = found.get(run.partition) if isinstance(found, dict) else None
    shape = job_shape(config.num_processes, partition.gpus_per_node if partition else 0)
    environment = {**trainer_environment(), "COHORT_MODEL_CACHE": str(settings.COHORT_MODEL_CACHE)}
    return batch_script(
        run_id=run.pk, attempt=run.attempt, partition=run.partition,
        time_limit_min=run.time_limit_min or settings.COHORT_SLURM_DEFAULT_TIME_MIN, shape=shape, run_dir=run_dir,
        account=settings.COHORT_SLURM_ACCOUNT, extra_sbatch=settings.COHORT_SLURM_SBATCH_LINES,
        setup=settings.COHORT_SLURM_SETUP, python=settings.COHORT_SLURM_PYTHON,
        server_url=settings.COHORT_SLURM_SERVER_URL, signal_s=settings.COHORT_SLURM_SIGNAL_S,
        cpus_per_task=settings.COHORT_SLURM_CPUS_PER_PROCESS, mem_per_task_mb=settings.COHORT_SLURM_MEM_PER_PROCESS_MB,
        environment=environment)


def _job_token(job: SlurmJob, run_dir: Path) -> None:
    """A new token for the job (the earlier one, if any, stops posting), readable by its user alone."""
    key = secrets.token_urlsafe(32)
    path = run_dir / TOKEN_FILE
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)
    path.write_text(key)
    SlurmJob.objects.filter(pk=job.pk).update(token_hash=token_hash(key))
    job.token_hash = token_hash(key)


def job_submit(run: Run, job: SlurmJob) -> int:
    """Submits the run's next job; 1 when sbatch took it (or an earlier submission was found), else 0."""
    run_dir = run_directory(run.pk, on_slurm=True)
    name = f"cohort-run-{run.pk}"
    # A tick that died between sbatch and storing its answer left a job Slurm runs: adopt it, never a second.
    for found in tools.jobs_named(name):
        fields = (tools.job(found) or {}) if found != job.job_id else {}
        if fields and jobs.job_state(fields) not in jobs.ENDED:
            _note(job, "", job_id=found, state=jobs.job_state(fields), ended_at=None, submitted_at=timezone.now(),
                  submissions=job.submissions + 1, start_step=run.current_step)
            return 1
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / STOP_FILE).unlink(missing_ok=True)
    try:
        (run_dir / "config.json").write_text(json.dumps(run_training_config(run, run_dir)))
    except Exception as exc:  # the task's data could not be exported: nothing to train
        _fail(run, job, f"The run's data could not be written to {run_dir}: {exc}")
        return 0
    script = job_script(run, run_dir)
    (run_dir / SCRIPT_FILE).write_text(script)
    _job_token(job, run_dir)
    try:
        job_id = tools.submit(str(run_dir / SCRIPT_FILE), workdir=str(run_dir))
    except tools.SlurmRefused as refused:
        _note(job, f"sbatch refused the job: {refused}", script=script)
        _fail(run, job, f"Slurm refused the job (sbatch): {refused}")
        return 0
    _note(job, "", job_id=job_id, state="PENDING", reason="", nodes="", restarts=0, script=script,
          submissions=job.submissions + 1, submitted_at=timezone.now(), ended_at=None, cancel_sent_at=None,
          start_step=run.current_step)
    log.info("run %s submitted as Slurm job %s on %s", run.pk, job_id, run.partition)
    return 1


def _fail(run: Run, job: SlurmJob, error: str) -> None:
    run.refresh_from_db()
    try:
        if run.state in Run.ACTIVE_STATES:
            run.transition(Run.State.FAILED, error=error[:10000], finished_at=timezone.now())
    except InvalidTransition:
        pass
    token_revoke(job)


# --- following ----------------------------------------------------------------------------------
def job_follow(run: Run, job: SlurmJob) -> None:
    """Reads the job from Slurm and moves the run to match."""
    fields = tools.job(job.job_id)
    if fields is None:  # Slurm forgot it (it keeps ended jobs for MinJobAge only)
        job_ended(run, job, {"JobState": job.state if job.state in jobs.ENDED else "COMPLETED"})
        return
    state = jobs.job_state(fields)
    nodes = fields.get("NodeList", "")
    _note(job, "", state=state, reason=fields.get("Reason", "") if fields.get("Reason") != "None" else "",
          nodes="" if nodes == "(null)" else nodes, restarts=int(fields.get("Restarts", "0") or 0),
          checked_at=timezone.now())
    run.refresh_from_db()
    if state in jobs.ENDED:
        job_ended(run, job, fields)
        return
    # Asked to stop (a cancel, its sweep's pruner; queued ones end at once): a run that succeeded or failed
    # has a job that is only posting its last lines and exiting by itself.
    if run.state in (Run.State.CANCELLING, Run.State.CANCELLED, Run.State.PRUNED):
        job_cancel(run, job)
        return
    if state in jobs.WAITING and run.state == Run.State.RUNNING:
        attempt_requeued(run, f"Slurm requeued job {job.job_id} ({job.reason or 'requeued'}); it resumes from the "
                              "newest checkpoint as the next attempt")
    elif state in jobs.RUNNING:
        where = f"slurm job {job.job_id} on {job.nodes or '?'}"
        if run.state == Run.State.QUEUED:
            now = timezone.now()
            run.transition(Run.State.RUNNING, worker=where[:200], heartbeat_at=now, started_at=run.started_at or now)
        elif run.state == Run.State.RUNNING:
            Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now(), worker=where[:200])


def attempt_requeued(run: Run, why: str, *, next_attempt: bool = False) -> None:
    """running -> interrupted -> queued: the run waits for its job to come back, as a resumed run does.
    Slurm's requeue keeps the job, whose posts name the attempt (submitted + Slurm's restarts); a new
    job (`next_attempt`) is submitted as the next attempt."""
    with transaction.atomic():
        if run.transition(Run.State.INTERRUPTED, error=why[:10000]):
            run.transition(Run.State.QUEUED, error="", finished_at=None,
                           attempt=run.attempt + 1 if next_attempt else run.attempt)


def job_cancel(run: Run, job: SlurmJob) -> None:
    """The trainer's STOP file on the shared filesystem (it ends `cancelled` at its next step boundary),
    then `scancel`, once; the run stays `cancelling` until Slurm says the job ended."""
    if job.cancel_sent_at is not None:
        return
    folder = run_directory(run.pk, on_slurm=True)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / STOP_FILE).touch()
    tools.cancel(job.job_id)
    _note(job, job.message, cancel_sent_at=timezone.now())


def catch_up_from_log(run: Run) -> dict | None:
    """Stores whatever of the event log the job could not post (the ingest skips what is stored) and
    returns the trainer's last status of the newest attempt (None when the log has none)."""
    path = run_directory(run.pk, on_slurm=True) / "events.jsonl"
    if not path.exists():
        return None
    lines = path.read_bytes().splitlines()
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:  # a torn last line of a killed job
            continue
    trainer_events_record(run, events)
    statuses = [e for e in events if e.get("type") == "status"]
    return statuses[-1] if statuses else None


def job_ended(run: Run, job: SlurmJob, fields: dict[str, str]) -> None:
    """The job ended: its run settles by the trainer's last word, else by Slurm's."""
    state = jobs.job_state(fields)
    _note(job, job.message, state=state, ended_at=timezone.now())
    last = catch_up_from_log(run)
    run.refresh_from_db()
    if run.state in FINAL or run.state == Run.State.INTERRUPTED:
        token_revoke(job)
        return
    words = jobs.job_words(fields)
    trainer_state = (last or {}).get("state") if last and int(last.get("attempt", run.attempt)) >= run.attempt else None
    if trainer_state in ("succeeded", "failed", "cancelled"):
        _finish(run, trainer_state, (last or {}).get("error", ""))
    elif run.state == Run.State.CANCELLING or state == "CANCELLED":
        _finish(run, Run.State.CANCELLED, f"Slurm: {words}" if run.state != Run.State.CANCELLING else "")
    elif state in jobs.RESUMABLE or trainer_state == "suspended":
        if run.current_step > job.start_step and run.state == Run.State.RUNNING:
            attempt_requeued(run, f"Slurm: {words}; submitted again, to resume from the newest checkpoint",
                             next_attempt=True)
            token_revoke(job)  # the next job gets its own
            return
        _interrupt(run, f"Slurm: {words}, before any step of this job; resume to submit it again")
    else:
        tail = _output_tail(run, job)
        _finish(run, Run.State.FAILED, f"Slurm: {words}" + (f"\n{tail}" if tail else ""))
    token_revoke(job)


def _finish(run: Run, state: str, error: str) -> None:
    if run.state == Run.State.QUEUED:  # it ended before the tick saw it run
        if state == Run.State.CANCELLED:
            run.transition(Run.State.CANCELLED, finished_at=timezone.now(), error=error[:10000])
            return
        run.transition(Run.State.RUNNING, started_at=run.started_at or timezone.now())
    if state == Run.State.CANCELLED and run.state == Run.State.RUNNING:  # cancelled outside Cohort (scancel)
        run.transition(Run.State.CANCELLING)
    run_finish(run, state, error=error)


def _interrupt(run: Run, error: str) -> None:
    if run.state == Run.State.QUEUED:
        run.transition(Run.State.FAILED, error=error[:10000], finished_at=timezone.now())
    elif run.state == Run.State.RUNNING:
        run.transition(Run.State.INTERRUPTED, error=error[:10000], finished_at=timezone.now())


def _output_tail(run: Run, job: SlurmJob, limit: int = 3000) -> str:
    path = run_directory(run.pk, on_slurm=True) / f"slurm-{job.job_id}.out"
    try:
        return path.read_text(errors="replace")[-limit:].strip()
    except OSError:
        return ""
