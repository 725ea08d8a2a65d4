"""The algorithms of the three papers: module-level groups (MMGRPO), reward propagation and
multi-agent groups (MHGPO), advantage estimators (GRPO, GDPO), the clipped policy loss, and the
metrics that describe a step's groups. Pure functions of trajectories and numbers: no model here."""
