"""Comparisons down to the example (issue 57): one example's answers across runs and steps with
diffs (`across`), and the examples where two runs part (`partways`)."""
