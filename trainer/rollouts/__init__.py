"""Rollouts: what a program is to the trainer (`program`), the samplers that run it (`sampling`,
`engine`), the trajectories they record (`trajectory`), how prompts are rendered (`prompts`), and
how a rollout's failure is told from a bug (`failures`)."""
