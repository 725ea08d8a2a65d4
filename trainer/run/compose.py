"""The composition root: every part of a run, built from its `RunConfig` in one place.

`build_run` is the only code that turns settings into objects: the program (and its teachers), the
reward functions and the scorer, the examples, the device and process group, the LoRA policy model,
the updater, the sampling backend and the step gate. The loop (`trainer.run.loop`) receives the
parts and only trains them; a test or a benchmark can build parts of its own and hand them over.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.algorithms.scoring import BatchScorer
from trainer.config import ConfigError, RunConfig
from trainer.data import ExampleStream
from trainer.models.paths import resolve_model_path
from trainer.policy import distributed
from trainer.policy.distributed import SINGLE, Ranks
from trainer.policy.lora import load_policy_model, lora_parameters
from trainer.policy.sharding import Lockstep, shard_base_weights
from trainer.policy.update_config import UpdateConfig
from trainer.policy.updater import PolicyUpdater
from trainer.programs import get_program
from trainer.rewards import get_reward
from trainer.rollouts.prompts import FormattedProgram, resolve_prompt_format
from trainer.run.gate import StepGate
from trainer.run.setup import load_examples, resolve_device, resolve_dtype, resolve_gradient_checkpointing
from trainer.run.telemetry import SystemSampler


@dataclass
class RunParts:
    """What a run trains with. `program` and `teachers` render prompts for `tokenizer`."""

    config: RunConfig
    ranks: Ranks
    program: FormattedProgram
    teachers: dict[str, FormattedProgram]
    reward_fns: dict[str, Any]
    scorer: BatchScorer
    stream: ExampleStream
    dev_examples: list[dict]
    device: torch.device
    system: SystemSampler
    model: Any
    tokenizer: Any
    prompt_format: str
    updater: PolicyUpdater
    backend: Any  # the trainer's own sampler: the training batches' unless a sampler process has them
    gate: StepGate
    model_path: str = ""


def build_run(config: RunConfig, *, ranks: Ranks = SINGLE, model_cache_dir: str | Path | None = None,
              program: Any = None) -> RunParts:
    """The parts of a run of `config` on this machine, in the order they depend on each other.

    `program`: an `AgentProgram` instance to train instead of the registered `config.program`
    (cohort.dspy trains the DSPy program it was handed; `config.program` then only names it).
    Raises `ConfigError` naming the field when the config does not fit the program or the machine.
    """
    options = program_options(config)
    program = program if program is not None else get_program(config.program, **options)
    check_program(config, program, ranks)
    reward_fns = {spec.name: get_reward(spec.name, **spec.params) for spec in config.rewards}
    teachers = {name: get_program(name, **options) for name in config.teacher_rollouts}
    check_teachers(teachers, program)
    scorer = BatchScorer(config, reward_fns, program.agents, {name: t.agents for name, t in teachers.items()})
    train, dev = load_examples(config, program)
    if hasattr(program, "observe_examples"):
        program.observe_examples(train)  # e.g. the classifier's label set

    device = resolve_device(config, ranks)
    distributed.init(ranks, device, alone=config.sharding == "fsdp")
    system = SystemSampler(device)  # system/* metrics of every step
    with distributed.main_first(ranks):  # one rank builds or downloads, the others find it in place
        model_path = resolve_model_path(config, program, model_cache_dir)
    model, tokenizer = run_policy_model(config, model_path, device,
                                        gradient_checkpointing=resolve_gradient_checkpointing(config, device))
    if config.sharding == "fsdp":
        distributed.broadcast_parameters(list(lora_parameters(model).values()), ranks)  # one adapter
        shard_base_weights(model.get_base_model(), ranks, device)
    try:
        prompt_format = resolve_prompt_format(tokenizer, config.prompt_format)
    except ValueError as exc:
        raise ConfigError("prompt_format", str(exc)) from None

    updater = PolicyUpdater(model, tokenizer, update_config(config), ranks=ranks)
    backend = make_backend(config, model, tokenizer, model_path, device)
    if config.sharding == "fsdp":
        backend.lockstep = Lockstep(ranks)
    # From here on every prompt is rendered for this tokenizer (chat template or raw text).
    return RunParts(
        config=config, ranks=ranks, program=FormattedProgram(program, tokenizer, prompt_format),
        teachers={name: FormattedProgram(t, tokenizer, prompt_format) for name, t in teachers.items()},
        reward_fns=reward_fns, scorer=scorer, stream=ExampleStream(train, seed=config.seed), dev_examples=dev,
        device=device, system=system, model=model, tokenizer=tokenizer, prompt_format=prompt_format,
        updater=updater, backend=backend, gate=StepGate.from_env(), model_path=str(model_path))


def program_options(config: RunConfig) -> dict[str, Any]:
    options = {"corpus_path": config.corpus_data, "state_path": config.program_state}
    return {k: v for k, v in options.items() if v}


def check_program(config: RunConfig, program: Any, ranks: Ranks) -> None:
    """The settings that only some programs, or only one process, can honour."""
    config.check_program_agents(list(program.agents))
    config.check_prompt_program(optimizes_prompts=getattr(program, "optimizes_prompts", False))
    if config.prompt_optimizer != "none":
        if ranks.distributed:
            raise ConfigError("prompt_optimizer", "optimizing prompts first runs in one process: set "
                              "num_processes to 1, or optimize first and pass the result as program_state.")
    if config.program_state and getattr(program, "state_path", None) != config.program_state:
        raise ConfigError("program_state", f"program {config.program!r} does not load a saved DSPy state; "
                          "leave program_state empty for it.")


def check_teachers(teachers: dict[str, Any], student: Any) -> None:
    """MMGRPO Section 3.2: a teacher shares the student's modules, one for one."""
    for name, teacher in teachers.items():
        if len(teacher.agents) != len(student.agents):
            raise ValueError(f"teacher {name!r} has agents {list(teacher.agents)}, the student "
                             f"{list(student.agents)}: a teacher must have one module per student module.")


