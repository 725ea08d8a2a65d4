"""benchmarks/gpu_smoke.py runs its cases end to end on a CPU at a small width (on a GPU as is), skips
with a reason what this machine cannot run, and fails the command when a case fails.

The command's `main` runs in this process (its cases still train in `python -m trainer` processes of
their own): one torch import fewer per test than running the script."""

import pytest

from benchmarks import gpu_smoke

pytestmark = pytest.mark.slow
SMALL = ["--device", "cpu", "--hidden-size", "48", "--num-layers", "2", "--steps", "2"]


def smoke(tmp_path, capsys, *extra) -> tuple[int, str]:
    code = gpu_smoke.main([*SMALL, "--work-dir", str(tmp_path), *extra])
    return code, capsys.readouterr().out


def test_every_case_trains_or_says_why_it_is_skipped(tmp_path, capsys):
    code, out = smoke(tmp_path, capsys, "--max-new-tokens", "8")
    assert code == 0, out
    lines = {line.split()[0]: line.split()[1] for line in out.splitlines()[2:]
             if line.strip() and not line.startswith("token details all / off")}
    assert lines == {"hf-bf16-checkpointing": "ok", "fsdp-one-process": "ok", "nvml-telemetry": "skipped",
                     "vllm-sleep-mode": "skipped", "token-details-all": "ok", "token-details-off": "ok"}
    assert "needs CUDA" in out
    assert "token details all / off: step time" in out


def test_a_failing_case_fails_the_command(tmp_path, capsys):
    code, out = smoke(tmp_path, capsys, "--max-new-tokens", "0")  # refused by RunConfig in every case
    assert code == 1
    assert out.count("FAILED") == 4 and "max_new_tokens must be a whole number of at least 1" in out
