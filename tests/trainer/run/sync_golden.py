"""The synchronous loop's numbers, recorded before the asynchronous pipeline was built, so that
`max_staleness = 0` is proved to stay today's loop exactly (issue 55's acceptance: rewards, losses and
adapter weights within 1e-6 over three steps, on the hf backend and on vLLM's CPU engine).

`python -m tests.trainer.run.sync_golden hf|vllm MODEL_CACHE` records a backend's numbers into
`golden/sync_<backend>.json`. Float sums depend on the CPU's vector unit, so each file names the one it
was recorded on and the test compares only on a machine with the same one.

The adapter is summarised per tensor (its sum, its norm and its dot product with a fixed random sign
vector). Weights within 1e-6 of the recorded ones keep the sum and the dot product within n * 1e-6 of
theirs and the norm within sqrt(n) * 1e-6 (n: the tensor's size), which is what the comparison allows:
float sums in another order (another CPU of the same vector unit) move them by far less, a weight
moved by more than that moves them by more.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).parent / "golden"
WEIGHT_TOLERANCE = 1e-6  # per weight (issue 55's acceptance)


def cpu_capability() -> str:
    import torch

    return torch.backends.cpu.get_cpu_capability()


def golden_config(backend: str):
    from trainer.config import SMOLLM2_MODEL, RunConfig

    if backend == "vllm":
        from trainer.programs.toy_format import ToyFormat

        return RunConfig(program="toy_format", model=SMOLLM2_MODEL, backend="vllm",
                         rewards=list(ToyFormat.default_rewards), steps=3, examples_per_step=2, group_size=4,
                         rollouts_per_example=4, max_new_tokens=12, temperature=1.0, learning_rate=2e-4,
                         micro_batch_size=8, eval_every=0, checkpoint_every=0, seed=3)
    from trainer.programs.toy import ToyEcho

    return RunConfig(**{**ToyEcho.suggested_config, "steps": 3, "group_size": 4, "rollouts_per_example": 4,
                        "eval_every": 0, "checkpoint_every": 0, "seed": 3})


def adapter_summary(updater) -> dict[str, list[float]]:
    from peft import get_peft_model_state_dict

    out = {}
    for name, tensor in sorted(get_peft_model_state_dict(updater.model).items()):
        values = tensor.detach().double().cpu().numpy().ravel()
        signs = np.random.default_rng(len(values)).choice([-1.0, 1.0], size=len(values))
        out[name] = [float(values.sum()), float(np.linalg.norm(values)), float(values @ signs)]
    return out


def numbers_of(events: list[dict], updater) -> dict:
    """A run's per-step rewards and losses and its final adapter, as the golden files keep them."""
    from peft import get_peft_model_state_dict

    return {"cpu": cpu_capability(),
            "steps": [{"reward/mean": e["metrics"]["reward/mean"], "loss": e["metrics"]["loss"]} for e in events],
            "adapter": adapter_summary(updater),
            "sizes": {name: t.numel() for name, t in get_peft_model_state_dict(updater.model).items()}}


def run_numbers(backend: str, run_dir: Path, model_cache: Path, **changes) -> dict:
    """Three steps of the golden config; its per-step rewards and losses and the final adapter."""
    import dataclasses

    from tests.trainer.run.test_loop import ListReporter
    from trainer.run.loop import Trainer

    config = dataclasses.replace(golden_config(backend), **changes)
    reporter = ListReporter()
    trainer = Trainer(config, run_dir, reporter, model_cache_dir=model_cache)
    try:
        assert trainer.run() == "succeeded"
        return numbers_of(reporter.events, trainer.parts.updater)
    finally:
        trainer.close()


def assert_matches_golden(numbers: dict, backend: str) -> None:
    """`run_numbers` of a backend equal its recorded numbers (skipped on another vector unit)."""
    import pytest

    golden = json.loads((GOLDEN / f"sync_{backend}.json").read_text())
    if golden["cpu"] != numbers["cpu"]:
        pytest.skip(f"the golden numbers were recorded on an {golden['cpu']} CPU, this one is {numbers['cpu']}: "
                    "float sums differ between vector units")
    assert len(numbers["steps"]) == len(golden["steps"]) == 3
    for step, expected in zip(numbers["steps"], golden["steps"], strict=True):
        for key in ("reward/mean", "loss"):
            assert step[key] == pytest.approx(expected[key], rel=1e-6, abs=1e-6), key
    assert set(numbers["adapter"]) == set(golden["adapter"])
    for name, (total, norm, signed) in golden["adapter"].items():
        n, (got_total, got_norm, got_signed) = numbers["sizes"][name], numbers["adapter"][name]
        assert abs(got_total - total) <= n * WEIGHT_TOLERANCE, name
        assert abs(got_norm - norm) <= n ** 0.5 * WEIGHT_TOLERANCE, name
        assert abs(got_signed - signed) <= n * WEIGHT_TOLERANCE, name


def main(argv: list[str]) -> int:
    import tempfile

    import torch

    backend, cache = argv
    torch.manual_seed(0)
    torch.set_num_threads(1)  # as the tests' torch_setup fixture
    with tempfile.TemporaryDirectory() as tmp:
        numbers = run_numbers(backend, Path(tmp) / "run", Path(cache))
    GOLDEN.mkdir(exist_ok=True)
    (GOLDEN / f"sync_{backend}.json").write_text(json.dumps(numbers, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
