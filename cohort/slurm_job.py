"""`python -m cohort.slurm_job`: a Cohort run's Slurm job on the compute node (the batch script that
webapp/scheduling/slurm/script.py renders ends by running it).

The node needs only the server's URL and the run's job token: no database, no Redis, no open port.
This process starts the run's `num_processes` ranks with `srun` (one task each, one code path on one
node or many: torch.distributed's rendezvous is the allocation's first node, from Slurm's
environment), tails the event log rank 0 writes on the shared filesystem and posts its new lines to
`POST /api/runs/<id>/events/`. What it has posted is kept in the run folder (`posted-offset`), so a post
that failed is sent again, by this attempt or the next, and never a line twice in a row (the server's
ingest is idempotent besides).

Attempts: the job's attempt is the one it was submitted as plus Slurm's SLURM_RESTART_COUNT, so a
requeued job (preemption, a time limit, `scontrol requeue`) resumes from the newest checkpoint as the
run's next attempt. Signals: Slurm's warning before the time limit (USR1, `--signal=B:USR1@S`) and a
preemption's SIGTERM write the trainer's SUSPEND file; the trainer checkpoints at its next step
boundary and exits 3, and this process then asks Slurm to requeue the job. A cancel is the server's
STOP file first (the trainer ends `cancelled`), then `scancel`.

Standard library only (and cohort.http): it runs in whatever Python the site's setup lines give.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cohort.http import CohortAPIError, base_url, send_json
from trainer.run.stopping import STOP_FILE, SUSPEND_FILE, SUSPENDED_EXIT  # names only: it imports nothing

OFFSET_FILE = "posted-offset"
POST_EVERY_S = 0.5
MOST_BYTES_A_POST = 4 * 1024 * 1024
FLUSH_AFTER_END_S = 120.0  # how long the job keeps trying to post its last lines; the server reads the rest itself
MASTER_PORT_BASE = 20000


def log(message: str) -> None:
    print(f"cohort.slurm_job: {message}", file=sys.stderr, flush=True)


class Poster:
    """Posts the event log's complete new lines from the offset kept in the run folder."""

    def __init__(self, server: str, token: str, run_id: int, run_dir: Path):
        self.server, self.token, self.run_id, self.run_dir = server, token, run_id, run_dir
        self.events_path = run_dir / "events.jsonl"
        self.offset_path = run_dir / OFFSET_FILE
        self.offset = int(self.offset_path.read_text() or 0) if self.offset_path.exists() else 0
        self.revoked = False
        self.state = ""  # the run's state as the server last answered
        self.failures = 0

    def pending(self) -> tuple[list[bytes], int]:
        if not self.events_path.exists():
            return [], self.offset
        with open(self.events_path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(MOST_BYTES_A_POST)
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == MOST_BYTES_A_POST:  # one line longer than a post: it goes alone
            with open(self.events_path, "rb") as handle:
                handle.seek(self.offset)
                line = handle.readline()
            return ([line] if line.endswith(b"\n") else []), self.offset + len(line)
        return [line for line in data[:end].splitlines() if line.strip()], self.offset + end

    def post_new(self) -> bool:
        """Posts what is new; True when everything written so far has reached the server."""
        if self.revoked:
            return True
        lines, offset = self.pending()
        if not lines:
            return offset == self.offset
        body = b'{"events": [' + b",".join(lines) + b"]}"
        try:
            answer = send_json(self.server, self.token, "POST", f"runs/{self.run_id}/events/", body, timeout=60)
        except CohortAPIError as exc:
            if exc.status in (401, 403, 404):  # the run ended or was deleted: its token no longer posts
                log(f"the server refuses this job's posts ({exc}); the event log stays in {self.run_dir}")
                self.revoked = True
                return True
            self.failures += 1
            if self.failures == 1 or self.failures % 60 == 0:
                log(f"posting to {self.server} failed ({exc}); the lines wait in the event log and go with the next post")
            return False
        self.failures = 0
        self.offset = offset
        self.offset_path.write_text(str(offset))
        self.state = (answer or {}).get("state", "")
        if self.state == "cancelling":  # the server asked to stop: at the trainer's next step boundary
            (self.run_dir / STOP_FILE).touch()
        return False if self.pending()[0] else True


def node_address(node: str) -> str:
    """The address Slurm knows a node by (NodeAddr), for the ranks' rendezvous; the name itself otherwise."""
    try:
        out = subprocess.run(["scontrol", "--oneliner", "show", "node", node], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return node
    for token in out.split():
        if token.startswith("NodeAddr="):
            return token.split("=", 1)[1] or node
    return node


def first_node() -> str:
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    try:
        names = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                               timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        names = []
    return names[0] if names else (os.environ.get("SLURMD_NODENAME") or "127.0.0.1")


def rank_environment() -> dict[str, str]:
    """torch.distributed's variables from Slurm's, in one task of the job's step."""
    return {"RANK": os.environ.get("SLURM_PROCID", "0"), "WORLD_SIZE": os.environ.get("SLURM_NTASKS", "1"),
            "LOCAL_RANK": os.environ.get("SLURM_LOCALID", "0")}


def run_as_rank(argv: list[str]) -> int:
    """`--rank-env -- ARGV`: ARGV with this task's rank taken from Slurm's variables."""
    os.environ.update(rank_environment())
    os.execv(argv[0], argv)
    return 1  # not reached


def trainer_argv(run_dir: Path, attempt: int) -> list[str]:
    argv = [sys.executable, "-m", "trainer", "train", "--config", str(run_dir / "config.json"), "--run-dir",
            str(run_dir), "--quiet", "--attempt", str(attempt)]
    return [*argv, "--resume"] if attempt > 1 else argv


def start_ranks(run_dir: Path, attempt: int) -> subprocess.Popen:
    """The run's ranks as one `srun` step: every task of the allocation, with the rendezvous's address."""
    tasks = os.environ.get("SLURM_NTASKS", "1")
    job_id = int(os.environ.get("SLURM_JOB_ID", "0") or 0)
    env = dict(os.environ, MASTER_ADDR=node_address(first_node()),
               MASTER_PORT=str(MASTER_PORT_BASE + job_id % 20000), PYTHONUNBUFFERED="1")
    # --export=ALL: sbatch's --export=NONE would reach srun too (SLURM_EXPORT_ENV) and strip this environment.
    argv = ["srun", "--export=ALL", f"--ntasks={tasks}", "--kill-on-bad-exit=1", sys.executable, "-m",
            "cohort.slurm_job", "--rank-env", "--", *trainer_argv(run_dir, attempt)]
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--rank-env"]:
        rest = argv[1:]
        return run_as_rank(rest[1:] if rest[:1] == ["--"] else rest)
    parser = argparse.ArgumentParser(prog="python -m cohort.slurm_job", description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="the Cohort server's URL, as the compute node reaches it")
    parser.add_argument("--run", type=int, required=True, help="the run's id")
    parser.add_argument("--run-dir", required=True, help="the run's folder on the shared filesystem")
    parser.add_argument("--token-file", required=True, help="the file holding this run's job token")
    parser.add_argument("--attempt", type=int, default=1, help="the attempt this job was submitted as")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    attempt = args.attempt + int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    poster = Poster(base_url(args.server), Path(args.token_file).read_text().strip(), args.run, run_dir)

    def suspend(signum, frame):  # the time limit's warning, or a preemption: checkpoint and stop
        log(f"{signal.Signals(signum).name}: the trainer checkpoints at its next step boundary")
        (run_dir / SUSPEND_FILE).touch()

    for signum in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(signum, suspend)
    (run_dir / SUSPEND_FILE).unlink(missing_ok=True)
    log(f"run {args.run} attempt {attempt} on {os.environ.get('SLURM_JOB_NODELIST', '?')}")
    ranks = start_ranks(run_dir, attempt)
    while ranks.poll() is None:
        poster.post_new()
        time.sleep(POST_EVERY_S)
    deadline = time.monotonic() + FLUSH_AFTER_END_S
    while not poster.post_new() and time.monotonic() < deadline:
        time.sleep(min(5.0, 0.5 * 2 ** min(poster.failures, 4)))
    code = ranks.returncode
    if code == SUSPENDED_EXIT and not (run_dir / STOP_FILE).exists():
        job = os.environ.get("SLURM_JOB_ID", "")
        log(f"suspended at a checkpoint: asking Slurm to requeue job {job}")
        subprocess.run(["scontrol", "requeue", job], check=False, timeout=60)
        return 0
    return 0 if code == 0 else (code if code > 0 else 1)


if __name__ == "__main__":
    sys.exit(main())
