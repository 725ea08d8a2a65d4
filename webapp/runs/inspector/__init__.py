"""What the inspectors read and draw: a step and one example's trajectories (`steps`), a module-level
group (`groups`), where the best and worst rollouts part (`divergence`), an example's history across
steps (`history`, `history_views`), per-token details (`token_reads`), and the cells the pages show
(`grid_cells` for the trajectory grid's HTML, `token_cells` for static/js/tokens.js, `token_pieces`
for how one token reads)."""
