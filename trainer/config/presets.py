"""The paper presets: each paper's setup as field values of `RunConfig`. `from_preset` (a
`RunConfig` from one of them) is in `trainer.config.run_config`, whose `RunConfig.from_toml` uses it."""

from __future__ import annotations

from typing import Any

# --- presets reproducing each paper's setup -------------------------------------------------------
PRESETS: dict[str, dict[str, Any]] = {
    "mmgrpo-paper": {
        "_title": "MMGRPO (Section 5.2): module-level groups, 750 steps x 4 examples x 12 rollouts, 2 GPUs",
        "strategy": "mmgrpo", "padding": "fill", "num_processes": 2,
        "steps": 750, "examples_per_step": 4, "rollouts_per_example": 12, "group_size": 12,
        "learning_rate": 1e-5, "gradient_accumulation_steps": 20, "micro_batch_size": 1,
        "kl_beta": 0.01, "max_grad_norm": 0.1,  # qwen3-8b values; llama3.1-8b used 0.04 and 0.5
        "temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_context_length": 8192,
        "lora_r": 16, "lora_alpha": 64, "lora_dropout": 0.05, "loss_aggregation": "sequence",
    },
    "mhgpo-fof": {
        "_title": "MHGPO Fork-on-First (Table 2): G=4, batch 512, lr 1e-6, clip 0.2, beta 0.001, 176 steps, 8 GPUs",
        "strategy": "mhgpo", "sampling": "fof", "num_processes": 8, "group_size": 4, "rollouts_per_example": 4,
        "examples_per_step": 512, "steps": 176, "learning_rate": 1e-6, "clip_eps_low": 0.2,
        "clip_eps_high": 0.2, "top_p": 0.9, "kl_beta": 0.001, "loss_aggregation": "token",
    },
    "mhgpo-is": {
        "_title": "MHGPO Independent Sampling (Table 2 settings, 8 GPUs)",
        "strategy": "mhgpo", "sampling": "is", "num_processes": 8, "group_size": 4, "rollouts_per_example": 4,
        "examples_per_step": 512, "steps": 176, "learning_rate": 1e-6, "top_p": 0.9, "kl_beta": 0.001,
        "loss_aggregation": "token",
    },
    "mhgpo-rr": {
        "_title": "MHGPO Round-Robin (Table 2 settings, fork probabilities 0.7/0.1/0.2, 8 GPUs)",
        "strategy": "mhgpo", "sampling": "rr", "num_processes": 8, "fork_probabilities": [0.7, 0.1, 0.2], "group_size": 4,
        "rollouts_per_example": 4, "examples_per_step": 512, "steps": 176, "learning_rate": 1e-6,
        "top_p": 0.9, "kl_beta": 0.001, "loss_aggregation": "token",
    },
    "gdpo-toolrl": {
        "_title": "GDPO tool calling (Appendix D): format + correctness, 4 rollouts, batch 512, lr 1e-6, 8 GPUs",
        "estimator": "gdpo", "num_processes": 8, "group_size": 4, "rollouts_per_example": 4, "examples_per_step": 512,
        "steps": 100, "learning_rate": 1e-6, "kl_beta": 0.001, "max_new_tokens": 1024,
        "max_context_length": 2048 + 1024,
        "rewards": [{"name": "toolrl_format"}, {"name": "toolrl_correctness"}],
    },
    "gdpo-math": {
        "_title": "GDPO math (Appendix E): correctness + conditioned length, 16 rollouts, clip 0.2/0.28, 8 GPUs",
        "estimator": "gdpo", "num_processes": 8, "group_size": 16, "rollouts_per_example": 16, "examples_per_step": 512,
        "steps": 500, "learning_rate": 1e-6, "temperature": 1.0, "clip_eps_low": 0.2, "clip_eps_high": 0.28,
        "kl_beta": 0.0005, "loss_aggregation": "token", "max_new_tokens": 8000, "max_context_length": 1024 + 8000,
        "rewards": [{"name": "numeric_match"},
                    {"name": "length", "params": {"limit": 4000}, "condition_on": "numeric_match", "threshold": 1.0}],
    },
}


def preset_titles() -> dict[str, str]:
    return {name: values["_title"] for name, values in PRESETS.items()}


def preset_values(name: str) -> dict[str, Any]:
    """The field values of a preset (without its title)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}.")
    return {k: v for k, v in PRESETS[name].items() if not k.startswith("_")}

