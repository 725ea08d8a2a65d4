"""Cohort's trainer: group-relative RL (MMGRPO, MHGPO, GDPO) on multi-module LM programs, without Django.

The packages, from the top of the house down (docs/explanation/architecture.md; imports only go down, and
`make lint` holds them to it):

- `run/`: a run end to end: the composition root, the loop, checkpoints, reporting, the CLI;
- `dspy/`: DSPy programs as Cohort programs, and phase 1's prompt optimization;
- `backends/` (samplers: transformers, vLLM) and `policy/` (LoRA, log-probs, the update, sharding);
- `algorithms/` (groups, advantages, reward propagation, the loss), `programs/`, `models/`;
- `config/`: `RunConfig`, the one place a setting is declared;
- `rewards/`, then `rollouts/` (trajectories, prompts, sampling), `plugins`, `data`.
"""
