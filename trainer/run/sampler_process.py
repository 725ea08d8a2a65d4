"""The sampler as a process of its own: it generates a run's batches while the trainer updates
(`max_staleness >= 1`, docs/explanation/the-asynchronous-pipeline.md).

The trainer sends it, in one ordered inbox, the adapters it saves (`("adapter", version, path)`: only
the LoRA weights travel, never the base model) and the batches to sample (`SamplerJob`). Before each
batch the sampler takes the newest adapter it has been sent and samples with it; the batch comes back
as a `SampledBatch` that names that policy version. The sampler holds its own copy of the base model
in its own engine (the hf backend on a PEFT model, or vLLM), on its own cores or GPUs.

A sampler that dies (`kill -9`, the OOM killer) is noticed at the end of its socket, never by a
timeout: `receive` raises `SamplerDied` saying how it ended. The sampler dies with the trainer too
(PR_SET_PDEATHSIG), so no engine outlives a killed run.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import cloudpickle

SAMPLER_PID_FILE = "sampler.pid"  # in the run folder while the sampler process lives


class SamplerDied(RuntimeError):
    """The sampler process ended without being asked to."""


@dataclass(frozen=True)
class SamplerJob:
    """One batch to sample: its number (which seeds its sampling, and is the step that trains it when
    no batch is dropped), its examples and their ids."""

    index: int
    examples: list[dict]
    ids: list[str]


@dataclass
class SampledBatch:
    """A sampled batch: its rollouts (not yet scored), each call's sample (token ids and log-probs), the
    policy version that sampled it, and the wall-clock times the sampler generated it between."""

    index: int
    trajectories: list[Any]
    samples: dict[tuple[str, str], Any]
    policy_version: int
    start: float
    end: float
    adapter_loads: list[dict] = field(default_factory=list)  # {"version", "start", "end"} before this batch


@dataclass(frozen=True)
class SamplerPlacement:
    """Where the sampler runs: its CPU cores (None: wherever the scheduler puts it), the
    CUDA_VISIBLE_DEVICES it sees (None: the trainer's) and the torch device it samples on."""

    cores: tuple[int, ...] | None
    cuda_visible_devices: str | None
    device: str


@dataclass(frozen=True)
class SamplerSpec:
    """What the sampler process builds itself from (pickled to it at its start)."""

    # The run's config itself, not its dict: rebuilding it would check its rewards against this process's
    # registry, which lacks a reward the user's script registered (the sampler scores nothing).
    config: Any
    model_path: str
    program: Any  # the AgentProgram (prompts already optimized, examples already observed)
    teachers: dict[str, Any]
    prompt_format: str
    placement: SamplerPlacement
    run_dir: str


def send(conn: Connection, message: tuple) -> None:
    """cloudpickle both ways: a DSPy program's signatures, in the program and in its rollouts' outputs,
    are classes made at run time that pickle cannot name."""
    conn.send_bytes(cloudpickle.dumps(message))


def receive(conn: Connection) -> tuple:
    return pickle.loads(conn.recv_bytes())


class SamplerProcess:
    """The trainer's handle on its sampler process: `python -m trainer.run.sampler_process FD`, one
    socket between the two (a spawned multiprocessing child would import the trainer's `__main__`
    again, which a user's script or notebook cannot be asked to guard)."""

    def __init__(self, spec: SamplerSpec):
        self.spec = spec
        self._process: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._received: queue.Queue = queue.Queue()
        self._pump: threading.Thread | None = None
        self.busy: deque[tuple[float, float | None]] = deque(maxlen=64)  # (start, end) of each batch it sampled
        self.closing = False

    def start(self) -> None:
        """Starts the process and returns once it is ready to sample (its model is loaded)."""
        mine, theirs = socket.socketpair()
        self._process = subprocess.Popen([sys.executable, "-m", "trainer.run.sampler_process", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),))
        theirs.close()
        self._conn = Connection(mine.detach())
        Path(self.spec.run_dir).mkdir(parents=True, exist_ok=True)
        Path(self.spec.run_dir, SAMPLER_PID_FILE).write_text(str(self._process.pid))
        self._pump = threading.Thread(target=self._pump_messages, name="cohort-sampler-pump", daemon=True)
        self._pump.start()
        # the trainer's import path first: a plugin's or a test's program class must unpickle there
        self._send(("spec", list(sys.path), cloudpickle.dumps(self.spec)))
        kind, payload = self._next()
        if kind != "ready":
            raise SamplerDied(f"the sampler process did not start: {payload}")

    def publish(self, path: str | Path, version: int) -> None:
        """Hands the sampler the adapter of policy version `version` (a folder of `save_adapter`)."""
        self._send(("adapter", version, str(path)))

    def submit(self, job: SamplerJob) -> None:
        self._send(("job", job))

    def _send(self, message: tuple) -> None:
        try:
            with self._send_lock:
                send(self._conn, message)
        except OSError:
            pass  # it died: `receive` says how, from the pump

    def receive(self) -> SampledBatch:
        """The next sampled batch, in the order they were submitted; waits as long as the sampler lives."""
        while True:
            kind, payload = self._next()
            if kind == "batch":
                return payload
            raise SamplerDied(payload)

    def _next(self) -> tuple[str, Any]:
        return self._received.get()  # the pump always posts how the process ended, so this never hangs

    def _pump_messages(self) -> None:
        """Moves the sampler's messages into `_received` as they come (so its sends never block on the
        trainer's update); at the end of the socket (the process ended), posts how it ended."""
        while True:
            try:
                message = receive(self._conn)
            except (EOFError, OSError):
                break
            except Exception as exc:  # noqa: BLE001 - a message that does not unpickle: end, and say why
                self._received.put(("error", f"the sampler process sent what the trainer cannot read: {exc}"))
                self._process.kill()
                break
            if message[0] == "started":
                self.busy.append((message[1], None))
                continue
            if message[0] == "batch" and self.busy and self.busy[-1][1] is None:
                self.busy[-1] = (message[1].start, message[1].end)
            self._received.put(message)
        self._process.wait()
        self._received.put(("died", self._describe_end()))

    def _describe_end(self) -> str:
        code = self._process.returncode
        if self.closing:
            return "the sampler process was stopped"
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            return (f"the sampler process (pid {self._process.pid}) was killed by {name}; the run stops here, "
                    "and resuming it continues from its last checkpoint")
        return f"the sampler process (pid {self._process.pid}) exited with code {code}"

    def sampler_busy_s(self, start: float, end: float) -> float:
        """Seconds within [start, end] the sampler spent generating (a batch still in generation counts
        until `end`)."""
        total = 0.0
        for busy_start, busy_end in list(self.busy):
            total += max(0.0, min(end, busy_end if busy_end is not None else end) - max(start, busy_start))
        return total

    def close(self) -> None:
        """Stops the process: at once if it is idle, by SIGTERM then SIGKILL if it is sampling a batch
        nobody will train."""
        self.closing = True
        process = self._process
        if process is not None:
            if process.poll() is None:
                self._send(("stop",))
            for stop in (None, process.terminate, process.kill):
                if stop is not None and process.poll() is None:
                    stop()
                try:
                    process.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._pump is not None:
            self._pump.join(timeout=10)
        if self._conn is not None:
            self._conn.close()
        Path(self.spec.run_dir, SAMPLER_PID_FILE).unlink(missing_ok=True)


