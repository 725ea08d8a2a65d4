"""What a policy updater saves and restores: the snapshot an exact resume needs (adapter, AdamW
moments, scheduler, counters) and the adapter in PEFT's format, for vLLM each step and for whoever uses
the trained model after the run. `PolicyUpdater` (trainer/policy/updater.py) inherits it."""

from __future__ import annotations

import copy
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from peft import get_peft_model_state_dict, set_peft_model_state_dict
from torch import Tensor

from trainer.policy.adapter_files import name_base_model, write_folder_atomically
from trainer.policy.sharding import full_state, load_full_state


class PolicyPersistence:
    """Saving and restoring of a `PolicyUpdater`: reads its model, optimizer, scheduler, config,
    counters and `sharded` flag."""

    def state_dict(self) -> dict[str, Any]:
        """A snapshot (deep copy, CPU tensors) of everything an exact resume needs.

        Adapter weights, AdamW moments, scheduler position, update counters and the config. The RNG
        is not needed: each update seeds its own dropout stream from (config.seed, update index).
        """
        if self.sharded:  # gathered into full tensors by every rank together
            adapter, optimizer = full_state(self.model, self.optimizer)
        else:
            adapter = {
                k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(self.model).items()
            }
            # Copy: AdamW updates its moment tensors in place, which would silently change a snapshot.
            optimizer = _to_cpu(copy.deepcopy(self.optimizer.state_dict()))
        return {
            "adapter": adapter,
            "optimizer": optimizer,
            "sharded": self.sharded,
            "scheduler": copy.deepcopy(self.scheduler.state_dict()),
            "updates": self.updates,
            "optimizer_steps": self.optimizer_steps,
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()` snapshot into this updater (same model architecture and LoRA setup)."""
        if bool(state.get("sharded")) != self.sharded:
            raise ValueError("this checkpoint was saved with another sharding; resume it with the sharding it "
                             "was trained with")
        if self.sharded:
            load_full_state(self.model, self.optimizer, state["adapter"], state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.updates, self.optimizer_steps = int(state["updates"]), int(state["optimizer_steps"])
            return
        result = set_peft_model_state_dict(self.model, state["adapter"])
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ValueError(f"adapter state does not fit this model: unexpected keys {unexpected[:5]}")
        # Optimizer.load_state_dict casts the moments to each parameter's device and dtype.
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.updates = int(state["updates"])
        self.optimizer_steps = int(state["optimizer_steps"])

    def save_final_adapter(self, path: str | os.PathLike[str], *, write: bool, base_model: str,
                           readme: str) -> Path | None:
        """The trained adapter in PEFT's format, for use beyond this run: adapter_config.json names
        `base_model` (the run's model id) instead of the folder the weights were loaded from, which
        exists on no other machine, and `readme` (README.md) says how to get that model there. With
        sharded weights every rank must call it (the gather is collective); the one with `write` writes."""
        save = self._gathered_save() if self.sharded else self.model.save_pretrained
        if not write:
            return None

        def fill(folder: Path) -> None:
            save(folder)
            name_base_model(folder, base_model, readme)

        return write_folder_atomically(path, fill)

    def _gathered_save(self):
        """PEFT's own save reads each weight's storage, which a sharded model's parameters do not have:
        gathers them first and returns what writes PEFT's two files."""
        from peft.utils import get_peft_model_state_dict
        from safetensors.torch import save_file

        from trainer.policy.sharding import full_adapter

        weights = get_peft_model_state_dict(self.model, state_dict=full_adapter(self.model))

        def write_gathered(folder: Path) -> None:
            save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "adapter_model.safetensors"))
            self.model.peft_config["default"].save_pretrained(str(folder))

        return write_gathered

    def save_adapter(self, path: str | os.PathLike[str]) -> Path:
        """Write the adapter (PEFT format, what vLLM's LoRARequest loads) atomically into `path`."""
        return write_folder_atomically(path, self.model.save_pretrained)


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.to("cpu")
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    return obj
