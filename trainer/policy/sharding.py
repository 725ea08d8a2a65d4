"""`sharding = "fsdp"`: the base weights sharded across a run's processes with FSDP2 (`fully_shard`).

Each decoder layer, then the whole model, becomes an FSDP unit over a one-dimensional mesh of the
run's processes (one process is a mesh of one: the same code path, which a one-GPU device can check).
The LoRA adapter lives inside the layers and is sharded with them; its gradients are reduce-scattered
as sums (divide factor 1), because the loss is already normalized over the whole batch
(`PolicyUpdater`), so the optimizer sees the gradient of the whole batch, as under "ddp".

Under FSDP every forward pass is collective (each layer all-gathers its weights), so the ranks must run
the same number of forward passes. Three places make sure of it:

- sampling: `Lockstep` is a vote before every `generate` call of the HF backend; a rank that has
  sampled all it needs keeps joining with a one-token dummy generation until every rank is done, and
  `generate(synced_gpus=True)` keeps ranks stepping together inside a call of different lengths;
- the update: every rank runs the largest number of micro-batches any rank has, padding with batches
  whose completion mask is all zero (they add nothing to the loss or the statistics);
- checkpoints: every rank joins `torch.distributed.checkpoint.state_dict`, which gathers the adapter and
  the optimizer state into full tensors; rank 0 writes them.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.policy import distributed
from trainer.policy.distributed import Ranks


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The transformer blocks: the largest ModuleList of the model (Llama, Qwen, Mistral: `layers`)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        raise ValueError("sharding 'fsdp' needs a model with its transformer blocks in a ModuleList")
    return max(lists, key=len)


def shard_base_weights(model: torch.nn.Module, ranks: Ranks, device: torch.device) -> None:
    """Applies `fully_shard` to each decoder layer and to the whole model, in place."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (ranks.world,))
    dtypes = {p.dtype for p in model.parameters()}
    # PEFT keeps the adapter in float32 beside bfloat16 base weights; an FSDP unit gathers one dtype, so
    # compute in the base weights' dtype (the float32 shards stay the optimizer's master copy).
    base_dtype = next(p.dtype for p in model.parameters() if not p.requires_grad)
    policy = MixedPrecisionPolicy(param_dtype=base_dtype if len(dtypes) > 1 else None, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # a sum: the loss is normalized over the whole batch
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no pre-scaled sum)


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


class Lockstep:
    """Keeps the ranks' collective forward passes paired while each samples its own shard."""

    def __init__(self, ranks: Ranks):
        self.ranks = ranks

    def vote(self, active: bool) -> bool:
        """Whether any rank is about to generate (every rank must call this the same number of times)."""
        return distributed.max_float(1.0 if active else 0.0, self.ranks) > 0

    def drain(self, idle_generate) -> None:
        """Called by a rank that is done sampling: joins the others' generate calls until all are done."""
        while self.vote(False):
            idle_generate()


def pad_micro_batches(micro: list[Any], ranks: Ranks, dummy) -> list[Any]:
    """`micro` padded with `dummy()` batches to the largest count any rank has."""
    most = int(distributed.max_float(float(len(micro)), ranks))
    return micro + [dummy() for _ in range(most - len(micro))]


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(adapter, optimizer state) as full CPU tensors, keyed by parameter names; collective."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    return (get_model_state_dict(model, options=options),
            get_optimizer_state_dict(model, optimizer, options=options))


def full_adapter(model: torch.nn.Module) -> dict:
    """The trainable (LoRA) weights as full CPU tensors, keyed by parameter names; collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True,
                                                                ignore_frozen_params=True))


def load_full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, adapter: dict, optim: dict) -> None:
    """Shards a `full_state` back into the model and optimizer; collective."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, strict=False)
    set_model_state_dict(model, adapter, options=options)
    set_optimizer_state_dict(model, optimizer, optim, options=options)