# --- the sampler process ----------------------------------------------------------------------------
def sampler_main(fd: int) -> int:
    """The sampler process: reads its spec, builds its engine, says it is ready, then samples what it
    is sent until it is told to stop or its trainer goes."""
    _die_with_parent()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so `finally` closes vLLM's engine process
    conn = Connection(fd)
    sampler = None
    try:
        _, path, pickled = receive(conn)
        sys.path[:] = [*path, *(entry for entry in sys.path if entry not in path)]
        spec = cloudpickle.loads(pickled)
        _place(spec.placement)
        sampler = _Sampler(spec)
        send(conn, ("ready", os.getpid()))
        sampler.serve(conn)
    except EOFError:
        return 0  # the trainer went
    except Exception as exc:  # noqa: BLE001 - the trainer must be told before this exits
        try:
            send(conn, ("error", f"the sampler process failed: {exc.__class__.__name__}: {exc}\n"
                                f"{traceback.format_exc(limit=8)}"))
        except OSError:
            pass
        return 1
    finally:
        if sampler is not None:
            sampler.close()
    return 0


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _place(placement: SamplerPlacement) -> None:
    """Pins the process (and the engine it starts) to its cores before torch or vLLM read them."""
    if placement.cuda_visible_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = placement.cuda_visible_devices
    if placement.cores:
        os.sched_setaffinity(0, placement.cores)
        # vLLM's CPU engine binds its OpenMP threads itself; give it exactly these cores
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, placement.cores))
        import torch

        torch.set_num_threads(len(placement.cores))


class _Sampler:
    """Inside the sampler process: the program, its engine and the newest adapter it was sent."""

    def __init__(self, spec: SamplerSpec):
        import torch

        from trainer.policy.distributed import SINGLE
        from trainer.rollouts.prompts import FormattedProgram
        from trainer.run.compose import sampler_backend
        from trainer.run.rollouts import StepSampler

        self.config = spec.config
        torch.manual_seed(self.config.seed)
        self.backend, tokenizer = sampler_backend(self.config, spec.model_path, torch.device(spec.placement.device))
        self.program = FormattedProgram(spec.program, tokenizer, spec.prompt_format)
        self.teachers = {name: FormattedProgram(t, tokenizer, spec.prompt_format) for name, t in spec.teachers.items()}
        self.steps = StepSampler(self.config, self.backend, SINGLE)
        self.version = 0  # the adapter's initial weights: LoRA's B is zero, so the base model
        self._pending: tuple[int, str] | None = None
        self._loads: list[dict] = []

    def serve(self, conn: Connection) -> None:
        jobs: deque[SamplerJob] = deque()
        while True:
            messages = [receive(conn)] if not jobs else []
            while conn.poll():  # everything already sent: a newer adapter may be among it
                messages.append(receive(conn))
            for message in messages:
                if message[0] == "stop":
                    return
                if message[0] == "adapter":
                    self._pending = (message[1], message[2])
                else:
                    jobs.append(message[1])
            if jobs:
                self._load_newest()
                send(conn, ("started", time.time()))
                send(conn, ("batch", self._sample(jobs.popleft())))

    def _load_newest(self) -> None:
        if self._pending is None:
            return
        version, path = self._pending
        self._pending = None
        start = time.time()
        self.backend.update_adapter(path, version=version)
        self.version = version
        self._loads.append({"version": version, "start": start, "end": time.time()})

    def _sample(self, job: SamplerJob) -> SampledBatch:
        self.steps.samples.clear()
        start = time.time()
        trajectories = self.steps.rollouts(self.program, self.teachers, job.examples, job.ids, job.index)
        self.steps.finish()
        for trajectory in trajectories:
            trajectory.policy_version = self.version
        loads, self._loads = self._loads, []
        return SampledBatch(job.index, trajectories, dict(self.steps.samples), self.version, start, time.time(), loads)

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()


if __name__ == "__main__":
    # through the module's own name, so that what it pickles names trainer.run.sampler_process, not __main__
    from trainer.run import sampler_process

    sys.exit(sampler_process.sampler_main(int(sys.argv[1])))
