"""A replay of one module of a stored trajectory, on the run's own policy: the run's program, its
reward functions and scorer (`trainer.algorithms.scoring.BatchScorer`, what the loop scores every
step with), its base model with the LoRA adapter that sampled that step (or the newest one kept),
sampled by the transformers backend. `trainer.rollouts.replay.replay_call` does the fork (MHGPO
Algorithm 2 at one call).

The worker runs it in a subprocess, never inside the forked Celery worker (as it does training):
`python -m trainer.run.replay --request request.json --output result.json`. The request names the
run's config (data files exported), its folder, the call and G; the output is the result JSON the
web app stores, or `{"error": ...}` with words a reader can act on.

`choose_adapter` only looks at files (no torch), so the web app's confirm page can say which adapter
a replay would use, or that none is left.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainer.policy.adapter_files import FINAL_ADAPTER_DIR

# trainer.run.checkpoint's folder names (that module imports torch; this part must not).
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_MARKER = "COMPLETE"


class ReplayRefused(ValueError):
    """The replay cannot run: no adapter left, the example is not in the run's data, a teacher's
    rollout. The message says why."""


@dataclass(frozen=True)
class AdapterChoice:
    """Which LoRA adapter a replay samples with. `kind`: "initial" (the adapter the run started with,
    which sampled its first step), "checkpoint" (a kept checkpoint's) or "final" (the trained adapter
    of a finished run); `step`: the updates it had; `exact`: it is the one that sampled the stored
    trajectory. Example: `AdapterChoice("checkpoint", 4, "/runs/run-1/checkpoints/step-000004", True)`."""

    kind: str
    step: int
    path: str | None
    exact: bool

    def describe(self) -> str:
        """Words for the confirm page and the result."""
        if self.kind == "initial":
            return "the run's initial adapter (step 0), which sampled this step"
        where = f"the checkpoint of step {self.step}" if self.kind == "checkpoint" else \
            f"the run's final adapter (step {self.step})"
        return f"{where}, which sampled this step" if self.exact else \
            f"{where}, the newest kept (the adapter that sampled this step is no longer kept)"


def _complete_checkpoints(run_dir: Path) -> dict[int, Path]:
    root = run_dir / CHECKPOINTS_DIR
    if not root.is_dir():
        return {}
    found = {}
    for path in root.glob("step-*"):
        try:
            step = int(path.name.removeprefix("step-"))
        except ValueError:
            continue
        if (path / CHECKPOINT_MARKER).is_file() and (path / "policy.pt").is_file():
            found[step] = path
    return found


def choose_adapter(run_dir: str | os.PathLike[str], version: int, *, final_step: int | None = None) -> AdapterChoice | None:
    """The adapter to replay a trajectory sampled by policy version `version` (the updates its
    sampler had had: step - 1 for a run without a sampler process) with: that version's, else the
    newest checkpoint, else the final adapter (`final_step`: the run's last step); None when none of
    them is on disk.

    >>> choose_adapter("/nonexistent", 0).describe()
    "the run's initial adapter (step 0), which sampled this step"
    >>> choose_adapter("/nonexistent", 3) is None
    True
    """
    if version == 0:
        return AdapterChoice("initial", 0, None, True)
    run_dir = Path(run_dir)
    checkpoints = _complete_checkpoints(run_dir)
    if version in checkpoints:
        return AdapterChoice("checkpoint", version, str(checkpoints[version]), True)
    if checkpoints:
        newest = max(checkpoints)
        return AdapterChoice("checkpoint", newest, str(checkpoints[newest]), False)
    final = run_dir / FINAL_ADAPTER_DIR
    if (final / "adapter_config.json").is_file() and (final / "adapter_model.safetensors").is_file():
        step = final_step if final_step is not None else -1
        return AdapterChoice("final", step, str(final), step == version)
    return None


def _load_adapter(model: Any, choice: AdapterChoice) -> None:
    import torch
    from peft import set_peft_model_state_dict

    if choice.kind == "initial":
        return  # the run's seeded LoRA init: B = 0, what sampled its first step
    if choice.kind == "checkpoint":
        state = torch.load(Path(choice.path) / "policy.pt", weights_only=False, map_location="cpu")
        if state.get("sharded"):
            raise ReplayRefused("this checkpoint was saved with sharded weights; a replay loads one process's "
                                "adapter only")
        weights = state["adapter"]
    else:
        from safetensors.torch import load_file

        weights = load_file(str(Path(choice.path) / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(model, weights)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ReplayRefused(f"the adapter does not fit the run's model: unexpected keys {unexpected[:3]}")


def find_example(examples: list[dict], example_id: str) -> dict:
    """The example whose `id` is `example_id` (the ids the loop stores: `trainer.data.example_id`)."""
    for example in examples:
        if str(example.get("id")) == example_id:
            return example
    raise ReplayRefused(f"example {example_id!r} is not among the run's training examples (an example "
                        "without an 'id' field is named by its place in a batch, which a replay cannot find)")


def spread(values: list[float | None]) -> dict[str, float | None]:
    """mean, std (population, as GRPO's group std), min and max of the known values.

    >>> spread([1.0, 0.0, None])
    {'mean': 0.5, 'std': 0.5, 'min': 0.0, 'max': 1.0, 'n': 2}
    """
    known = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not known:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    mean = sum(known) / len(known)
    std = math.sqrt(sum((v - mean) ** 2 for v in known) / len(known))
    return {"mean": mean, "std": std, "min": min(known), "max": max(known), "n": len(known)}


def replay(request: dict[str, Any]) -> dict[str, Any]:
    """Runs one replay request (see the module docstring) and returns the result JSON."""
    from trainer.algorithms.scoring import BatchScorer
    from trainer.config import RunConfig
    from trainer.models.paths import resolve_model_path
    from trainer.programs import get_program
    from trainer.rewards import get_reward
    from trainer.rollouts.prompts import FormattedProgram, resolve_prompt_format
    from trainer.rollouts.replay import RecordedCall, replay_call
    from trainer.run.compose import hf_backend, program_options, run_policy_model
    from trainer.run.setup import load_examples, resolve_device

    config = RunConfig.from_dict(request["config"])
    choice = choose_adapter(request["run_dir"], int(request["version"]), final_step=request.get("final_step"))
    if choice is None:
        raise ReplayRefused("the run's adapter is gone: no checkpoint and no final adapter is left in its folder")
    program = get_program(config.program, **program_options(config))
    reward_fns = {spec.name: get_reward(spec.name, **spec.params) for spec in config.rewards}
    scorer = BatchScorer(config, reward_fns, program.agents)
    train, _ = load_examples(config, program)
    example_id = str(request["example_id"])
    example = find_example(train, example_id)
    if hasattr(program, "observe_examples"):
        program.observe_examples(train)
    started = time.perf_counter()
    device = resolve_device(config)
    model_path = resolve_model_path(config, program, request.get("model_cache_dir"))
    model, tokenizer = run_policy_model(config, model_path, device, gradient_checkpointing=False)
    _load_adapter(model, choice)
    model.eval()
    formatted = FormattedProgram(program, tokenizer, resolve_prompt_format(tokenizer, config.prompt_format))
    backend = hf_backend(config, model, tokenizer)
    loaded = time.perf_counter()
    counter, tokens = iter(range(1_000_000)), [0]

    def generate(agent: str, prompts: list) -> list[str]:
        seed = (int(request.get("seed", 0)) * 1_000_003 + next(counter)) % (2**31)
        samples = backend.generate(list(prompts), 1, temperature=config.temperature, top_p=config.top_p,
                                   top_k=config.top_k or None, max_new_tokens=config.max_new_tokens, seed=seed)
        tokens[0] += sum(len(s.token_ids) for (s,) in samples)
        return [s.text for (s,) in samples]

    recorded = [RecordedCall(c["module"], c["prompt"], c["completion"]) for c in request["calls"]]
    position = int(request["position"])
    trajectories = replay_call(formatted, example, recorded, position, group_size=int(request["group_size"]),
                               generate=generate, example_id=example_id)
    scored = scorer.score(trajectories, {example_id: example})
    sampled = time.perf_counter()
    alternatives = [{
        "calls": [{"position": position + i, **_call_json(c)} for i, c in enumerate(t.calls[position:])],
        "rewards": {k: _num(v) for k, v in t.rewards.items()}, "total_reward": _num(t.reward),
        "failed": t.failed, "error": t.error, "final_output": _jsonable(t.final_output)} for t in scored]
    sample_s = sampled - loaded
    return {
        "adapter": {**asdict(choice), "description": choice.describe()}, "model": config.model,
        "module": recorded[position].module, "position": position, "group_size": int(request["group_size"]),
        "prefix": [{"position": i, "module": c.module, "completion": c.completion} for i, c in enumerate(recorded[:position])],
        "alternatives": alternatives, "spread": spread([a["total_reward"] for a in alternatives]),
        "generations": sum(len(a["calls"]) for a in alternatives),
        "tokens": tokens[0], "load_s": loaded - started, "sample_s": sample_s,
        "tokens_per_s": tokens[0] / sample_s if sample_s > 0 else None, "device": str(device),
    }


def _num(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None


def _jsonable(value: Any) -> Any:
    from trainer.rollouts.trajectory import jsonable

    return jsonable(value)


def _call_json(call: Any) -> dict[str, Any]:
    return {"module": call.module, "invocation_index": call.invocation_index, "completion": call.completion,
            "parsed_ok": call.parsed_ok, "parsed": _jsonable(call.parsed)}


def main(argv: list[str] | None = None) -> int:
    """The worker's entry point: the result, or the error's words, into `--output`; exit 0 either way
    unless the output cannot be written (a crash is then the worker's to report)."""
    parser = argparse.ArgumentParser(prog="python -m trainer.run.replay")
    parser.add_argument("--request", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    request = json.loads(Path(args.request).read_text())
    try:
        out = replay(request)
    except ValueError as exc:  # ReplayRefused, ReplayMismatch, a bad config: words for the page
        out = {"error": str(exc)}
    except Exception as exc:  # anything else: still words, with its type
        out = {"error": f"{type(exc).__name__}: {exc}"}
    tmp = Path(args.output).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, allow_nan=False))
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
