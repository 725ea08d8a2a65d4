"""System telemetry per step: which `system/*` keys a CPU step reports, the NVML guard, the timing
split, and the keys in a real training step of the tiny model."""

from __future__ import annotations

import sys
import time

import psutil
import pytest

pytestmark = pytest.mark.usefixtures("torch_setup")

CPU_KEYS = {"system/sample_s", "system/update_s", "system/rss_gb"}
GPU_KEYS = {"system/gpu_mem_allocated_gb", "system/gpu_mem_reserved_gb", "system/gpu_mem_peak_gb",
            "system/gpu_util", "system/gpu_power_w"}


@pytest.fixture
def fresh_nvml(monkeypatch):
    """A process that has not tried NVML yet (nvml() remembers its first answer)."""
    from trainer.run import telemetry

    monkeypatch.setattr(telemetry, "_nvml_state", {})
    return telemetry


def spin(seconds: float) -> None:
    """CPU work for at least `seconds` of wall time (a measured interval, not a wait for something)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def test_a_cpu_step_reports_rss_and_timings_only():
    from trainer.run.telemetry import GIB, SystemSampler

    sampler = SystemSampler("cpu")
    sampler.start_step()
    spin(0.03)
    sampler.sampled()
    spin(0.01)
    metrics = sampler.finish()
    assert set(metrics) == CPU_KEYS  # GPU keys are absent, not null or zero
    assert 0.03 <= metrics["system/sample_s"] < 1.0
    assert 0.01 <= metrics["system/update_s"] < 1.0
    rss = psutil.Process().memory_info().rss / GIB
    assert metrics["system/rss_gb"] == pytest.approx(rss, rel=0.2)
    assert not sampler.nvml_available


def test_each_step_is_measured_on_its_own():
    from trainer.run.telemetry import SystemSampler

    sampler = SystemSampler("cpu")
    sampler.start_step()
    spin(0.05)
    sampler.sampled()
    first = sampler.finish()
    sampler.start_step()
    sampler.sampled()
    spin(0.02)
    second = sampler.finish()
    assert first["system/sample_s"] >= 0.05 and second["system/sample_s"] < 0.05
    assert second["system/update_s"] >= 0.02


def test_finish_without_sampled_counts_the_step_as_sampling():
    from trainer.run.telemetry import SystemSampler

    sampler = SystemSampler("cpu")
    sampler.start_step()
    metrics = sampler.finish()
    assert metrics["system/update_s"] == 0.0 and metrics["system/sample_s"] >= 0.0


def test_finish_before_start_is_an_error():
    from trainer.run.telemetry import SystemSampler

    with pytest.raises(RuntimeError, match="start_step"):
        SystemSampler("cpu").finish()


def test_a_cuda_step_reports_gpu_memory_where_there_is_a_gpu_and_no_gpu_keys_where_there_is_none():
    """One test for every machine: the branch this machine takes is asserted (CI's CPUs: no GPU keys;
    the GPU machine: the memory keys from torch, utilisation and power from NVML)."""
    import torch

    from trainer.run.telemetry import GIB, SystemSampler

    sampler = SystemSampler("cuda:0")
    sampler.start_step()
    if not torch.cuda.is_available():
        assert set(sampler.finish()) == CPU_KEYS
        return
    block = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # 256 MiB
    del block
    sampler.sampled()
    metrics = sampler.finish()
    assert {"system/gpu_mem_allocated_gb", "system/gpu_mem_reserved_gb", "system/gpu_mem_peak_gb"} <= set(metrics)
    assert metrics["system/gpu_mem_peak_gb"] >= metrics["system/gpu_mem_allocated_gb"] + 0.25 - 1e-6
    assert metrics["system/gpu_mem_reserved_gb"] * GIB >= 256 << 20
    if sampler.nvml_available:
        assert 0 <= metrics["system/gpu_util"] <= 100 and metrics["system/gpu_power_w"] > 0


def test_nvml_is_used_where_the_driver_answers_and_absent_where_it_does_not(fresh_nvml):
    """The real library on this machine, whichever way it answers: without a driver (CI) nvmlInit raises
    an NVMLError and telemetry records why; with one, telemetry holds the library."""
    import pynvml  # nvidia-ml-py is a dependency of the train extra

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        assert fresh_nvml.nvml() is None
        assert "NVML is not available" in fresh_nvml._nvml_state["error"]
        return
    pynvml.nvmlShutdown()
    assert fresh_nvml.nvml() is not None


def test_nvml_init_errors_are_remembered_not_retried(fresh_nvml, monkeypatch):
    import pynvml  # nvidia-ml-py: a dependency of the train extra
    calls = []

    def failing_init():
        calls.append(1)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", failing_init)
    assert fresh_nvml.nvml() is None and fresh_nvml.nvml() is None
    assert calls == [1]  # init is tried once per process


def test_a_missing_nvml_package_is_absent(fresh_nvml, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    assert fresh_nvml.nvml() is None
    assert "not installed" in fresh_nvml._nvml_state["error"]


def test_other_errors_at_nvml_init_are_not_swallowed(fresh_nvml, monkeypatch):
    import pynvml  # nvidia-ml-py: a dependency of the train extra

    def broken():
        raise ZeroDivisionError("a bug, not a missing driver")

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    with pytest.raises(ZeroDivisionError):
        fresh_nvml.nvml()


def test_training_steps_carry_system_metrics(tmp_path):
    from tests.trainer.run.test_loop import ListReporter, toy_config
    from trainer.run.loop import Trainer

    reporter = ListReporter()
    trainer = Trainer(toy_config(steps=2, checkpoint_every=0), tmp_path / "run", reporter,
                      model_cache_dir=tmp_path / "models")
    assert trainer.run() == "succeeded"
    for event in reporter.events:
        metrics = event["metrics"]
        assert CPU_KEYS <= set(metrics)
        assert not GPU_KEYS & set(metrics)  # the toy run is on the CPU here
        assert metrics["system/sample_s"] > 0 and metrics["system/update_s"] > 0
        # the split covers the step: both parts together are at most the whole step time
        assert metrics["system/sample_s"] + metrics["system/update_s"] <= metrics["time/step_s"] + 1e-6
        assert metrics["system/rss_gb"] > 0.05
