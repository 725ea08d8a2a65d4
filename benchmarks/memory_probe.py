"""How `benchmarks/memory.py` measures one phase in its child process: the phase's peak on top of what
setup left (CPU: the kernel's RSS high-water mark, reset before the phase, with a guard that stops a
child about to exhaust the machine; CUDA: torch's peak allocation). See memory.py's "Measured"."""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import threading
import time

import torch

from benchmarks.memory_phases import prepare


def kib(field: str, path: str = "/proc/self/status") -> int:
    """A /proc field in KiB (VmRSS, VmHWM; MemAvailable from /proc/meminfo)."""
    with open(path) as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _reset_peak_rss() -> int:
    """Hand malloc's free memory back (so the phase cannot reuse setup's frees unseen) and reset the
    kernel's RSS high-water mark to the current RSS (Linux >= 4.0). -> the mark, KiB."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except (OSError, AttributeError):
        pass  # then the mark may sit above the RSS: "slack", growth the phase could hide
    return kib("VmHWM")  # what ru_maxrss reports, less what it keeps from before exec


def _rss_guard(limit_kib: int, before_kib: int, out: dict) -> None:
    """Stop this child once its RSS passes `limit_kib`: print its result so far, marked, and exit.
    Polls every 10 ms (torch ops release the GIL; touching memory takes time): stops within ~10 MiB."""
    started = time.perf_counter()

    def watch() -> None:
        while kib("VmRSS") < limit_kib:
            time.sleep(0.01)
        out.update(error=f"stopped at the memory guard ({(limit_kib - before_kib) / 1024:,.0f} MiB to spare)",
                   extra_mib=(kib("VmHWM") - before_kib) / 1024, seconds=time.perf_counter() - started)
        print(json.dumps(out), flush=True)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def child(args: argparse.Namespace) -> dict:
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    if args.threads:
        torch.set_num_threads(args.threads)
    run = prepare(args.child, args, device, dtype)
    gc.collect()
    out: dict = {"phase": args.child}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out["base_mib"] = before / 2**20
    else:
        before = _reset_peak_rss()
        out["base_mib"], out["slack_mib"] = kib("VmRSS") / 1024, (before - kib("VmRSS")) / 1024
        _rss_guard(before + kib("MemAvailable", "/proc/meminfo") - int(args.reserve_gib * 2**20), before, out)
    started = time.perf_counter()
    try:
        out.update(run())
    except torch.OutOfMemoryError as e:  # CUDA: reported like the CPU guard's stop
        out["error"] = f"out of memory: {str(e).splitlines()[0][:100]}"
    out["seconds"] = time.perf_counter() - started
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        out["extra_mib"] = (torch.cuda.max_memory_allocated(device) - before) / 2**20
    else:
        out["extra_mib"] = (kib("VmHWM") - before) / 1024
    return out
