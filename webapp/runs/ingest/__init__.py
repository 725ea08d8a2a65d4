"""A step arrives: `store.step_events_ingest` stores a run's step events (metrics, rollouts, calls,
groups) once per (run, attempt, step); `texts` and `tokens` are the codecs of the calls' texts and
per-token details; `retention` keeps a run's rows within its budget; `external` is the door for runs
trained elsewhere (the logging API), `lost` marks those whose trainer went silent, and `prompt_phase`
keeps phase 1 of a run that optimizes prompts first."""
