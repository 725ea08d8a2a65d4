"""A rank's teardown (trainer.policy.distributed.shutdown) really ends the gloo process group: its worker
and socket threads are joined before the interpreter exits, whatever the rank imported after joining.

Why it matters: torch.distributed.nn.functional binds `group=group.WORLD` as default arguments when it is
first imported, and transformers imports it. A rank that imported it after init_process_group kept the
group alive in those defaults, so destroy_process_group() joined nothing; a gloo worker thread that
dropped its last finished collective during interpreter shutdown needed the GIL, was ended by CPython
(pthread_exit through a noexcept frame) and the rank died of SIGABRT ("terminate called without an
active exception") after its work was done, more often on a busy CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")

ROOT = Path(__file__).resolve().parents[3]

RANK = """
import os, sys
import torch
import torch.distributed as dist
from trainer.policy import distributed

def gloo_threads():
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            names.append(open(f"/proc/self/task/{task}/comm").read().strip())
        except OSError:
            pass
    return [n for n in names if "gloo" in n]

distributed.init(distributed.SINGLE, torch.device("cpu"), alone=True)
assert gloo_threads(), "expected gloo's threads while the group lives"
import torch.distributed.nn.functional  # what transformers imports, here after joining
box = torch.ones(3)
dist.all_reduce(box)
parts = [None]
dist.all_gather_object(parts, {"rank": 0})
distributed.shutdown()
left = gloo_threads()
print("left:", left)
sys.exit(1 if left else 0)
"""


def test_shutdown_joins_the_gloo_threads_even_after_a_late_import_of_torch_distributed_nn():
    """A fresh interpreter (torch.distributed.nn not yet imported), one gloo rank on its own."""
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", RANK], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
