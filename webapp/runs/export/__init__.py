"""What leaves a run whole: its metrics as CSV and its rollouts as JSON Lines, streamed (`streams`,
`views`), and its trained LoRA adapter (`adapters`)."""
