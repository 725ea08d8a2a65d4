"""Child processes that never outlive their parent: shared by the test fixtures and benchmarks that
start real workers and servers."""

from __future__ import annotations

import os
import signal
import subprocess


def die_with_parent() -> None:
    """preexec_fn: a session of its own, and the kernel kills the child when its parent dies,
    however it dies, so a crashed test or benchmark never leaves a worker consuming shared queues
    (Linux prctl PR_SET_PDEATHSIG)."""
    import ctypes

    os.setsid()
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def stop_process_group(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to the child's whole group, SIGKILL to what is left after `grace_s`."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=5)
