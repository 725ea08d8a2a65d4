"""The inspector's *Replay this module* (issue 57 item 4): sampling G new outputs for one call of a
stored trajectory with the run's adapter, keeping the earlier calls, running the later modules and the
rewards again (MHGPO's fork at an agent, trainer/rollouts/replay.py).

- `services.py`: what a replay would cost and whether it may run (`replay_plan`), asking for one
  (`replay_request`: a queued `Replay` row, its task enqueued after commit on the `gpu` queue, where
  runs train), the worker's claim (compare-and-set), its request for the trainer and its result.
- `selectors.py`: the replays of a call or of an inspector page, and who may start one.
- `views.py`: the confirm page (GET shows the cost, POST starts it) and the call's replays page.
"""
