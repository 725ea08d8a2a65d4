"""System telemetry per training step: GPU memory, utilisation and power, process memory, and how a
step's time splits between sampling and the update. Reported as `system/*` step metrics.

Keys (a key whose source is unavailable is absent, never null or zero):
- `system/gpu_mem_allocated_gb`, `system/gpu_mem_reserved_gb`: torch's caching allocator at the end
  of the step (GiB); `system/gpu_mem_peak_gb`: the most allocated during the step (the peak counter
  is reset when a step starts). CUDA devices only.
- `system/gpu_util` (percent, the last sampling period of the driver), `system/gpu_power_w`: NVML
  (nvidia-ml-py). Absent where the library or driver is missing (an NVMLError at init, e.g. a
  machine without an NVIDIA driver) or a query is not supported by the board.
- `system/rss_gb`: resident memory of this process (psutil, GiB).
- `system/sample_s`: rollouts + rewards; `system/update_s`: grouping, advantages and the LoRA update,
  i.e. the rest of the step.

No Django here: the trainer runs without the web app.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psutil
import torch

log = logging.getLogger(__name__)

GIB = float(1 << 30)

_nvml_lock = threading.Lock()
_nvml_state: dict[str, Any] = {}  # {"module": pynvml} once initialised, {"error": str} when it failed


def nvml():
    """The initialised pynvml module, or None when NVML cannot be used here. nvmlInit runs once per
    process (it is not free, and a failure is not going to fix itself between steps)."""
    with _nvml_lock:
        if "module" in _nvml_state:
            return _nvml_state["module"]
        if "error" in _nvml_state:
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
        except ImportError as exc:
            _nvml_state["error"] = f"nvidia-ml-py is not installed ({exc})"
        except Exception as exc:  # pynvml.NVMLError and its per-code subclasses
            if not _is_nvml_error(exc):
                raise
            _nvml_state["error"] = f"NVML is not available: {exc}"
        else:
            _nvml_state["module"] = pynvml
            return pynvml
        log.info("GPU utilisation and power are not reported: %s", _nvml_state["error"])
        return None


def _is_nvml_error(exc: BaseException) -> bool:
    try:
        import pynvml
    except ImportError:
        return False
    return isinstance(exc, pynvml.NVMLError)


def _nvml_handle(pynvml, device: torch.device):
    """The NVML handle of torch's device. Torch numbers devices after CUDA_VISIBLE_DEVICES while
    NVML numbers every board, so the board is matched by UUID; the index is the fallback."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is not None:
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except pynvml.NVMLError:
            pass
    return pynvml.nvmlDeviceGetHandleByIndex(index)


class SystemSampler:
    """Measures one step at a time: `start_step()`, `sampled()` once the rollouts are scored, then
    `finish()` returns the step's `system/*` metrics."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self._process = psutil.Process()
        self._nvml = None
        self._handle = None
        if self.cuda:
            module = nvml()
            if module is not None:
                try:
                    self._handle = _nvml_handle(module, self.device)
                    self._nvml = module
                except module.NVMLError as exc:
                    log.info("GPU utilisation and power are not reported: no NVML handle (%s)", exc)
        self._started: float | None = None
        self._sampled: float | None = None

    @property
    def nvml_available(self) -> bool:
        return self._handle is not None

    def start_step(self) -> None:
        self._started = time.perf_counter()
        self._sampled = None
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def sampled(self) -> None:
        self._sampled = time.perf_counter()

    def finish(self) -> dict[str, float]:
        """The step's metrics; call after `start_step()` (and `sampled()`, else all time is sampling)."""
        if self._started is None:
            raise RuntimeError("SystemSampler.finish() before start_step()")
        now = time.perf_counter()
        sampled = self._sampled if self._sampled is not None else now
        out = {"system/sample_s": sampled - self._started, "system/update_s": now - sampled,
               "system/rss_gb": self._process.memory_info().rss / GIB}
        if self.cuda:
            out["system/gpu_mem_allocated_gb"] = torch.cuda.memory_allocated(self.device) / GIB
            out["system/gpu_mem_reserved_gb"] = torch.cuda.memory_reserved(self.device) / GIB
            out["system/gpu_mem_peak_gb"] = torch.cuda.max_memory_allocated(self.device) / GIB
        if self._handle is not None:
            out.update(self._nvml_metrics())
        self._started = self._sampled = None
        return out

    def _nvml_metrics(self) -> dict[str, float]:
        # Each query on its own: a board may support utilisation but not power (NOT_SUPPORTED).
        pynvml, out = self._nvml, {}
        try:
            out["system/gpu_util"] = float(pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
        except pynvml.NVMLError:
            pass
        try:
            out["system/gpu_power_w"] = pynvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0  # mW -> W
        except pynvml.NVMLError:
            pass
        return out
