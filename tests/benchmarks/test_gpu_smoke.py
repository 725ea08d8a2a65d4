"""benchmarks/gpu_smoke.py runs its cases end to end on a CPU at a small width (on a GPU as is), skips
with a reason what this machine cannot run, and fails the command when a case fails."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
SMALL = ["--device", "cpu", "--hidden-size", "48", "--num-layers", "2", "--steps", "2"]


def smoke(tmp_path, *extra):
    return subprocess.run([sys.executable, "benchmarks/gpu_smoke.py", *SMALL, "--work-dir", str(tmp_path), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_every_case_trains_or_says_why_it_is_skipped(tmp_path):
    done = smoke(tmp_path, "--max-new-tokens", "8")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()[2:] if line.strip()}
    assert lines == {"hf-bf16-checkpointing": "ok", "fsdp-one-process": "ok", "nvml-telemetry": "skipped",
                     "vllm-sleep-mode": "skipped"}
    assert "needs CUDA" in done.stdout


def test_a_failing_case_fails_the_command(tmp_path):
    done = smoke(tmp_path, "--max-new-tokens", "0")  # refused by RunConfig in every case
    assert done.returncode == 1
    assert done.stdout.count("FAILED") == 2 and "max_new_tokens must be a whole number of at least 1" in done.stdout