def update_config(config: RunConfig) -> UpdateConfig:
    """The policy update's settings (MMGRPO Eq. 1 and 5, GDPO Eq. 3), read from the run's config."""
    c = config
    return UpdateConfig(
        learning_rate=c.learning_rate, weight_decay=c.weight_decay, eps_low=c.clip_eps_low,
        eps_high=c.clip_eps_high, beta=c.kl_beta, aggregation=c.loss_aggregation, temperature=c.temperature,
        micro_batch_size=c.micro_batch_size, gradient_accumulation_steps=c.gradient_accumulation_steps,
        num_iterations=c.ppo_epochs, max_grad_norm=c.max_grad_norm,
        scheduler=c.lr_scheduler, warmup_steps=c.warmup_steps,
        total_steps=c.steps * c.optimizer_steps_per_step(), max_context_length=c.max_context_length, seed=c.seed,
        dr_grpo_max_len=c.max_new_tokens, importance_sampling_correction=c.importance_sampling_correction,
        importance_sampling_cap=c.importance_sampling_cap, sampler_is_policy=c.backend == "hf" and not c.max_staleness,
        token_topk=c.token_topk if c.token_details != "off" else None,
    )


def make_backend(config: RunConfig, model: Any, tokenizer: Any, model_path: str, device: torch.device) -> Any:
    """The trainer's own sampler: the one the config names, the policy model itself (`hf`) or vLLM holding
    its own copy. With a sampler process (`max_staleness >= 1`) the training batches are sampled there,
    and the trainer keeps the policy model itself for the rest (the evaluations, a prompt phase)."""
    if config.backend == "vllm" and not config.max_staleness:
        return vllm_backend(config, tokenizer, model_path, device, model.get_base_model().config)
    return hf_backend(config, model, tokenizer)


def sampler_backend(config: RunConfig, model_path: str, device: torch.device) -> tuple[Any, Any]:
    """(backend, tokenizer) of a sampler process: the engine the config names, on its own copy of the
    base model, with LoRA's initial adapter (policy version 0) until it is sent a trained one."""
    if config.backend == "vllm":
        from transformers import AutoConfig, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        return vllm_backend(config, tokenizer, model_path, device, AutoConfig.from_pretrained(model_path)), tokenizer
    model, tokenizer = run_policy_model(config, model_path, device, gradient_checkpointing=False)
    return hf_backend(config, model, tokenizer), tokenizer


def run_policy_model(config: RunConfig, model_path: str | Path, device: torch.device, *,
                     gradient_checkpointing: bool) -> tuple[Any, Any]:
    """(LoRA-wrapped policy model, tokenizer) as the config sets them up: the trainer's, and the hf sampler
    process's own copy, whose initial adapter (the same seed) is the trainer's policy version 0."""
    c = config
    return load_policy_model(model_path, device=device, dtype=resolve_dtype(c, device),
                             gradient_checkpointing=gradient_checkpointing, r=c.lora_r, alpha=c.lora_alpha,
                             dropout=c.lora_dropout, targets=c.lora_targets, seed=c.seed)


def hf_backend(config: RunConfig, model: Any, tokenizer: Any) -> Any:
    from trainer.backends import get_backend
    from trainer.backends.hf import default_generate_rows

    rows = config.hf_generate_rows or default_generate_rows(model, config.max_new_tokens)
    return get_backend("hf", model=model, tokenizer=tokenizer, batch_size=rows)


def vllm_backend(config: RunConfig, tokenizer: Any, model_path: str, device: torch.device, model_config: Any) -> Any:
    from trainer.backends import get_backend

    c = config
    dtype = str(resolve_dtype(c, device)).removeprefix("torch.")
    try:
        return get_backend("vllm", model_path=model_path, tokenizer=tokenizer, max_lora_rank=c.lora_r,
                           seed=c.seed, dtype=dtype, gpu_memory_utilization=c.vllm_gpu_memory_utilization,
                           max_model_len=engine_max_model_len(c, model_config),
                           enable_sleep_mode=c.vllm_enable_sleep_mode)
    except ValueError as exc:
        if "sleep mode" in str(exc):
            raise ConfigError("vllm_enable_sleep_mode", str(exc)) from None
        raise


def engine_max_model_len(config: RunConfig, model_config: Any) -> int:
    """vllm_max_model_len, else max_context_length within the model's own positions (`model_config`:
    the base model's transformers config)."""
    if config.vllm_max_model_len:
        return config.vllm_max_model_len
    positions = getattr(model_config, "max_position_embeddings", None)
    return min(config.max_context_length, positions or config.max_context_length)
